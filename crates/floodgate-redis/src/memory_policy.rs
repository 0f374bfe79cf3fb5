//! The server's `maxmemory-policy`, and whether it can erase limits.
//!
//! Every key Floodgate writes has a TTL (the end of its state's
//! restriction), so both families of eviction policies reach them:
//! `allkeys-*` evicts any key, `volatile-*` any key with a TTL. An evicted
//! counter is a fresh key at its next request: whoever fills the server's
//! memory (with distinct keys, say) gives its victims their quotas back.
//! Only `noeviction` keeps every counter; a full server then refuses
//! writes (`OOM`), which the failure policy answers (see `docs/redis.md`).

/// What the server's `maxmemory-policy` means for the limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryPolicy {
    /// `noeviction`: no counter is ever evicted.
    Keeps,
    /// A policy that evicts counters when memory is full (named).
    Evicts(String),
    /// The server would not say (`CONFIG GET` refused or renamed, as
    /// managed services do), with the reason.
    Unknown(String),
}

impl MemoryPolicy {
    /// The meaning of the policy named `name`.
    pub fn of(name: &str) -> MemoryPolicy {
        match name.trim().to_ascii_lowercase().as_str() {
            "noeviction" => MemoryPolicy::Keeps,
            _ => MemoryPolicy::Evicts(name.trim().to_string()),
        }
    }
}
