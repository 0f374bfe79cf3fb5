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
    /// A policy that would evict (named), but no `maxmemory` is set, so
    /// nothing is evicted unless one is set while running (the server
    /// grows until the machine runs out of memory instead).
    Unbounded(String),
    /// The server would not say (`CONFIG GET` refused or renamed, as
    /// managed services do), with the reason.
    Unknown(String),
}

impl MemoryPolicy {
    /// The meaning of the policy named `name` with `maxmemory` set to
    /// `maxmemory` bytes (0: none).
    pub fn of(name: &str, maxmemory: u64) -> MemoryPolicy {
        let name = name.trim();
        match name.to_ascii_lowercase().as_str() {
            "noeviction" => MemoryPolicy::Keeps,
            _ if maxmemory == 0 => MemoryPolicy::Unbounded(name.to_string()),
            _ => MemoryPolicy::Evicts(name.to_string()),
        }
    }
}
