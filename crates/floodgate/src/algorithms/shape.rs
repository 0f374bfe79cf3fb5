//! What a limit looks like from outside its decisions: the name of its
//! algorithm in a configuration, the quota it reports, the windows it
//! counts in, and its parameters in words. Each algorithm answers in its
//! own module ([`Shape`]); [`AnyLimit`](super::AnyLimit) asks the one it
//! holds, in one exhaustive match per question.

use std::fmt;
use std::time::Duration;

/// A limit's quota as reported to clients (`RateLimit-Policy`, the
/// `limit` of a decision): how many units it admits at once, and over
/// what time that many are admitted again.
///
/// ```
/// use floodgate::algorithms::{AnyLimit, Concurrency, Gcra};
/// use std::time::Duration;
///
/// // A burst of 5 refilled at 10 per second: whole again after 500 ms.
/// let bucket = AnyLimit::from(Gcra::new(10, Duration::from_secs(1), 5).unwrap());
/// assert_eq!(bucket.quota().limit, 5);
/// assert_eq!(bucket.quota().window, Some(Duration::from_millis(500)));
/// // Units in flight come back with their releases, not with time.
/// assert_eq!(AnyLimit::from(Concurrency::new(3).unwrap()).quota().window, None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// The units admitted at once: a window's limit, a bucket's burst, a
    /// shaper's burst plus the request it passes, an in-flight maximum.
    pub limit: u64,
    /// The time over which `limit` units are admitted again (a window; a
    /// bucket's refill of its burst; a shaper's drain of its burst plus
    /// one); `None` for units held in flight.
    pub window: Option<Duration>,
}

/// What every algorithm tells about itself beyond its decisions. A new
/// algorithm implements it in its module; [`AnyLimit`](super::AnyLimit)
/// dispatches to it.
pub(crate) trait Shape {
    /// The algorithm's name in a configuration (`algorithm: ...`).
    fn name(&self) -> &'static str;

    /// The quota a client is told of.
    fn quota(&self) -> Quota;

    /// The length of the epoch-aligned window (or sub-window) that counts
    /// are kept by, `None` for an algorithm without windows.
    fn counting_window(&self) -> Option<Duration>;

    /// The epoch-aligned window at whose end everything counted is
    /// forgotten at once (a fixed window's); `None` when what was counted
    /// expires or drains gradually.
    fn reset_window(&self) -> Option<Duration>;

    /// The parameters in words, after the name: `100/60s`, `10 r/s burst 5`.
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// `limit/Ns`, the window in whole seconds rounded up (at least 1), as a
/// window limit describes itself.
pub(crate) fn per_window(f: &mut fmt::Formatter<'_>, limit: u64, window: Duration) -> fmt::Result {
    let secs = window.as_secs() + u64::from(window.subsec_nanos() > 0);
    write!(f, "{limit}/{}s", secs.max(1))
}

/// A duration of `nanos` ns, saturating.
pub(crate) fn saturating_nanos(nanos: u128) -> Duration {
    Duration::from_nanos(nanos.min(u128::from(u64::MAX)) as u64)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::algorithms::{
        AnyLimit, Concurrency, FixedWindow, Gcra, LimitKind, NginxRate, Shaper, ShaperDelay,
        SlidingLog, SlidingWindow, SubWindowCounter,
    };

    /// The number of algorithms, which [`ordinal`] numbers.
    const KINDS: usize = 7;

    /// A number per algorithm below [`KINDS`]: a new algorithm makes this
    /// match fail to compile, and the test below fail until it is in it.
    fn ordinal(limit: &AnyLimit) -> usize {
        match limit.kind() {
            LimitKind::Gcra(_) => 0,
            LimitKind::FixedWindow(_) => 1,
            LimitKind::SlidingWindow(_) => 2,
            LimitKind::SubWindows(_) => 3,
            LimitKind::SlidingLog(_) => 4,
            LimitKind::Shaper(_) => 5,
            LimitKind::Concurrency(_) => 6,
        }
    }

    /// One limit of every algorithm, and what it tells of itself: quota,
    /// window (ms), counting window (ms), reset window (ms), in words.
    #[allow(clippy::type_complexity)]
    fn every_algorithm() -> Vec<(
        AnyLimit,
        u64,
        Option<u64>,
        Option<u64>,
        Option<u64>,
        &'static str,
    )> {
        let s = Duration::from_secs;
        vec![
            (
                Gcra::new(3, s(1), 5).unwrap().into(),
                5,
                Some(1666),
                None,
                None,
                "token_bucket 3/1s burst 5",
            ),
            (
                FixedWindow::new(100, s(60)).unwrap().into(),
                100,
                Some(60_000),
                Some(60_000),
                Some(60_000),
                "fixed_window 100/60s",
            ),
            (
                SlidingWindow::new(10, Duration::from_millis(1500))
                    .unwrap()
                    .into(),
                10,
                Some(1500),
                Some(1500),
                None,
                "sliding_window 10/2s",
            ),
            (
                SubWindowCounter::new(10, s(60), 4).unwrap().into(),
                10,
                Some(60_000),
                Some(15_000),
                None,
                "sliding_window 10/60s",
            ),
            (
                SlidingLog::new(7, s(3600)).unwrap().into(),
                7,
                Some(3_600_000),
                None,
                None,
                "sliding_log 7/3600s",
            ),
            (
                Shaper::new(NginxRate::PerSecond(10), 5, ShaperDelay::Queue)
                    .unwrap()
                    .into(),
                6,
                Some(600),
                None,
                None,
                "shaper 10 r/s burst 5",
            ),
            (
                Concurrency::new(4).unwrap().into(),
                4,
                None,
                None,
                None,
                "concurrency 4",
            ),
        ]
    }

    #[test]
    fn every_algorithm_tells_its_name_quota_windows_and_words() {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        let mut seen = [false; KINDS];
        for (limit, quota, window, counting, reset, words) in every_algorithm() {
            seen[ordinal(&limit)] = true;
            assert_eq!(limit.quota().limit, quota, "{words}");
            assert_eq!(ms(limit.quota().window), window, "{words}");
            assert_eq!(ms(limit.counting_window()), counting, "{words}");
            assert_eq!(ms(limit.reset_window()), reset, "{words}");
            assert_eq!(limit.describe().to_string(), words);
            assert!(words.starts_with(limit.name()), "{words}");
        }
        assert_eq!(seen, [true; KINDS], "an algorithm is missing above");
    }
}
