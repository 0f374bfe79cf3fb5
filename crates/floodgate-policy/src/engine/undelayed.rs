//! Deciding for a caller that cannot hold a request (Envoy over RLS): a
//! request a shaper would delay is refused instead, charged nothing, told
//! how long to wait.

use std::time::Duration;

use floodgate::algorithms::LimitKind;
use floodgate::{Apply, Decision, Outcome, Timestamp};

use crate::backend::Backend;
use crate::compile::PolicySet;

use super::errors::EngineError;
use super::request::Descriptor;
use super::response::Response;
use super::scratch::{Batch, Scratch};
use super::{Current, Engine, finish, limit_of};

impl<B: Backend, C: floodgate::Clock> Engine<B, C> {
    /// Like [`evaluate`](Self::evaluate), for a caller that cannot hold a
    /// request for a shaper's delay: a request an enforced shaper would
    /// delay is refused instead, and charged nothing (no limit of it, in
    /// penalty mode or not); each delaying decision becomes a denial whose
    /// `retry_after` and reset are its delay, so the same request sent
    /// again after that wait is admitted (given no other traffic), as
    /// nginx's `limit_req` would have let it through then.
    ///
    /// Only a request matching a shaper that delays (not `nodelay`) is
    /// first decided without charging (`Apply::Check`), then charged when
    /// nothing delays it; another caller charging the shaper between the
    /// two can still leave it delayed: it is then admitted and charged
    /// like any admitted request. Under global shadow mode nothing is
    /// refused.
    pub async fn evaluate_undelayed<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        response: &mut Response,
    ) -> Result<(), EngineError> {
        if let Some(decided) =
            self.evaluate_undelayed_now(domain, descriptors, hits_addend, response)
        {
            return decided;
        }
        let Some((policy, now)) = self.begin(domain, descriptors, hits_addend, response)? else {
            return Ok(());
        };
        let mut refused = false;
        if may_delay(&policy, &response.scratch) {
            self.decide(&policy, now, Apply::Check, response).await?;
            refused = refuse_delays(&mut response.scratch);
        }
        if !refused {
            self.decide(&policy, now, Apply::Commit, response).await?;
        }
        self.end_undelayed(policy, now, descriptors, response);
        Ok(())
    }

    /// [`evaluate_undelayed`](Self::evaluate_undelayed) at once, without
    /// a future, when the backend needs no IO (the in-memory store); none,
    /// with nothing done, when it does.
    pub fn evaluate_undelayed_now<D: Descriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        response: &mut Response,
    ) -> Option<Result<(), EngineError>> {
        let backend = self.backend.as_sync()?;
        let begun = self.begin(domain, descriptors, hits_addend, response);
        let Some((policy, now)) = (match begun {
            Ok(begun) => begun,
            Err(e) => return Some(Err(e)),
        }) else {
            return Some(Ok(()));
        };
        let refused = may_delay(&policy, &response.scratch) && {
            self.decide_sync(backend, &policy, now, Apply::Check, response);
            refuse_delays(&mut response.scratch)
        };
        if !refused {
            self.decide_sync(backend, &policy, now, Apply::Commit, response);
        }
        self.end_undelayed(policy, now, descriptors, response);
        Some(Ok(()))
    }

    /// What ends a decision: its answer finished, observed, the policy's
    /// buffers given back.
    fn end_undelayed<D: Descriptor>(
        &self,
        policy: Current,
        now: Timestamp,
        descriptors: &[D],
        response: &mut Response,
    ) {
        finish::finish(&policy, now, response);
        self.observe(&policy, now, descriptors, response);
        policy.give_back(response);
    }
}

/// Whether an enforced limit of the request is a shaper that delays
/// (never under global shadow mode, which refuses nothing).
fn may_delay(policy: &PolicySet, scratch: &Scratch) -> bool {
    !policy.settings.shadow_mode
        && scratch.slots.iter().any(|slot| {
            !matches!(slot.batch, Batch::Shadow | Batch::Refund)
                && matches!(
                    limit_of(policy, &scratch.overrides, slot.limit).kind(),
                    LimitKind::Shaper(s) if s.delay_millis() != u64::MAX
                )
        })
}

/// The delay of a delaying decision.
fn delay_of(d: &Decision) -> Option<Duration> {
    match d.outcome {
        Outcome::Delayed(wait) if !wait.is_zero() => Some(wait),
        _ => None,
    }
}

/// Turns the delays of an uncharged decision into denials, when a delay
/// is all that keeps the request out (a request denied anyway is left to
/// be decided, and charged, as usual); whether it did.
fn refuse_delays(scratch: &mut Scratch) -> bool {
    let enforced = |batch: Batch| !matches!(batch, Batch::Shadow | Batch::Refund);
    let pairs = || scratch.slots.iter().zip(&scratch.decisions);
    let denied = pairs().any(|(s, d)| enforced(s.batch) && d.is_denied());
    let delayed = pairs().any(|(s, d)| enforced(s.batch) && delay_of(d).is_some());
    if denied || !delayed {
        return false;
    }
    for (slot, d) in scratch.slots.iter().zip(&mut scratch.decisions) {
        if let Some(wait) = delay_of(d).filter(|_| enforced(slot.batch)) {
            *d = Decision {
                outcome: Outcome::Denied,
                remaining: 0,
                reset_after: wait,
                retry_after: Some(wait),
                ..*d
            };
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use floodgate::{ManualClock, StoreConfig};

    use super::*;
    use crate::read::{LoadOptions, load_str};
    use crate::{Code, MemoryBackend, OwnedDescriptor};

    type TestEngine = Engine<MemoryBackend, Arc<ManualClock>>;

    /// An engine on a manual clock deciding `rule` for `user`.
    fn engine(rule: &str) -> (TestEngine, Arc<ManualClock>) {
        let yaml = format!("domain: api\ndescriptors:\n  - key: user\n    {rule}\n");
        let spec = load_str("api.yaml", &yaml, &LoadOptions::default()).unwrap();
        let policy = PolicySet::compile(&spec).unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let backend = MemoryBackend::new(StoreConfig::default()).unwrap();
        (Engine::with_clock(policy, backend, clock.clone()), clock)
    }

    /// One call of `alice`, refusing delays or not: the overall code, the
    /// status's reset and its decision's outcome.
    fn call(e: &TestEngine, undelayed: bool) -> (Code, Duration, Outcome) {
        let request = [OwnedDescriptor::new([("user", "alice")])];
        let mut r = Response::default();
        if undelayed {
            at_once(e.evaluate_undelayed("api", &request, 1, &mut r)).unwrap();
        } else {
            at_once(e.evaluate("api", &request, 1, &mut r)).unwrap();
        }
        let s = &r.statuses[0];
        (
            r.overall,
            s.duration_until_reset,
            s.decision.unwrap().outcome,
        )
    }

    /// The output of a future that needs no IO (the in-memory store's).
    fn at_once<F: std::future::Future>(f: F) -> F::Output {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::pin!(f).poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the in-memory store decides at once"),
        }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// A shaper of 10 r/s would delay a second call at once by 100 ms: it
    /// is refused instead, told to wait those 100 ms, and charged
    /// nothing — however often it is refused, the call sent after the
    /// wait is admitted without delay, as nginx would have let it through
    /// then.
    #[test]
    fn a_delay_is_refused_uncharged_with_the_wait_as_reset() {
        let (e, clock) = engine("rate_limit: {algorithm: shaper, rate: 10r/s, burst: 5}");
        // Admitted at once; the shaper drains it in 100 ms.
        assert_eq!(call(&e, true), (Code::Ok, MS(100), Outcome::Allowed));
        for _ in 0..3 {
            assert_eq!(call(&e, true), (Code::OverLimit, MS(100), Outcome::Denied));
        }
        clock.advance(MS(99));
        assert_eq!(call(&e, true), (Code::OverLimit, MS(1), Outcome::Denied));
        clock.advance(MS(1));
        assert_eq!(call(&e, true).2, Outcome::Allowed);
        // Decided as usual, the same call is admitted and delayed.
        assert_eq!(call(&e, false).0, Code::Ok);
        assert_eq!(call(&e, false).2, Outcome::Delayed(MS(200)));
    }

    /// A `nodelay` shaper never delays: its burst passes at once, then it
    /// denies (and is never decided twice); a shadow shaper refuses
    /// nothing.
    #[test]
    fn nodelay_and_shadow_shapers_are_decided_as_usual() {
        let (e, _) =
            engine("rate_limit: {algorithm: shaper, rate: 10r/s, burst: 2, nodelay: true}");
        for _ in 0..3 {
            assert_eq!(call(&e, true).2, Outcome::Allowed);
        }
        assert_eq!(call(&e, true).0, Code::OverLimit);
        let (e, _) =
            engine("shadow_mode: true\n    rate_limit: {algorithm: shaper, rate: 10r/s, burst: 5}");
        assert_eq!(call(&e, true).0, Code::Ok);
        assert_eq!(
            call(&e, true),
            (Code::Ok, MS(200), Outcome::Delayed(MS(100)))
        );
    }

    /// A call another limit denies is decided as usual (a delay is not
    /// what keeps it out): nothing of it is turned into a refusal.
    #[test]
    fn a_call_denied_anyway_is_decided_as_usual() {
        let (e, _) = engine(
            "rate_limit:\n      limits:\n        - {algorithm: shaper, rate: 10r/s, burst: 5}\n        - {requests: 1, per: 1m}",
        );
        assert_eq!(call(&e, true).0, Code::Ok);
        let (code, _, outcome) = call(&e, true);
        assert_eq!((code, outcome), (Code::OverLimit, Outcome::Denied));
    }
}
