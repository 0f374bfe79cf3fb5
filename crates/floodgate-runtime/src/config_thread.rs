//! The thread that loads a running binary's configuration: the start-up
//! load, then every reload (the watcher runs on it).
//!
//! The binaries' allocator (mimalloc) keeps a heap per thread: a block
//! freed by another thread goes back to the page it came from, but only
//! the thread owning that page reuses it or returns it to the system (when
//! it allocates again, or collects). A policy compiled on one thread and
//! freed, once replaced, by another would stay resident for good on the
//! heap of a thread that no longer loads anything. Compiled on this one
//! thread, which also frees what a reload replaces and the files' parse
//! trees, it is given back by the collection after each load (see
//! [`lifecycle`](crate::lifecycle)).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// The configuration thread; it ends once dropped, or once the last job,
/// handed to it on shutdown, returns.
#[derive(Debug)]
pub struct ConfigThread {
    jobs: mpsc::Sender<Job>,
    thread: JoinHandle<()>,
}

impl ConfigThread {
    /// Starts the thread.
    pub(crate) fn spawn() -> std::io::Result<ConfigThread> {
        let (jobs, next) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("floodgate-config".into())
            .spawn(move || {
                while let Ok(job) = next.recv() {
                    job();
                }
            })?;
        Ok(ConfigThread { jobs, thread })
    }

    /// Runs `f` on the thread and returns what it returns (a panic is
    /// carried over to the caller).
    pub(crate) fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = done.send(catch_unwind(AssertUnwindSafe(f)));
        });
        // The thread only ends when its sender is dropped, or after a panic
        // (carried over below): it is there to take the job.
        let _ = self.jobs.send(job);
        match result.recv() {
            Ok(Ok(value)) => value,
            Ok(Err(panic)) => resume_unwind(panic),
            Err(_) => panic!("the configuration thread ended"),
        }
    }

    /// Hands the thread its last job (the watcher's loop); returns the
    /// thread, to join once the job is told to stop (none: the thread is
    /// gone and the job was not run).
    pub(crate) fn finish(self, job: Job) -> Option<JoinHandle<()>> {
        self.jobs.send(job).ok()?;
        Some(self.thread)
    }
}
