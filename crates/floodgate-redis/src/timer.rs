//! A one-shot timer with microsecond resolution, re-armed for every
//! pipelining window ([`crate::window`]).
//!
//! On Linux it is a `timerfd` watched by the runtime's reactor: arming is
//! one `timerfd_settime`, expiry one wake-up and one `read`. tokio's own
//! timers count whole milliseconds, so a 150 µs window would last up to a
//! millisecond; they are the fallback elsewhere, or when no timerfd can be
//! made.

use std::pin::Pin;
use std::time::Duration;

#[cfg(target_os = "linux")]
use linux::Fd;

/// See the module docs.
pub(crate) struct Timer {
    #[cfg(target_os = "linux")]
    fd: Option<Fd>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Timer {
    pub(crate) fn new() -> Self {
        Timer {
            #[cfg(target_os = "linux")]
            fd: Fd::new(),
            sleep: None,
        }
    }

    /// Sets the timer to expire `after` from now (replacing any earlier
    /// setting, expired or not).
    pub(crate) fn arm(&mut self, after: Duration) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            if fd.arm(after) {
                return;
            }
            self.fd = None;
        }
        let deadline = tokio::time::Instant::now() + after;
        match &mut self.sleep {
            Some(s) => s.as_mut().reset(deadline),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    /// Completes when the timer set by the last [`arm`](Self::arm) expires
    /// (at once if it has). Cancel safe.
    pub(crate) async fn expired(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            fd.expired().await;
            return;
        }
        match &mut self.sleep {
            Some(s) => s.as_mut().await,
            None => std::future::pending::<()>().await,
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    /// A non-blocking `timerfd` registered with the reactor.
    pub(super) struct Fd(AsyncFd<OwnedFd>);

    impl Fd {
        /// `None` when the kernel or the runtime cannot provide one (no
        /// I/O driver on this runtime, no file descriptors left).
        pub(super) fn new() -> Option<Self> {
            // SAFETY: plain system call; the result is checked.
            let raw = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if raw < 0 {
                return None;
            }
            // SAFETY: `raw` is a descriptor just opened and owned by no one
            // else.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // A runtime without an I/O driver makes tokio panic here; the
            // window then falls back to tokio's timer rather than failing.
            std::panic::catch_unwind(move || {
                // SAFETY: `fd` is open, owned by the `AsyncFd` from here on
                // and closed only when it is dropped, so it names the same
                // timer for the `AsyncFd`'s whole life.
                unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
            })
            .ok()
            .flatten()
            .map(Fd)
        }

        /// One-shot expiry `after` from now (at least 1 ns: zero would
        /// disarm it). Resets the count of unread expiries. False when the
        /// call failed.
        pub(super) fn arm(&self, after: Duration) -> bool {
            let after = after.max(Duration::from_nanos(1));
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: after.as_secs().min(i32::MAX as u64) as libc::time_t,
                    tv_nsec: libc::c_long::from(after.subsec_nanos()),
                },
            };
            // SAFETY: the descriptor is open (owned by `self`) and `spec`
            // is a valid itimerspec; the old value is not asked for.
            let r = unsafe {
                libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
            r == 0
        }

        /// Waits until the timer has expired and consumes the expiry. A
        /// readiness left over from an earlier setting reads nothing
        /// (`EAGAIN`) and is waited past.
        pub(super) async fn expired(&self) {
            loop {
                let Ok(mut guard) = self.0.readable().await else {
                    // The reactor is gone: nothing will ever wake this.
                    return;
                };
                let read = guard.try_io(|fd| {
                    let mut ticks = 0u64;
                    // SAFETY: reads 8 bytes into a u64 from a descriptor
                    // owned by `self`.
                    let n = unsafe {
                        libc::read(
                            fd.as_raw_fd(),
                            (&mut ticks as *mut u64).cast(),
                            std::mem::size_of::<u64>(),
                        )
                    };
                    if n < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
                match read {
                    Ok(_) => return,
                    Err(_would_block) => continue,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Timer;

    #[tokio::test(flavor = "current_thread")]
    async fn a_short_window_lasts_about_its_length_and_can_be_rearmed() {
        let mut t = Timer::new();
        for _ in 0..20 {
            let start = Instant::now();
            t.arm(Duration::from_micros(200));
            t.expired().await;
            let took = start.elapsed();
            assert!(took >= Duration::from_micros(200), "{took:?}");
        }
        // Re-arming before expiry replaces the setting.
        t.arm(Duration::from_secs(3600));
        t.arm(Duration::from_micros(100));
        let start = Instant::now();
        t.expired().await;
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_expiry_left_unread_does_not_end_the_next_window() {
        let mut t = Timer::new();
        t.arm(Duration::from_micros(10));
        tokio::time::sleep(Duration::from_millis(5)).await;
        // The first setting expired and nobody read it; the new one must
        // still run its course.
        t.arm(Duration::from_millis(30));
        let start = Instant::now();
        t.expired().await;
        assert!(
            start.elapsed() >= Duration::from_millis(30),
            "{:?}",
            start.elapsed()
        );
    }
}
