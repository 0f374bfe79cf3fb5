//! Hostile clients over raw TCP, each kind holding a number of
//! connections open (those that cost the attacker nothing reopened as soon
//! as the server closes them), until stopped: the pressure the hostile
//! tests keep up while a [`Probe`](crate::Probe) measures the service
//! everyone else gets. The uploads are sent to `POST /slow?ms=10000`,
//! which a test upstream answers late.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// What an attacker's connection does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Connects and sends nothing.
    Silent,
    /// A request head that never ends, one byte per tick.
    DribbleHead,
    /// The HTTP/2 preface and `SETTINGS`, then no stream.
    Http2Idle,
    /// One request, then nothing on the kept-alive connection.
    IdleKeepAlive,
    /// A request announcing a large body, sent one byte per tick.
    SlowBody,
    /// A request announcing a body, ten bytes of it, then nothing.
    StalledBody,
}

impl Kind {
    fn opening(self) -> &'static [u8] {
        match self {
            Kind::Silent => b"",
            Kind::DribbleHead => b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ",
            Kind::Http2Idle => {
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
            }
            Kind::IdleKeepAlive => b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            Kind::SlowBody => {
                b"POST /slow?ms=10000 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
            }
            Kind::StalledBody => {
                b"POST /slow?ms=10000 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789"
            }
        }
    }

    /// Whether a connection the server closed is opened again (those
    /// that send a whole request are not: reopened at once, they would be
    /// a flood of requests, which rate limits are for).
    fn reopens(self) -> bool {
        matches!(self, Kind::Silent | Kind::DribbleHead)
    }

    fn tick(self) -> &'static [u8] {
        match self {
            Kind::DribbleHead => b"a",
            Kind::SlowBody => b"b",
            _ => b"",
        }
    }
}

/// Connections opened and closed by the server, per attacker.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Connections opened.
    pub opened: u64,
    /// Connections the server closed (or reset).
    pub closed_by_server: u64,
}

/// Running attackers.
pub struct Attack {
    stop: Arc<AtomicBool>,
    threads: Vec<(Kind, JoinHandle<Tally>)>,
}

impl Attack {
    /// Starts `n` connections of each `(kind, n)` against `addr`, ticking
    /// every `tick`.
    pub fn start(addr: SocketAddr, kinds: &[(Kind, usize)], tick: Duration) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = kinds
            .iter()
            .map(|&(kind, n)| {
                let stop = stop.clone();
                (
                    kind,
                    std::thread::spawn(move || run(addr, kind, n, tick, &stop)),
                )
            })
            .collect();
        Attack { stop, threads }
    }

    /// Stops; the tally of each kind.
    pub fn stop(self) -> Vec<(Kind, Tally)> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|(k, t)| (k, t.join().expect("attacker thread")))
            .collect()
    }
}

fn open(addr: SocketAddr, kind: Kind) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
    s.write_all(kind.opening()).ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// Whether the server closed `s` (what it sent is read and dropped).
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

fn run(addr: SocketAddr, kind: Kind, n: usize, tick: Duration, stop: &AtomicBool) -> Tally {
    let mut tally = Tally::default();
    let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        for c in &mut conns {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            match c {
                None if first || kind.reopens() => {
                    *c = open(addr, kind);
                    if c.is_some() {
                        tally.opened += 1;
                    }
                }
                None => {}
                Some(s) => {
                    let gone = closed(s)
                        || (!kind.tick().is_empty() && {
                            match s.write_all(kind.tick()) {
                                Ok(()) => false,
                                Err(e) => e.kind() != ErrorKind::WouldBlock,
                            }
                        });
                    if gone {
                        tally.closed_by_server += 1;
                        *c = None;
                    }
                }
            }
        }
        first = false;
        std::thread::sleep(tick);
    }
    tally
}
