//! Counts over time in a bounded number of buckets: when the log outgrows
//! them, buckets are merged pairwise (their width doubles), so a day of
//! logs and a year of logs take the same memory.

use serde::Serialize;

/// Most buckets kept.
pub const MAX_BUCKETS: usize = 600;
/// The narrowest bucket: one second.
const FIRST_WIDTH: u64 = 1_000_000_000;

/// Series of counts sharing one time axis.
#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    /// The first bucket's start, nanoseconds since the Unix epoch.
    pub origin: u64,
    /// A bucket's width in nanoseconds.
    pub width: u64,
    /// Buckets used.
    pub len: usize,
    /// The series, each `len` long (a series only present once used).
    #[serde(skip)]
    pub(crate) series: Vec<Option<Vec<u64>>>,
}

impl Timeline {
    /// An empty timeline of `series` series.
    pub(crate) fn new(series: usize) -> Self {
        Timeline {
            origin: 0,
            width: FIRST_WIDTH,
            len: 0,
            series: vec![None; series],
        }
    }

    /// The bucket of time `t` (nanoseconds), growing or merging as needed.
    pub(crate) fn bucket(&mut self, t: u64) -> usize {
        if self.len == 0 {
            self.origin = t - t % self.width;
            self.len = 1;
        }
        let t = t.max(self.origin);
        let mut k = ((t - self.origin) / self.width) as usize;
        while k >= MAX_BUCKETS {
            self.merge();
            k = ((t - self.origin) / self.width) as usize;
        }
        if k >= self.len {
            self.len = k + 1;
        }
        k
    }

    /// Halves the resolution: buckets twice as wide, merged in pairs.
    fn merge(&mut self) {
        let width = self.width * 2;
        let origin = self.origin - self.origin % width;
        let shift = ((self.origin - origin) / self.width) as usize;
        for s in self.series.iter_mut().flatten() {
            let mut merged = vec![0; MAX_BUCKETS];
            for (i, v) in s.iter().enumerate() {
                merged[(i + shift) / 2] += v;
            }
            *s = merged;
        }
        self.len = (self.len + shift).div_ceil(2);
        self.origin = origin;
        self.width = width;
    }

    /// Adds `n` to series `s` at bucket `k`.
    pub(crate) fn add(&mut self, s: usize, k: usize, n: u64) {
        if s >= self.series.len() {
            self.series.resize(s + 1, None);
        }
        let v = self.series[s].get_or_insert_with(|| vec![0; MAX_BUCKETS]);
        v[k] += n;
    }

    /// Series `s`, `len` buckets (zeros when never used).
    pub fn get(&self, s: usize) -> Vec<u64> {
        match self.series.get(s).and_then(Option::as_ref) {
            Some(v) => v[..self.len].to_vec(),
            None => vec![0; self.len],
        }
    }

    /// The start of bucket `k`, nanoseconds since the Unix epoch.
    pub fn start_of(&self, k: usize) -> u64 {
        self.origin + k as u64 * self.width
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_keep_totals_and_times() {
        let mut t = Timeline::new(1);
        let base = 1_000 * FIRST_WIDTH + 7;
        let mut total = 0;
        for i in 0..5000u64 {
            let at = base + i * FIRST_WIDTH / 2;
            let k = t.bucket(at);
            assert!(t.start_of(k) <= at && at < t.start_of(k) + t.width);
            t.add(0, k, 1);
            total += 1;
        }
        assert!(t.len <= MAX_BUCKETS);
        assert_eq!(t.get(0).iter().sum::<u64>(), total);
        assert_eq!(t.width, 8 * FIRST_WIDTH);
    }
}
