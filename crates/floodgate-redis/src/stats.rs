//! Counters, as plain atomics (exported as metrics elsewhere).

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters of a [`RedisBackend`](crate::RedisBackend).
#[derive(Debug, Default)]
pub struct RedisStats {
    /// Decisions answered (by Redis or by the over-limit cache).
    pub decisions: Counter,
    /// Script calls sent to Redis (two per slot for cross-slot batches).
    pub calls: Counter,
    /// Pipelines written by the pipelining window (none without one):
    /// `calls` ÷ `pipelines` is the commands per write it achieved.
    pub pipelines: Counter,
    /// `NOSCRIPT` replies answered by re-sending the script (after a
    /// restart, a failover or `SCRIPT FLUSH`).
    pub script_loads: Counter,
    /// Decisions that spanned several hash slots (two phases).
    pub cross_slot: Counter,
    /// Decisions or releases that failed (any error, timeouts included).
    pub errors: Counter,
    /// Of those, the ones that ran out of time.
    pub timeouts: Counter,
    /// Decisions answered by the local over-limit cache.
    pub cache_hits: Counter,
    /// Denials stored in the over-limit cache.
    pub cache_inserts: Counter,
    /// Keys found holding something that is not a state of their limit's
    /// kind (another Redis type, or unparseable bytes): reset to fresh.
    pub state_resets: Counter,
    /// Concurrency units whose lease ended before they were given back
    /// (their holder died, or never sent its release or negative hit),
    /// counted when a decision on their key drops them.
    pub lease_expired: Counter,
}

/// Counters of a [`ResilientBackend`](crate::ResilientBackend).
#[derive(Debug, Default)]
pub struct ResilienceStats {
    /// Decisions answered (by Redis or by the failure policy).
    pub decisions: Counter,
    /// Redis calls that failed (each one counts towards the breaker, except
    /// a refusal to write because Redis's memory is full).
    pub backend_errors: Counter,
    /// Decisions Redis could not charge because its memory was full
    /// (`OOM`): denied when the states it holds deny them, answered by the
    /// failure policy otherwise.
    pub memory_full: Counter,
    /// Decisions that never reached Redis because the breaker was open.
    pub short_circuited: Counter,
    /// Decisions admitted by [`FailurePolicy::FailOpen`](crate::FailurePolicy).
    pub fail_open: Counter,
    /// Decisions denied by [`FailurePolicy::FailClosed`](crate::FailurePolicy).
    pub fail_closed: Counter,
    /// Decisions made by the local fallback store.
    pub local_fallbacks: Counter,
    /// Times the breaker opened.
    pub breaker_opened: Counter,
    /// Times the breaker closed again after a successful probe.
    pub breaker_closed: Counter,
    /// Probes sent while the breaker was half-open.
    pub breaker_probes: Counter,
    /// Releases of Redis-held permits that Redis could not take at once
    /// (it failed, or the breaker was open), queued to be sent again.
    pub releases_deferred: Counter,
    /// Queued releases Redis has since taken.
    pub releases_redelivered: Counter,
    /// Queued releases dropped: the queue was full, or Redis answered one
    /// with an error no retry changes (their permits are freed when their
    /// leases end).
    pub releases_dropped: Counter,
}

/// Counters of the keys decided in this process's memory (the `lease` and
/// `sync` modes).
#[derive(Debug, Default)]
pub struct SharingStats {
    /// Decisions made here, without a round trip.
    pub local_decisions: Counter,
    /// Calls of the lease script (one per hash slot and up to 256 keys).
    pub lease_calls: Counter,
    /// Leases granted (of at least one unit).
    pub lease_grants: Counter,
    /// Units granted by those leases.
    pub lease_units: Counter,
    /// Leases given back with units unused (renewed, ended, or at
    /// shutdown).
    pub lease_returns: Counter,
    /// The units those gave back.
    pub returned_units: Counter,
    /// Calls of the sync script (one per hash slot and up to 256 keys).
    pub syncs: Counter,
    /// Keys those pushed and pulled.
    pub keys_synced: Counter,
    /// Units the fleet had admitted (or leased) that this instance learned
    /// of at a sync or a lease: how far its view had drifted from Redis's.
    pub drift_units: Counter,
    /// Syncs and leases of a key, over which `drift_units` is summed.
    pub drift_samples: Counter,
    /// Requests decided by Redis after every grant of their key was taken
    /// by other requests first.
    pub starved: Counter,
}
