//! A normal client that keeps asking while an attack runs, and how it
//! fared: the measure of every hostile test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest any probe may take, attack or not.
pub(crate) const SLOWEST: Duration = Duration::from_secs(2);
/// The share of probes that must be answered within the time asked (the
/// median): a loaded 2-core machine delays some on its own; an attack
/// that denies service delays them all.
pub(crate) const SHARE: f64 = 0.5;

/// A client asking `GET` of a server again and again, each time on a new
/// connection (what an attack on connections or descriptors denies first),
/// from a thread of its own.
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Result<Duration, String>>>>,
}

impl Probe {
    /// Asks `GET path` of `addr` every `every` (HTTP/1.1, `Host: addr`,
    /// a name every listener answers, the admin listener's included;
    /// closed after the answer) until stopped.
    pub fn start(addr: SocketAddr, path: &str, every: Duration) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let thread = std::thread::spawn(move || {
            let mut results = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                let started = Instant::now();
                results.push(ask(addr, request.as_bytes()).map(|()| started.elapsed()));
                std::thread::sleep(every.saturating_sub(started.elapsed()));
            }
            results
        });
        Probe {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops asking; what every probe got.
    pub fn stop(mut self) -> Probed {
        self.stop.store(true, Ordering::Relaxed);
        let results = self
            .thread
            .take()
            .map(|t| t.join().expect("the probe thread"))
            .unwrap_or_default();
        Probed { results }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One request; `Ok` when it was answered 200 whole.
fn ask(addr: SocketAddr, request: &[u8]) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, SLOWEST).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(SLOWEST))
        .and_then(|()| s.set_write_timeout(Some(SLOWEST)))
        .map_err(|e| e.to_string())?;
    s.write_all(request).map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&out);
    if text.starts_with("HTTP/1.1 200 ") {
        Ok(())
    } else {
        Err(format!("answered {:?}", text.lines().next().unwrap_or("")))
    }
}

/// The median time of `n` calls of `f`, made one after the other.
pub fn median_time(n: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

/// What a [`Probe`] saw: each request's time, or why it failed.
#[derive(Debug)]
pub struct Probed {
    /// In order.
    pub results: Vec<Result<Duration, String>>,
}

impl Probed {
    /// Panics unless there were probes, every one was answered 200 within
    /// `SLOWEST` (2 s), and at least `SHARE` (half) of them within `within`.
    pub fn assert_served(&self, within: Duration, what: &str) {
        let n = self.results.len();
        assert!(n >= 5, "{what}: only {n} probes");
        let failed: Vec<&String> = self
            .results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .collect();
        assert!(
            failed.is_empty(),
            "{what}: {} of {n} probes failed: {failed:?}",
            failed.len()
        );
        let times: Vec<Duration> = self.results.iter().filter_map(|r| r.clone().ok()).collect();
        let slowest = times.iter().max().copied().unwrap_or_default();
        assert!(slowest <= SLOWEST, "{what}: a probe took {slowest:?}");
        let fast = times.iter().filter(|t| **t <= within).count();
        assert!(
            fast as f64 >= SHARE * n as f64,
            "{what}: {fast} of {n} probes within {within:?}: {times:?}"
        );
    }
}
