//! Giving back in-flight units by request rather than by response: for
//! callers that cannot keep the [`Response`] of the admitted request (a
//! stateless API, where the client sends the release with its permit).

use floodgate::Clock;

use crate::backend::{Backend, BackendError, Released};
use crate::permit::Permit;

use super::errors::EngineError;
use super::request::Descriptor;
use super::response::Response;
use super::{Engine, PLACEHOLDER};

/// What releasing a request's concurrency limits did, over all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseReport {
    /// Units given back now.
    pub given: u64,
    /// Units the store could not take now, kept by the backend and given
    /// back as soon as it can (see [`Released::Queued`]).
    pub queued: u64,
    /// Limits of which the permit held nothing (never issued, issued for
    /// another key, given back already, or its lease ended): unchanged.
    pub not_held: usize,
    /// Limits the store could neither release nor keep the release of.
    pub failed: usize,
    /// The first of those failures.
    pub error: Option<BackendError>,
}

impl ReleaseReport {
    /// Units given back or queued.
    pub fn units(&self) -> u64 {
        self.given.saturating_add(self.queued)
    }

    pub(super) fn add(&mut self, r: Result<Released, BackendError>) {
        match r {
            Ok(Released::Given(u)) => self.given = self.given.saturating_add(u),
            Ok(Released::Queued(u)) => self.queued = self.queued.saturating_add(u),
            Ok(Released::NotHeld) => self.not_held += 1,
            Err(e) => {
                self.failed += 1;
                self.error.get_or_insert(e);
            }
        }
    }
}

impl Response {
    /// The permit the request holds its concurrency limits under, if it
    /// matched any (see [`Item::permit`](crate::Item::permit)): what
    /// [`Engine::release_request`] needs to give back that acquisition.
    pub fn permit(&self) -> Option<Permit> {
        (!self.scratch.permit.is_none()).then_some(self.scratch.permit)
    }
}

impl<B: Backend, C: Clock> Engine<B, C> {
    /// Gives back the concurrency units that `permit` took when a request
    /// of `descriptors` of `domain` (with `hits_addend`, as
    /// [`evaluate`](Self::evaluate) takes them) was admitted: `permit` is
    /// that request's response's [`permit`](Response::permit). The
    /// descriptors are matched again; nothing is decided or charged, and
    /// every concurrency limit they map to is asked for the request's units
    /// back. Each gives back at most what `permit` still holds of its key:
    /// a permit never issued, issued for other descriptors, or released
    /// already gives back nothing, and more units than were taken free no
    /// more than were taken.
    ///
    /// `response` is reset and holds the match: each status's rule, reason
    /// and hits, and in [`Response::limits`] every limit, with what its
    /// release did ([`LimitEntry::release`](super::LimitEntry::release))
    /// when it is a concurrency limit (`decision` is `None`). Nothing is
    /// given back when the domain is unknown or limiting is disabled, as
    /// nothing was taken.
    ///
    /// Errors: a malformed request, as for `evaluate`, and
    /// [`Permit::NONE`]; what the store did is in the report (a store that cannot take the units now either
    /// queues them, [`Released::Queued`], or fails that limit).
    pub async fn release_request<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        permit: Permit,
        response: &mut Response,
    ) -> Result<ReleaseReport, EngineError> {
        let begun = self.begin(domain, descriptors, hits_addend, response)?;
        if permit.is_none() {
            return Err(EngineError::InvalidArgument(
                "a release names the permit its request was admitted under".into(),
            ));
        }
        if begun.is_none() {
            return Ok(ReleaseReport::default());
        }
        // The match laid out the request's counters as a check would; each
        // marked admitted, the release path gives back every concurrency
        // limit among them, under the permit named.
        let scratch = &mut response.scratch;
        scratch.permit = permit;
        if scratch.policy.is_none() {
            // No concurrency limit matched: nothing to give back.
            return Ok(ReleaseReport::default());
        }
        scratch.decisions.clear();
        scratch.decisions.resize(scratch.slots.len(), PLACEHOLDER);
        let mut released = std::mem::take(&mut scratch.released);
        released.clear();
        released.resize(scratch.slots.len(), None);
        let mut report = ReleaseReport::default();
        self.release_slots(response, |k, r| {
            released[k] = Some(r.clone().map_err(|e| EngineError::from(e).code()));
            report.add(r);
        })
        .await;
        response.scratch.decisions.clear();
        response.scratch.released = released;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use floodgate::{Apply, StoreConfig};

    use super::ReleaseReport;
    use crate::read::{LoadOptions, load_str};
    use crate::{
        Code, Engine, MemoryBackend, OwnedDescriptor, Permit, PolicySet, Released, Response,
    };

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

    /// A check; its permit when it holds one.
    fn check(e: &Engine<MemoryBackend>, d: &[OwnedDescriptor]) -> (Code, Option<Permit>) {
        let mut r = Response::default();
        e.evaluate_now("d", d, 0, Apply::Commit, &mut r)
            .unwrap()
            .unwrap();
        (r.overall, r.permit())
    }

    fn code(e: &Engine<MemoryBackend>, d: &[OwnedDescriptor]) -> Code {
        check(e, d).0
    }

    fn release(
        e: &Engine<MemoryBackend>,
        d: &[OwnedDescriptor],
        permit: Permit,
    ) -> (ReleaseReport, Response) {
        let mut r = Response::default();
        let report = ready(e.release_request("d", d, 0, permit, &mut r)).unwrap();
        (report, r)
    }

    #[test]
    fn a_released_request_frees_its_units_once() {
        let e = engine();
        let job = [OwnedDescriptor::new([("job", "j")])];
        let (_, first) = check(&e, &job);
        let first = first.expect("a concurrency limit matched");
        assert_eq!(code(&e, &job), Code::Ok);
        assert_eq!(code(&e, &job), Code::OverLimit);
        let (report, r) = release(&e, &job, first);
        assert_eq!((report.given, report.not_held), (1, 0));
        let limits: Vec<_> = r
            .limits()
            .map(|l| (l.units, l.decision, l.release))
            .collect();
        assert_eq!(limits, [(1, None, Some(Ok(Released::Given(1))))]);
        assert_eq!(code(&e, &job), Code::Ok);
        assert_eq!(code(&e, &job), Code::OverLimit);
        // Released again: the permit holds nothing any more.
        for _ in 0..5 {
            let (report, r) = release(&e, &job, first);
            assert_eq!((report.units(), report.not_held), (0, 1));
            let results: Vec<_> = r.limits().map(|l| l.release).collect();
            assert_eq!(results, [Some(Ok(Released::NotHeld))]);
        }
        assert_eq!(code(&e, &job), Code::OverLimit);
    }

    #[test]
    fn other_limits_and_check_only_descriptors_are_left_alone() {
        let e = engine();
        let user = [OwnedDescriptor::new([("user", "u")])];
        for _ in 0..5 {
            assert_eq!(code(&e, &user), Code::Ok);
        }
        let (report, r) = release(&e, &user, Permit::random());
        assert_eq!(report, ReleaseReport::default());
        assert_eq!(r.limits().count(), 1);
        assert_eq!(code(&e, &user), Code::OverLimit);
        let job = [OwnedDescriptor::new([("job", "k")])];
        let (_, p) = check(&e, &job);
        assert_eq!(code(&e, &job), Code::Ok);
        // A descriptor that took nothing (hits 0) gives nothing back.
        let (report, _) = release(
            &e,
            &[OwnedDescriptor::new([("job", "k")]).hits(0)],
            p.unwrap(),
        );
        assert_eq!(report, ReleaseReport::default());
        assert_eq!(code(&e, &job), Code::OverLimit);
    }

    #[test]
    fn bad_requests_are_errors_and_unknown_domains_release_nothing() {
        let e = engine();
        let mut r = Response::default();
        let none: [OwnedDescriptor; 0] = [];
        let p = Permit::random();
        assert!(ready(e.release_request("d", &none, 0, p, &mut r)).is_err());
        let job = [OwnedDescriptor::new([("job", "j")])];
        let no_permit = ready(e.release_request("d", &job, 0, Permit::NONE, &mut r));
        assert!(no_permit.unwrap_err().to_string().contains("permit"));
        let report = ready(e.release_request("nope", &job, 0, p, &mut r)).unwrap();
        assert_eq!(report, ReleaseReport::default());
        assert_eq!(r.limits().count(), 0);
    }
}
