//! Putting lines in arrival order: logs are written when requests end,
//! so a slow request's line comes after quicker ones that arrived later.
//!
//! Lines are held until the log has moved `window` past them, and let go
//! in arrival order (ties: in log order). A line that arrives after a
//! later one was let go — more than about `window` out of order — cannot
//! be placed: it is reported as late and not decided.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::record::Parsed;

/// A line waiting: its time, where it is.
#[derive(Clone, Copy, Debug)]
struct Item {
    time: u64,
    batch: u64,
    idx: u32,
}

/// Lines in arrival order, ready to decide: records of some chunks.
#[derive(Debug, Default)]
pub(crate) struct Ordered {
    /// The chunks the items point into.
    pub parsed: Vec<Arc<Parsed>>,
    /// (index in `parsed`, record index), in arrival order.
    pub items: Vec<(u32, u32)>,
}

impl Ordered {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

/// A line that came too late to be put in order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Late {
    pub line: u64,
    /// How far behind the last line let go it was, in nanoseconds.
    pub behind: u64,
}

/// The reordering window.
#[derive(Debug)]
pub(crate) struct Reorder {
    window: u64,
    pending: VecDeque<Item>,
    /// Chunks with lines pending: (number, chunk, lines still pending).
    chunks: VecDeque<(u64, Arc<Parsed>, usize)>,
    next_chunk: u64,
    max_seen: u64,
    /// The time of the last line let go.
    released: Option<u64>,
    /// The chunk being taken (kept while it has no line pending yet).
    filling: Option<u64>,
    out: Ordered,
    /// Lines most held at once.
    pub peak: usize,
}

impl Reorder {
    pub(crate) fn new(window: u64) -> Self {
        Reorder {
            window,
            pending: VecDeque::new(),
            chunks: VecDeque::new(),
            next_chunk: 0,
            max_seen: 0,
            released: None,
            filling: None,
            out: Ordered::default(),
            peak: 0,
        }
    }

    /// Takes a chunk's lines, letting go of lines as the window passes
    /// them; late ones are passed to `late`.
    pub(crate) fn push(&mut self, parsed: Parsed, mut late: impl FnMut(Late)) {
        let number = self.next_chunk;
        self.next_chunk += 1;
        let chunk = Arc::new(parsed);
        self.chunks.push_back((number, Arc::clone(&chunk), 0));
        self.filling = Some(number);
        for (idx, r) in chunk.recs.iter().enumerate() {
            if let Some(t) = self.released
                && r.time < t
            {
                late(Late {
                    line: r.line,
                    behind: t - r.time,
                });
                continue;
            }
            let item = Item {
                time: r.time,
                batch: number,
                idx: idx as u32,
            };
            // Nearly always at the end: find the place from there.
            let mut at = self.pending.len();
            while at > 0 && self.pending[at - 1].time > item.time {
                at -= 1;
                if self.pending.len() - at > 32 {
                    at = self.pending.partition_point(|p| p.time <= item.time);
                    break;
                }
            }
            self.pending.insert(at, item);
            if let Some(c) = self.chunks.back_mut() {
                c.2 += 1;
            }
            self.peak = self.peak.max(self.pending.len());
            if r.time > self.max_seen {
                self.max_seen = r.time;
                self.release(false);
            }
        }
        self.filling = None;
        self.drop_done();
    }

    fn drop_done(&mut self) {
        while self
            .chunks
            .front()
            .is_some_and(|c| c.2 == 0 && Some(c.0) != self.filling)
        {
            self.chunks.pop_front();
        }
    }

    /// Lets go of every line the window has passed (all of them at the
    /// end of the input), into the current [`Ordered`] batch.
    pub(crate) fn release(&mut self, all: bool) {
        let limit = self.max_seen.saturating_sub(self.window);
        while let Some(&front) = self.pending.front() {
            if !all && front.time > limit {
                break;
            }
            self.pending.pop_front();
            self.released = Some(front.time);
            let Some(k) = self.chunks.iter().position(|(n, _, _)| *n == front.batch) else {
                continue;
            };
            let chunk = Arc::clone(&self.chunks[k].1);
            let local = match self.out.parsed.iter().rposition(|p| Arc::ptr_eq(p, &chunk)) {
                Some(i) => i,
                None => {
                    self.out.parsed.push(chunk);
                    self.out.parsed.len() - 1
                }
            };
            self.out.items.push((local as u32, front.idx));
            self.chunks[k].2 -= 1;
        }
        self.drop_done();
    }

    /// The lines let go so far, leaving an empty batch.
    pub(crate) fn take(&mut self) -> Ordered {
        std::mem::take(&mut self.out)
    }

    /// Lines let go but not taken.
    pub(crate) fn ready(&self) -> usize {
        self.out.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Rec;

    fn chunk(times: &[(u64, u64)]) -> Parsed {
        Parsed {
            recs: times
                .iter()
                .map(|&(line, time)| Rec {
                    file: 0,
                    line,
                    time,
                    duration: None,
                    status: 0,
                    sets: 0,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn lines(o: &Ordered) -> Vec<u64> {
        o.items
            .iter()
            .map(|&(p, i)| o.parsed[p as usize].recs[i as usize].line)
            .collect()
    }

    #[test]
    fn sorts_within_the_window_and_reports_the_rest() {
        let mut r = Reorder::new(10);
        let mut late = Vec::new();
        r.push(chunk(&[(1, 100), (2, 95), (3, 120)]), |l| late.push(l));
        // 120 - 10 = 110: 95 and 100 go, in time order.
        assert_eq!(lines(&r.take()), [2, 1]);
        r.push(chunk(&[(4, 99), (5, 115), (6, 112), (7, 150)]), |l| {
            late.push(l);
        });
        assert_eq!(late.len(), 1);
        assert_eq!((late[0].line, late[0].behind), (4, 1));
        assert_eq!(lines(&r.take()), [6, 5, 3]);
        // Late within one chunk too: 119 comes after 120 went.
        r.push(chunk(&[(8, 150), (9, 149), (10, 151), (11, 119)]), |l| {
            late.push(l);
        });
        assert_eq!(late.len(), 2);
        assert_eq!(late[1].line, 11);
        r.release(true);
        // Ties keep log order.
        assert_eq!(lines(&r.take()), [9, 7, 8, 10]);
        assert!(r.chunks.is_empty());
        assert_eq!(r.peak, 4);
    }
}
