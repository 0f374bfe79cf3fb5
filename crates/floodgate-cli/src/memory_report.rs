//! What `floodgate config check` says about the in-memory store's memory:
//! what its tables take at its capacity, and per key.

use floodgate::StoreConfig;
use floodgate_policy::MemoryBackend;
use floodgate_runtime::settings::{StoreKind, StoreSettings};

/// The line for the in-memory store (none for Redis).
pub(crate) fn memory_report(store: &StoreSettings) -> Option<String> {
    if store.backend != StoreKind::Memory {
        return None;
    }
    let config = StoreConfig {
        when_full: store.when_full,
        ..StoreConfig::with_capacity(store.capacity)
    };
    let bytes = MemoryBackend::bytes_holding(config, store.capacity);
    Some(format!(
        "in-memory store: {:.1} MiB at its capacity of {} keys, {:.0} bytes a key \
         (a sliding log's entries and sub-window counts beside)",
        bytes as f64 / f64::from(1 << 20),
        store.capacity,
        bytes as f64 / store.capacity.max(1) as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::memory_report;
    use floodgate_runtime::settings::StoreSettings;

    /// Two million keys: 32-byte entries (states packed in 16 bytes) in
    /// tables about 63 % full: 55 bytes a key.
    #[test]
    fn the_memory_store_reports_its_bytes_per_key() {
        let line = memory_report(&StoreSettings::memory(2_000_000)).unwrap();
        let per_key: f64 = line
            .split(" bytes a key")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!((48.0..=60.0).contains(&per_key), "{line}");
    }
}
