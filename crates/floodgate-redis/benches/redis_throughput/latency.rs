//! The latency phase: decisions scheduled open loop at a fixed rate, each
//! timed from its scheduled start, and the report of the slowest ones.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate_redis::RedisBackend;

use super::{CALLERS, Work, decide_one, limits};

/// One timed decision of the latency phase.
#[derive(Clone, Copy)]
pub(crate) struct Sample {
    /// Its scheduled start, from the start of the phase (µs).
    pub(crate) at: u64,
    /// From its scheduled start to its answer.
    pub(crate) total: Duration,
    /// From its scheduled start until a caller began it.
    pub(crate) wait: Duration,
    /// From the call's start until the script read Redis's clock (µs, both
    /// wall clocks of this machine).
    pub(crate) to_redis: i64,
    /// From the script reading Redis's clock until the answer (µs).
    pub(crate) from_redis: i64,
}

/// This machine's wall clock in µs since the Unix epoch (Redis's `TIME`).
fn wall_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The pacer wakes up at most once per `TICK`, and only when a decision is
/// due: every wake-up costs the client's core, and on a virtual machine an
/// idle core's wake-up costs a lot (a 50 µs periodic tick alone took 44 % of
/// a core here).
const TICK: Duration = Duration::from_micros(50);

/// A one-shot timer with microsecond precision in the runtime's own event
/// loop (a `timerfd`): tokio's timers have a granularity of 1 ms, which
/// would bunch the schedule into bursts, and a pacer thread would compete
/// with the runtime's worker for its core.
#[cfg(target_os = "linux")]
struct Alarm(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

#[cfg(target_os = "linux")]
impl Alarm {
    fn new() -> Alarm {
        use std::os::fd::FromRawFd;
        // SAFETY: a plain syscall; the descriptor is owned from here on.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        assert!(fd >= 0, "timerfd_create");
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: the `OwnedFd` stays open, and the same descriptor, for as
        // long as the `AsyncFd` owns it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        };
        Alarm(
            fd.map_err(|e| e.to_string())
                .expect("timerfd in the runtime"),
        )
    }

    /// Returns at `at` (at once if it has passed).
    async fn until(&mut self, at: Instant) {
        use std::os::fd::AsRawFd;
        let wait = at.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return;
        }
        let fd = self.0.get_ref().as_raw_fd();
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: wait.as_secs() as _,
                tv_nsec: wait.subsec_nanos().into(),
            },
        };
        // SAFETY: a plain syscall on a descriptor we own.
        let ok = unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) };
        assert_eq!(ok, 0, "timerfd_settime");
        loop {
            let mut guard = self.0.readable().await.expect("timerfd");
            let mut expired = 0u64;
            // SAFETY: reads at most 8 bytes into a u64.
            let n = unsafe { libc::read(fd, (&mut expired as *mut u64).cast(), 8) };
            if n == 8 {
                return;
            }
            guard.clear_ready();
        }
    }
}

/// Elsewhere, tokio's own timer (1 ms granularity: coarser bursts).
#[cfg(not(target_os = "linux"))]
struct Alarm;

#[cfg(not(target_os = "linux"))]
impl Alarm {
    fn new() -> Alarm {
        Alarm
    }

    async fn until(&mut self, at: Instant) {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// Latencies at `rate` decisions per second, open loop: decision `k` is
/// scheduled at `k / rate` seconds; whenever it wakes up the pacer queues the
/// decisions due by then and the `CALLERS` callers take them in order. Each
/// is timed from its scheduled start, however late a caller takes it (no
/// coordinated omission), and every scheduled decision is measured.
pub(crate) async fn latency(
    b: &Arc<RedisBackend>,
    work: Work,
    rate: f64,
    dur: Duration,
) -> Vec<Sample> {
    let due = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let permits = Arc::new(tokio::sync::Semaphore::new(0));
    let total = (dur.as_secs_f64() * rate) as u64;
    let start = Instant::now();
    let pacer = {
        let (permits, due) = (permits.clone(), due.clone());
        tokio::spawn(async move {
            let mut alarm = Alarm::new();
            let mut k = 0u64;
            let mut woke = start;
            while k < total {
                let next = start + Duration::from_secs_f64(k as f64 / rate);
                alarm.until(next.max(woke + TICK)).await;
                let now = Instant::now();
                woke = now;
                let mut queue = due.lock().expect("schedule");
                let mut n = 0;
                while k < total {
                    let at = start + Duration::from_secs_f64(k as f64 / rate);
                    if at > now {
                        break;
                    }
                    queue.push_back(Some(at));
                    k += 1;
                    n += 1;
                }
                if k == total {
                    // One end marker per caller.
                    queue.extend(std::iter::repeat_n(None, CALLERS));
                    n += CALLERS;
                }
                drop(queue);
                permits.add_permits(n);
            }
        })
    };
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (b, permits, due) = (b.clone(), permits.clone(), due.clone());
            tokio::spawn(async move {
                let limits = limits();
                let mut rng = 0x2545_F491_4F6C_DD1Du64 ^ ((i as u64 + 1) * 0x1000_0001);
                let mut lat = Vec::new();
                loop {
                    permits.acquire().await.expect("never closed").forget();
                    let next = due.lock().expect("schedule").pop_front();
                    let Some(Some(at)) = next else { break };
                    let began = Instant::now();
                    let sent = wall_us();
                    let redis = decide_one(&b, work, &limits, &mut rng).await;
                    let answered = wall_us();
                    let done = Instant::now();
                    lat.push(Sample {
                        at: (at - start).as_micros() as u64,
                        total: done - at,
                        wait: began - at,
                        to_redis: redis - sent,
                        from_redis: answered - redis,
                    });
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("caller"));
    }
    pacer.await.expect("pacer");
    all.sort_by_key(|s| s.total);
    all
}

pub(crate) fn pct<T: Copy>(sorted: &[T], p: f64) -> T {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Where the time went: the parts' percentiles, and their means over the
/// slowest 1 % (`lat` sorted by total). Writes every sample to
/// `BENCH_DUMP` if set.
pub(crate) fn breakdown(lat: &[Sample]) {
    let mut wait: Vec<Duration> = lat.iter().map(|s| s.wait).collect();
    // What a closed-loop measurement (timed from the caller's start) sees.
    let mut call: Vec<Duration> = lat.iter().map(|s| s.total - s.wait).collect();
    call.sort();
    println!(
        "  timed from a caller's start instead (hides the waiting): p50 {:?} p99 {:?}",
        pct(&call, 0.5),
        pct(&call, 0.99),
    );
    let mut to: Vec<i64> = lat.iter().map(|s| s.to_redis).collect();
    let mut from: Vec<i64> = lat.iter().map(|s| s.from_redis).collect();
    wait.sort();
    to.sort();
    from.sort();
    println!(
        "  parts: waiting for a caller p50 {:?} p99 {:?}; to Redis's clock p50 {} µs p99 {} µs; \
         from it to the answer p50 {} µs p99 {} µs",
        pct(&wait, 0.5),
        pct(&wait, 0.99),
        pct(&to, 0.5),
        pct(&to, 0.99),
        pct(&from, 0.5),
        pct(&from, 0.99),
    );
    let tail = &lat[lat.len() * 99 / 100..];
    let mean = |f: &dyn Fn(&Sample) -> f64| tail.iter().map(f).sum::<f64>() / tail.len() as f64;
    println!(
        "  slowest 1 %: {:.0} µs on average = waiting {:.0} + to Redis {:.0} + back {:.0}",
        mean(&|s| s.total.as_secs_f64() * 1e6),
        mean(&|s| s.wait.as_secs_f64() * 1e6),
        mean(&|s| s.to_redis as f64),
        mean(&|s| s.from_redis as f64),
    );
    if let Ok(path) = std::env::var("BENCH_DUMP") {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("BENCH_DUMP"));
        writeln!(
            f,
            "# scheduled_us total_us wait_us to_redis_us from_redis_us"
        )
        .expect("dump");
        let mut by_time = lat.to_vec();
        by_time.sort_by_key(|s| s.at);
        for s in by_time {
            writeln!(
                f,
                "{} {} {} {} {}",
                s.at,
                s.total.as_micros(),
                s.wait.as_micros(),
                s.to_redis,
                s.from_redis
            )
            .expect("dump");
        }
        println!("  samples written to {path}");
    }
}
