//! Two-thread scaling on a shared machine: best of many short trials.
//!
//! `cargo bench -p floodgate --bench scaling`
//!
//! The `decisions` benchmark reports criterion's estimate over seconds of
//! samples, which on a machine whose cores other processes also use measures
//! how much CPU the two threads were given as much as how the store scales.
//! This one alternates short trials (200 000 decisions per thread, a few
//! milliseconds) of one thread, two threads on one limiter, and, as a control,
//! two threads on two separate limiters (nothing shared), and reports the
//! fastest and the median of each: the fastest trials are those in which
//! both threads had a core to themselves. A fourth case, two threads on one
//! limiter with disjoint keys (one takes the even keys, the other the odd
//! ones, same table), separates what sharing the shard locks costs from
//! what sharing the keys' own entries costs. The `floor_P_Q` rows are no
//! limiter: one atomic update of a per-key cache line between `P` rounds
//! of arithmetic that do not need the key's state and `Q` that do, and
//! `floor_lock_P_Q` the same under a shard lock (see `Floor`): the least a
//! decision of that shape does, so their speed-ups on shared keys are what
//! this machine allows such decisions. Keys and quotas are those of the
//! `decisions` benchmark at 10 000 keys (`KEYS` and `TRIALS` override;
//! names after `--` select limiters).

mod keys;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use floodgate::algorithms::{FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingWindow};
use floodgate::{Algorithm, MAX_COUNT, RateLimiter, StoreConfig};
use keys::{STREAM, stream};

trait Decide: Send + Sync {
    fn decide(&self, key: u64) -> bool;
}

impl<A: Algorithm> Decide for RateLimiter<u64, A> {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        self.check(&key).is_allowed()
    }
}

struct Governor(governor::DefaultKeyedRateLimiter<u64>);

impl Decide for Governor {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }
}

/// What two cores sharing keys allow on this machine, for a decision of a
/// given shape (no limiter; the rows `floor_P_Q`): ask for the key's state
/// line for writing, do `P` rounds of arithmetic that do not need the state
/// (as a decision hashes its key and reads the clock), update the state
/// with one atomic instruction, then do `Q` rounds that depend on the value
/// read (as a decision probes the table and runs its algorithm on the
/// state). Each state is alone on its cache line and found without hashing
/// or locking, so nothing else is shared: the rows show how the speed-up on
/// shared keys depends on how much of a decision can proceed while the
/// state is still on its way from the other core.
///
/// `floor_lock_P_Q` does the same under one of 64 shard locks (each on a
/// line of its own, asked for with the state's line), the state read and
/// written plainly while the lock is held: two lines per decision, as the
/// store's.
struct Floor {
    lines: Box<[CachePadded<AtomicU64>]>,
    locks: Option<Box<[CachePadded<AtomicBool>]>>,
    before: u32,
    after: u32,
}

#[inline(always)]
fn mix(mut h: u64, rounds: u32) -> u64 {
    for _ in 0..rounds {
        h = (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    }
    h
}

#[inline(always)]
fn prefetch_write(addr: *const i8) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(addr);
    }
}

impl Floor {
    fn new(name: &str, keys: u64) -> Option<Self> {
        let shape = name.strip_prefix("floor_")?;
        let (locked, shape) = match shape.strip_prefix("lock_") {
            Some(rest) => (true, rest),
            None => (false, shape),
        };
        let mut shape = shape.split('_');
        let before = shape.next()?.parse().ok()?;
        let after = shape.next()?.parse().ok()?;
        Some(Floor {
            lines: (0..=keys)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            locks: locked.then(|| {
                (0..64)
                    .map(|_| CachePadded::new(AtomicBool::new(false)))
                    .collect()
            }),
            before,
            after,
        })
    }
}

impl Decide for Floor {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        let line = &self.lines[key as usize % self.lines.len()];
        let lock = self
            .locks
            .as_ref()
            .map(|l| &l[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize]);
        prefetch_write(&**line as *const AtomicU64 as *const i8);
        if let Some(lock) = lock {
            prefetch_write(&**lock as *const AtomicBool as *const i8);
        }
        let h = mix(key, self.before);
        let Some(lock) = lock else {
            let v = line.fetch_add(h | 1, Ordering::AcqRel);
            return mix(v, self.after) & 1 == 0;
        };
        while lock.swap(true, Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let v = line.load(Ordering::Relaxed);
        line.store(v.wrapping_add(h | 1), Ordering::Relaxed);
        let admit = mix(v, self.after) & 1 == 0;
        lock.store(false, Ordering::Release);
        admit
    }
}

fn floodgate<A: Algorithm + 'static>(limit: A) -> Arc<dyn Decide> {
    Arc::new(
        RateLimiter::with_config(
            limit,
            StoreConfig::with_capacity(2_000_000),
            floodgate::SystemClock,
        )
        .unwrap(),
    )
}

fn make(name: &str, keys: u64) -> Arc<dyn Decide> {
    if let Some(floor) = Floor::new(name, keys) {
        return Arc::new(floor);
    }
    let sec = Duration::from_secs(1);
    match name {
        "governor" => Arc::new(Governor(governor::RateLimiter::keyed(
            governor::Quota::per_second(NonZeroU32::MAX),
        ))),
        "gcra" => floodgate(Gcra::new(1, Duration::from_nanos(1), u64::from(u32::MAX)).unwrap()),
        "fixed_window" => floodgate(FixedWindow::new(MAX_COUNT, sec).unwrap()),
        "sliding_window" => floodgate(SlidingWindow::new(u64::from(u32::MAX), sec).unwrap()),
        _ => floodgate(
            Shaper::new(NginxRate::PerSecond(1 << 30), 1 << 30, ShaperDelay::NoDelay).unwrap(),
        ),
    }
}

/// Which keys a thread uses: all (`(!0, 0)`), or those of one parity
/// (`(!1, 0)` even, `(!1, 1)` odd): `key & mask | bit`.
type Keys = (u64, u64);
const ALL: Keys = (!0, 0);

#[inline(never)]
fn run(l: &dyn Decide, keys: &[u64], start: usize, n: usize, (mask, bit): Keys) -> u64 {
    let mut admitted = 0;
    for i in 0..n {
        let key = keys[(start + i) & (STREAM - 1)] & mask | bit;
        admitted += u64::from(l.decide(black_box(key)));
    }
    admitted
}

/// ns per decision: fastest and median.
fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

fn main() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    // Under `cargo test` only check that it runs.
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let keys = env("KEYS", 10_000);
    let trials = if bench_mode {
        env("TRIALS", 60) as usize
    } else {
        1
    };
    let n = if bench_mode { 200_000 } else { 1_000 };
    let st = Arc::new(stream(keys));
    println!(
        "{keys} keys, {trials} trials, ns per decision (2 threads: aggregate), fastest / median"
    );
    println!(
        "{:16} {:>15} {:>15} {:>15} {:>15} {:>9} {:>9} {:>9}",
        "", "1 thread", "2 shared", "2 separate", "2 disjoint", "speed-up", "separate", "disjoint"
    );
    let names = [
        "governor",
        "gcra",
        "fixed_window",
        "sliding_window",
        "shaper",
        "floor_28_0",
        "floor_20_8",
        "floor_14_14",
        "floor_8_20",
        "floor_lock_20_8",
        "floor_lock_14_14",
        "floor_lock_8_20",
    ];
    // Names given on the command line select limiters.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for name in names {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let (shared, other) = (make(name, keys), make(name, keys));
        for k in 0..keys {
            shared.decide(k);
            other.decide(k);
        }
        // A helper thread runs the second half of each two-thread trial on
        // the limiter it is sent.
        let bar = Arc::new(Barrier::new(2));
        let (tx, rx) = mpsc::channel::<Option<(Arc<dyn Decide>, usize, Keys)>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let helper = {
            let (st, bar) = (st.clone(), bar.clone());
            std::thread::spawn(move || {
                while let Ok(Some((l, start, keys))) = rx.recv() {
                    bar.wait();
                    black_box(run(&*l, &st, start, n, keys));
                    done_tx.send(()).unwrap();
                }
            })
        };
        let (mut one, mut two, mut sep, mut dis) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut start = 0usize;
        for _ in 0..trials {
            let t = Instant::now();
            black_box(run(&*shared, &st, start, n, ALL));
            one.push(t.elapsed().as_nanos() as f64 / n as f64);
            let cases = [
                (&other, &mut sep, ALL, ALL),
                (&shared, &mut two, ALL, ALL),
                (&shared, &mut dis, (!1, 0), (!1, 1)),
            ];
            for (l, out, mine, its) in cases {
                start += n;
                tx.send(Some((l.clone(), start + STREAM / 2, its))).unwrap();
                bar.wait();
                let t = Instant::now();
                black_box(run(&*shared, &st, start, n, mine));
                done_rx.recv().unwrap();
                out.push(t.elapsed().as_nanos() as f64 / (2 * n) as f64);
            }
            start += n;
        }
        tx.send(None).unwrap();
        helper.join().unwrap();
        let (one, two, sep, dis) = (stats(one), stats(two), stats(sep), stats(dis));
        println!(
            "{name:16} {:>6.2} / {:>6.2} {:>6.2} / {:>6.2} {:>6.2} / {:>6.2} {:>6.2} / {:>6.2} {:>8.2}× {:>8.2}× {:>8.2}×",
            one.0,
            one.1,
            two.0,
            two.1,
            sep.0,
            sep.1,
            dis.0,
            dis.1,
            one.0 / two.0,
            one.0 / sep.0,
            one.0 / dis.0
        );
    }
}
