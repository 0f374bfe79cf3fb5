//! Shared test helpers: an engine on the in-memory store and a manual
//! clock, built from inline YAML.

#![allow(dead_code)]

pub(crate) mod heap;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use floodgate::{ManualClock, StoreConfig, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Code, Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};

/// Runs a future that completes without waiting (the memory backend's).
pub(crate) fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory engine never waits"),
    }
}

pub(crate) fn policy(yaml: &str) -> PolicySet {
    let spec =
        load_str("test.yaml", yaml, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    PolicySet::compile(&spec).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) struct Harness {
    pub engine: Engine<MemoryBackend, Arc<ManualClock>>,
    pub clock: Arc<ManualClock>,
    pub response: Response,
}

/// 2023-11-14 22:13:20 UTC, a whole second, minute, hour and day boundary.
pub(crate) const START: u64 = 1_700_000_000 - 1_700_000_000 % 86_400;

impl Harness {
    pub(crate) fn new(yaml: &str) -> Self {
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(START)));
        let backend = MemoryBackend::new(StoreConfig::default()).unwrap();
        Harness {
            engine: Engine::with_clock(policy(yaml), backend, clock.clone()),
            clock,
            response: Response::default(),
        }
    }

    pub(crate) fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Sends one request; returns the overall code.
    pub(crate) fn send(&mut self, domain: &str, descriptors: &[OwnedDescriptor]) -> Code {
        self.send_hits(domain, descriptors, 0)
    }

    pub(crate) fn send_hits(
        &mut self,
        domain: &str,
        descriptors: &[OwnedDescriptor],
        hits: u32,
    ) -> Code {
        ready(
            self.engine
                .evaluate(domain, descriptors, hits, &mut self.response),
        )
        .unwrap();
        self.response.overall
    }

    /// Sends `n` identical requests; returns how many were OK.
    pub(crate) fn admitted(
        &mut self,
        n: usize,
        domain: &str,
        descriptors: &[OwnedDescriptor],
    ) -> usize {
        (0..n)
            .filter(|_| self.send(domain, descriptors) == Code::Ok)
            .count()
    }
}

pub(crate) fn d(entries: &[(&str, &str)]) -> OwnedDescriptor {
    OwnedDescriptor::new(entries.iter().copied())
}
