//! Time as the algorithms see it: a [`Timestamp`] read from an injected [`Clock`].
//!
//! Every decision takes `now` as an argument; nothing in the algorithms reads a
//! clock by itself. Production code uses [`SystemClock`] (nanoseconds since the
//! Unix epoch, so fixed windows line up with wall-clock minutes, days and so
//! on); tests use [`ManualClock`] and move time by hand.

use std::ops::{Add, Sub};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time: nanoseconds since the clock's epoch (the Unix epoch for
/// [`SystemClock`]). Arithmetic saturates instead of overflowing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The epoch itself.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The largest representable instant (year 2554 for the Unix epoch).
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// A timestamp `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// A timestamp `micros` microseconds after the epoch (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros.saturating_mul(1_000))
    }

    /// A timestamp `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }

    /// A timestamp `secs` seconds after the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole microseconds since the epoch (rounded down).
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Whole milliseconds since the epoch (rounded down).
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Whole seconds since the epoch (rounded down).
    pub const fn as_secs(self) -> u64 {
        self.0 / 1_000_000_000
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_nanos(d)))
    }

    /// `self - d`, saturating at [`Timestamp::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_nanos(d)))
    }

    /// The time from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Duration) -> Timestamp {
        self.saturating_add(rhs)
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, rhs: Duration) -> Timestamp {
        self.saturating_sub(rhs)
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of time. Implementations must be cheap: one read per decision.
///
/// A clock is allowed to go backwards (NTP steps the wall clock); every
/// algorithm treats a timestamp earlier than one it has already seen as "no
/// time has passed", never as a free refill.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The wall clock: nanoseconds since the Unix epoch. Fixed windows therefore
/// start on wall-clock boundaries (a `DAY` window starts at midnight UTC), as
/// in Envoy's rate limit service.
///
/// Reading the operating system's wall clock costs about 30 ns, a large part
/// of a decision, so this clock reads the CPU's time-stamp counter (inline
/// `rdtsc`, scaled by `quanta`'s calibration, when `quanta` finds an
/// invariant TSC; `quanta`'s own clock otherwise) and adds an offset to the
/// Unix epoch that is re-read from the operating system once a second.
/// Reading it writes nothing shared (only the once-a-second re-read does).
/// Between re-reads it advances at the monotonic clock's rate. A re-read
/// moves it forward to the wall clock, or back by at most 1 ms (the drift
/// accumulated in a second is microseconds; a wall clock stepped back by
/// more is approached at 1 ms a second rather than followed). The store
/// treats any step back as no time elapsed.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

struct Anchor {
    clock: quanta::Clock,
    /// The raw counter reading at start.
    origin: u64,
    /// Nanoseconds per time-stamp-counter tick in 32.32 fixed point when
    /// quanta runs on the TSC (read inline with `rdtsc`), 0 otherwise.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    tsc_scale: u64,
    /// Unix nanoseconds minus monotonic nanoseconds (wrapping).
    offset: AtomicU64,
    /// Monotonic nanoseconds at which to re-read the wall clock.
    next_sync: AtomicU64,
}

const RESYNC_NANOS: u64 = 1_000_000_000;

fn os_wall_clock() -> u64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => duration_nanos(d),
        Err(_) => 0,
    }
}

impl Anchor {
    #[inline]
    fn get() -> &'static Anchor {
        static ANCHOR: std::sync::OnceLock<Anchor> = std::sync::OnceLock::new();
        ANCHOR.get_or_init(|| {
            let clock = quanta::Clock::new();
            let origin = clock.raw();
            // quanta scales raw readings only when they are TSC ticks; the
            // identity (a monotonic clock in nanoseconds, or a 1 GHz TSC)
            // keeps quanta's own reading.
            let scale = clock.delta_as_nanos(0, 1 << 32);
            let tsc_scale = if cfg!(target_arch = "x86_64") && scale != 1 << 32 {
                scale
            } else {
                0
            };
            Anchor {
                offset: AtomicU64::new(os_wall_clock()),
                next_sync: AtomicU64::new(RESYNC_NANOS),
                clock,
                origin,
                tsc_scale,
            }
        })
    }

    /// Monotonic nanoseconds since the anchor was made. Reads only.
    #[inline]
    fn mono(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc_scale != 0 {
            // SAFETY: quanta reads this counter itself (it checked that the
            // CPU has an invariant TSC); `rdtsc` has no preconditions.
            let raw = unsafe { core::arch::x86_64::_rdtsc() };
            let ticks = raw.saturating_sub(self.origin);
            return ((u128::from(ticks) * u128::from(self.tsc_scale)) >> 32) as u64;
        }
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }

    #[inline]
    fn now(&self) -> u64 {
        let mono = self.mono();
        if mono >= self.next_sync.load(Ordering::Relaxed) {
            self.resync(mono);
        }
        mono.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    #[cold]
    fn resync(&self, mono: u64) {
        self.next_sync
            .store(mono.saturating_add(RESYNC_NANOS), Ordering::Relaxed);
        let current = self.offset.load(Ordering::Relaxed);
        let target = os_wall_clock().wrapping_sub(mono);
        self.offset
            .store(next_offset(current, target), Ordering::Relaxed);
    }
}

/// The most the clock is moved back at one re-read: 1 ms a second.
const MAX_SLEW_BACK: u64 = 1_000_000;

/// The offset after a re-read: the wall clock's when it is ahead (the
/// clock jumps forward with it), otherwise at most [`MAX_SLEW_BACK`] less
/// than before, so that a wall clock stepped back (by hand, or by a time
/// daemon) is approached slowly instead of followed: the clock never steps
/// back by more than a millisecond, and the rate limiter never sees an hour
/// repeated.
fn next_offset(current: u64, target: u64) -> u64 {
    // Offsets wrap (Unix minus monotonic nanoseconds); compare the
    // difference as signed.
    let diff = target.wrapping_sub(current) as i64;
    if diff >= 0 {
        target
    } else {
        current.wrapping_sub(diff.unsigned_abs().min(MAX_SLEW_BACK))
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp(Anchor::get().now())
    }
}

/// A clock that only moves when told to. Shareable across threads.
///
/// ```
/// use floodgate::{Clock, ManualClock, Timestamp};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(Timestamp::from_secs(100));
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now(), Timestamp::from_millis(101_500));
/// clock.set(Timestamp::from_secs(50)); // time may go backwards too
/// assert_eq!(clock.now().as_secs(), 50);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock(AtomicU64::new(start.0))
    }

    /// Moves the clock forward by `d` (saturating).
    pub fn advance(&self, d: Duration) {
        let n = duration_nanos(d);
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(n))
            });
    }

    /// Sets the clock to `t`, forwards or backwards.
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_SLEW_BACK, next_offset};

    #[test]
    fn the_wall_clock_is_followed_forward_and_approached_backward() {
        let hour = 3_600_000_000_000u64;
        let base = 1_700_000_000_000_000_000u64;
        // Forward, by any amount: followed.
        assert_eq!(next_offset(base, base + hour), base + hour);
        assert_eq!(next_offset(base, base + 5), base + 5);
        // Back by a few microseconds (drift): followed.
        assert_eq!(next_offset(base, base - 3_000), base - 3_000);
        // Back by an hour: at most a millisecond per re-read.
        assert_eq!(next_offset(base, base - hour), base - MAX_SLEW_BACK);
        // Offsets wrap (Unix minus monotonic nanoseconds).
        assert_eq!(next_offset(u64::MAX, 4), 4);
        assert_eq!(next_offset(4, u64::MAX), u64::MAX);
    }
}
