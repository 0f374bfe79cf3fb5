//! A configuration file, any bytes: loading never panics, and a policy
//! that loads compiles or is refused with errors; one that compiles then
//! decides, on the in-memory store, a request for every rule it holds.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Apply, ManualClock, StoreConfig, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::spec::NodeSpec;
use floodgate_policy::{Engine, MemoryBackend, OwnedDescriptor, PolicySet, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = load_str("fuzz.yaml", text, &LoadOptions::default()) else {
        return;
    };
    let Ok(policy) = PolicySet::compile(&spec) else {
        return;
    };
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)));
    let backend = MemoryBackend::new(StoreConfig::default()).expect("default store");
    let engine = Engine::with_clock(policy, backend, clock.clone());
    let mut response = Response::default();
    for domain in &spec.domains {
        let mut paths = Vec::new();
        walk(&domain.descriptors, &mut Vec::new(), &mut paths);
        for entries in paths.iter().take(64) {
            let request = [OwnedDescriptor::new(
                entries.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )];
            for hits in [1, 0, 3, u32::MAX] {
                let decided =
                    engine.evaluate_now(&domain.name, &request, hits, Apply::Commit, &mut response);
                assert!(
                    decided.is_some(),
                    "the in-memory store decides synchronously"
                );
                clock.advance(Duration::from_millis(700));
            }
            if let Some(Ok(())) =
                engine.evaluate_now(&domain.name, &request, 1, Apply::Check, &mut response)
            {
                engine_release(&engine, &response);
            }
        }
    }
});

fn engine_release(engine: &Engine<MemoryBackend, Arc<ManualClock>>, response: &Response) {
    let mut f = std::pin::pin!(engine.release(response));
    let waker = std::task::Waker::noop();
    let _ = f.as_mut().poll(&mut std::task::Context::from_waker(waker));
}

/// Every path from the root to a node as descriptor entries (the node's
/// value, or a made-up one where any value matches).
fn walk(
    nodes: &[NodeSpec],
    prefix: &mut Vec<(String, String)>,
    out: &mut Vec<Vec<(String, String)>>,
) {
    for node in nodes {
        let value = match node.value.as_deref() {
            Some(v) => v.replace('*', "x"),
            None => "any".to_owned(),
        };
        prefix.push((node.key.clone(), value));
        out.push(prefix.clone());
        if out.len() < 256 {
            walk(&node.children, prefix, out);
        }
        prefix.pop();
    }
}
