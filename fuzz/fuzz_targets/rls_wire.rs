//! A `RateLimitRequest`, any bytes: the service's own decoder (which reads
//! keys and values in place) never panics, and reads exactly what prost,
//! the generated decoder, reads: the same domain, hits addend and
//! descriptors, each with the same entries, override (its unit's number as
//! sent: the engine checks it) and hits addend.
#![no_main]

use floodgate_policy::Descriptor;
use floodgate_server::internals::WireRequest;
use floodgate_server::proto::rls::RateLimitRequest;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let wire = WireRequest::decode(data);
    let Ok(generated) = RateLimitRequest::decode(data) else {
        return;
    };
    let wire = match wire {
        Ok(w) => w,
        Err(e) => panic!("prost reads the request, the wire decoder refuses it: {e}"),
    };
    assert_eq!(wire.domain, generated.domain, "domain");
    assert_eq!(wire.hits_addend, generated.hits_addend, "hits addend");
    let descriptors = wire.descriptors();
    assert_eq!(
        descriptors.len(),
        generated.descriptors.len(),
        "descriptor count"
    );
    for (i, (w, g)) in descriptors.iter().zip(&generated.descriptors).enumerate() {
        let wire_entries: Vec<(&str, &str)> = (0..w.len()).map(|j| w.entry(j)).collect();
        let generated_entries: Vec<(&str, &str)> = g
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(wire_entries, generated_entries, "entries of descriptor {i}");
        assert_eq!(
            w.hits_addend(),
            g.hits_addend,
            "hits addend of descriptor {i}"
        );
        let generated_limit = g.limit.as_ref().map(|l| (l.requests_per_unit, l.unit));
        let wire_limit = w
            .limit_override()
            .map(|l| (l.requests_per_unit, l.unit_number));
        assert_eq!(
            wire_limit, generated_limit,
            "limit override of descriptor {i}"
        );
    }
});
