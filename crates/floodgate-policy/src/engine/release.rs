//! Giving back in-flight units by request rather than by response: for
//! callers that cannot keep the [`Response`] of the admitted request (a
//! stateless API, where the client sends the release).

use floodgate::Clock;

use crate::backend::Backend;

use super::errors::EngineError;
use super::request::Descriptor;
use super::response::Response;
use super::{Engine, PLACEHOLDER};

impl Response {
    /// The permit the request holds its concurrency limits under, if it
    /// matched any (see [`Item::permit`](crate::Item::permit)): what
    /// [`Engine::release_request`] needs to give back that acquisition.
    pub fn permit(&self) -> Option<u64> {
        (self.scratch.permit != 0).then_some(self.scratch.permit)
    }
}

impl<B: Backend, C: Clock> Engine<B, C> {
    /// Gives back the concurrency units that a request of `descriptors` of
    /// `domain` (with `hits_addend`, as [`evaluate`](Self::evaluate) takes
    /// them) took when it was admitted under `permit` (its response's
    /// [`permit`](Response::permit); backends that hold each permit on its
    /// own need it, those that count in memory ignore it). The descriptors
    /// are matched again; nothing is decided or charged, and every
    /// concurrency limit they map to gets its units back. A counter never
    /// goes below zero: giving back more than is held frees what is held
    /// and no more.
    ///
    /// `response` is reset and holds the match: each status's rule, reason
    /// and hits, and in [`Response::limits`] every limit with the units
    /// given back to it when it is a concurrency limit (`decision` is
    /// `None`). Nothing is given back when the domain is unknown or limiting
    /// is disabled, as nothing was taken.
    ///
    /// The units go back through [`release`](Self::release), so a store
    /// that cannot take them is not an error here either (they stay held
    /// until their lease, if any, ends). Unlike `release`, this cannot know
    /// which limits the original request was admitted by: call it once, for
    /// a request that was admitted. Errors: only a malformed request, as
    /// for `evaluate`.
    pub async fn release_request<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        permit: Option<u64>,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        if self
            .begin(domain, descriptors, hits_addend, response)?
            .is_none()
        {
            return Ok(());
        }
        // The match laid out the request's counters as a check would; each
        // marked admitted, the release path gives back every concurrency
        // limit among them.
        let scratch = &mut response.scratch;
        if let Some(p) = permit {
            scratch.permit = p;
        }
        scratch.decisions.clear();
        scratch.decisions.resize(scratch.slots.len(), PLACEHOLDER);
        self.release(response).await;
        response.scratch.decisions.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use floodgate::{Apply, StoreConfig};

    use crate::read::{LoadOptions, load_str};
    use crate::{Code, Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};

    fn ready<F: Future>(f: F) -> F::Output {
        match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the in-memory engine never waits"),
        }
    }

    fn engine() -> Engine<MemoryBackend> {
        let yaml = "domains:\n  - domain: d\n    descriptors:\n      - key: job\n        rate_limit: {algorithm: concurrency, max: 2}\n      - key: user\n        rate_limit: {requests_per_unit: 5, unit: day}\n";
        let spec = load_str("t.yaml", yaml, &LoadOptions::default()).unwrap();
        Engine::new(
            PolicySet::compile(&spec).unwrap(),
            MemoryBackend::new(StoreConfig::default()).unwrap(),
        )
    }

    fn check(e: &Engine<MemoryBackend>, d: &[OwnedDescriptor]) -> Code {
        let mut r = Response::default();
        e.evaluate_now("d", d, 0, Apply::Commit, &mut r)
            .unwrap()
            .unwrap();
        r.overall
    }

    fn release(e: &Engine<MemoryBackend>, d: &[OwnedDescriptor]) -> Response {
        let mut r = Response::default();
        ready(e.release_request("d", d, 0, None, &mut r)).unwrap();
        r
    }

    #[test]
    fn a_released_request_frees_its_units_and_no_more() {
        let e = engine();
        let job = [OwnedDescriptor::new([("job", "j")])];
        assert_eq!(check(&e, &job), Code::Ok);
        assert_eq!(check(&e, &job), Code::Ok);
        assert_eq!(check(&e, &job), Code::OverLimit);
        let r = release(&e, &job);
        let limits: Vec<_> = r.limits().map(|l| (l.units, l.decision)).collect();
        assert_eq!(limits, [(1, None)]);
        assert_eq!(check(&e, &job), Code::Ok);
        assert_eq!(check(&e, &job), Code::OverLimit);
        // Releasing more than is held: the count stops at zero, and the
        // limit still admits only 2.
        for _ in 0..5 {
            release(&e, &job);
        }
        assert_eq!(check(&e, &job), Code::Ok);
        assert_eq!(check(&e, &job), Code::Ok);
        assert_eq!(check(&e, &job), Code::OverLimit);
    }

    #[test]
    fn other_limits_and_check_only_descriptors_are_left_alone() {
        let e = engine();
        let user = [OwnedDescriptor::new([("user", "u")])];
        for _ in 0..5 {
            assert_eq!(check(&e, &user), Code::Ok);
        }
        release(&e, &user);
        assert_eq!(check(&e, &user), Code::OverLimit);
        let job = [OwnedDescriptor::new([("job", "k")])];
        assert_eq!(check(&e, &job), Code::Ok);
        assert_eq!(check(&e, &job), Code::Ok);
        // A descriptor that took nothing (hits 0) gives nothing back.
        release(&e, &[OwnedDescriptor::new([("job", "k")]).hits(0)]);
        assert_eq!(check(&e, &job), Code::OverLimit);
    }

    #[test]
    fn bad_requests_are_errors_and_unknown_domains_release_nothing() {
        let e = engine();
        let mut r = Response::default();
        let none: [OwnedDescriptor; 0] = [];
        assert!(ready(e.release_request("d", &none, 0, None, &mut r)).is_err());
        let job = [OwnedDescriptor::new([("job", "j")])];
        ready(e.release_request("nope", &job, 0, None, &mut r)).unwrap();
        assert_eq!(r.limits().count(), 0);
    }
}
