//! The cost known only once the response is (`http.response_cost`),
//! charged after it: read from a header when the response's head is seen,
//! or from a trailer when its body ends; forced, so that it counts whole
//! even past the limit (debt, repaid by refill), through the same engine
//! call as the request's decision.

use floodgate::Clock;
use floodgate_policy::{Backend, Engine};
use http::HeaderMap;
use metrics::Counter;

use super::shared::{Finishing, Held, Hold, Scratch};
use crate::identity::{CostRead, ResponseCost, response_cost_of};

/// An admitted request waiting for its cost: its buffers (descriptors,
/// units), and what was read so far. Dropping it charges the cost (the
/// cap when its trailers were never seen).
pub(crate) struct ChargeAfter<B: Backend, C: Clock + 'static> {
    held: Held<B, C>,
    read: Option<CostRead>,
}

impl<B: Backend, C: Clock + 'static> ChargeAfter<B, C> {
    /// The charge of a request answered with `headers`; none when it is
    /// charged at once (its cost in a header, no units held).
    pub(super) fn new(held: Held<B, C>, headers: &HeaderMap) -> Option<Self> {
        let config = cost_config(&held);
        let read = (!config.in_trailers()).then(|| read(config, headers));
        let charge = ChargeAfter { held, read };
        if charge.read.is_some() && !charge.held.holds_units {
            return None; // Dropped: charged now.
        }
        Some(charge)
    }
}

/// The response cost of `held`'s layer (there is one, or nothing holds a
/// charge).
fn cost_config<B: Backend, C: Clock + 'static>(held: &Held<B, C>) -> &ResponseCost {
    let config = held.shared.identity.config().response_cost.as_ref();
    config.expect("a charge after the response is configured")
}

/// The cost `fields` (headers or trailers) tell under `config`.
fn read(config: &ResponseCost, fields: &HeaderMap) -> CostRead {
    let value = fields.get(config.name()).map(http::HeaderValue::as_bytes);
    response_cost_of(value, config)
}

impl<B: Backend, C: Clock + 'static> Hold for ChargeAfter<B, C> {
    fn trailers(&mut self, trailers: &HeaderMap) {
        if self.read.is_none() {
            self.read = Some(read(cost_config(&self.held), trailers));
        }
    }

    fn ended(&mut self) {
        self.read.get_or_insert(CostRead::Missing);
    }

    fn close(mut self: Box<Self>) -> Option<Finishing> {
        self.ended();
        self.charge()
    }
}

impl<B: Backend, C: Clock + 'static> ChargeAfter<B, C> {
    /// Charges what was read (once: the request's buffers go back with
    /// the first call); the charge's task when it runs on.
    fn charge(&mut self) -> Option<Finishing> {
        self.held.scratch.as_ref()?;
        let read = self.read.unwrap_or(CostRead::Unfinished);
        if let Some(counters) = &self.held.shared.response_costs {
            counters.count(read);
        }
        let cost = read.cost(cost_config(&self.held));
        // What admission charged already (the request's cost; 0 for a
        // check).
        let weighted = self.held.shared.identity.config().cost.is_some();
        let deposit = match &self.held.scratch {
            Some(s) if weighted => u64::from(s.out.hits_addend()),
            _ => 0,
        };
        self.held.finish(cost.saturating_sub(deposit))
    }
}

impl<B: Backend, C: Clock + 'static> Drop for ChargeAfter<B, C> {
    fn drop(&mut self) {
        self.charge();
    }
}

/// `floodgate_http_response_costs_total{result}`: the responses whose
/// cost was charged, by how it was found ([`CostRead::label`]); registered
/// once, when the layer is built.
pub(crate) struct CostCounters([Counter; 5]);

impl CostCounters {
    pub(super) fn new() -> Self {
        metrics::describe_counter!(
            "floodgate_http_response_costs_total",
            "Costs known after the response charged by the HTTP layer, by how each was found: read, capped, missing, invalid, unfinished."
        );
        CostCounters(CostRead::LABELS.map(
            |result| metrics::counter!("floodgate_http_response_costs_total", "result" => result),
        ))
    }

    fn count(&self, read: CostRead) {
        self.0[read.index()].increment(1);
    }
}

/// Leaves out of the charge after the response every descriptor of
/// `scratch` decided by a rule with a concurrency limit: a forced charge
/// would take units nothing gives back.
pub(super) fn spare_in_flight<B: Backend, C: Clock + 'static>(
    engine: &Engine<B, C>,
    scratch: &mut Scratch,
) {
    let Some(policy) = engine.policy_of(&scratch.response) else {
        return;
    };
    for (i, status) in scratch.response.statuses.iter().enumerate() {
        let limits = status.rule.map(|id| policy.rule(id).limits());
        if limits.is_some_and(|l| l.iter().any(|l| l.limit.is_concurrency())) {
            scratch.out.spare(i);
        }
    }
}
