//! The engine plan of a layer: when every request's one descriptor selects
//! a rule known in advance (an engine [`DirectPlan`]), it is decided by
//! that rule directly, without the engine's lookup. The plan is made for
//! the descriptor's shape by the first request, and made again when the
//! engine's policy is replaced.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use floodgate::{Apply, Clock};
use floodgate_policy::{Backend, Descriptor, DirectPlan, Engine};

use super::shared::Scratch;

/// The plan of the current policy for the layer's descriptor shape (none:
/// that policy has no rule for it that can be decided directly).
struct Cached {
    generation: u64,
    plan: Option<DirectPlan>,
}

/// A layer's plan, remade when the engine's policy is replaced.
#[derive(Default)]
pub(crate) struct PlanCache {
    current: ArcSwapOption<Cached>,
}

impl PlanCache {
    /// Decides the request's one descriptor (in `s`) by the plan if it
    /// applies; `false`: decide it with the engine's lookup.
    pub fn decide<B: Backend, C: Clock>(
        &self,
        engine: &Engine<B, C>,
        domain: &str,
        apply: Apply,
        s: &mut Scratch,
    ) -> bool {
        let [d] = s.out.as_slice() else {
            return false;
        };
        let cached = self.current.load();
        if let Some(cached) = cached.as_deref() {
            if let Some(plan) = &cached.plan {
                let hits = s.out.hits_addend();
                if engine
                    .evaluate_direct(plan, d, hits, apply, &mut s.response)
                    .is_some()
                {
                    return true;
                }
            }
            if cached.generation == engine.generation() {
                // Current, and this request is not of the planned shape.
                return false;
            }
        }
        // The first request, or a policy replaced since: plan again (for
        // this request's shape); this one is decided by the lookup.
        let keys: Vec<&str> = (0..d.len()).map(|i| d.entry(i).0).collect();
        let generation = engine.generation();
        let plan = engine.direct_plan(domain, &keys);
        self.current.store(Some(Arc::new(Cached {
            generation: plan.as_ref().map_or(generation, DirectPlan::generation),
            plan,
        })));
        false
    }
}
