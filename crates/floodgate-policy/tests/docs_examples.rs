//! Every configuration example in docs/policies.md loads and compiles.

use floodgate_policy::PolicySet;
use floodgate_policy::read::{LoadOptions, load_str};

#[test]
fn the_documented_examples_are_valid() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/policies.md"
    ))
    .unwrap();
    let mut blocks = 0;
    for (i, block) in doc.split("```yaml\n").skip(1).enumerate() {
        let yaml = block.split("```").next().unwrap();
        // The format overview refers to a directory that exists only in a
        // deployment.
        let yaml: String = yaml
            .lines()
            .filter(|l| !l.contains("envoy_configs") && !l.contains("ratelimit/config"))
            .map(|l| format!("{l}\n"))
            .collect();
        let options = LoadOptions {
            other_sections: vec!["http"],
            ..Default::default()
        };
        let spec = load_str(&format!("policies.md#{i}"), &yaml, &options)
            .unwrap_or_else(|e| panic!("example {i}:\n{yaml}\n{e}"));
        PolicySet::compile(&spec).unwrap_or_else(|e| panic!("example {i}:\n{yaml}\n{e}"));
        blocks += 1;
    }
    assert!(blocks >= 9, "{blocks}");
}

/// README's service quick start (examples/floodgate.yaml, domain
/// `quickstart`: an exact sliding log of 3 per minute), four calls two
/// seconds apart: the fourth is over the limit, its reset counts to when
/// the newest call leaves the minute (58 s), its retry to when the oldest
/// does (54 s); an admitted call's reset is the whole minute.
#[test]
fn the_readme_quick_start_answers_as_documented() {
    use crate::common::{Harness, d};
    use floodgate_policy::Code;
    use std::time::Duration;

    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/floodgate.yaml"
    ))
    .unwrap();
    // Only the policies: the service's own sections are not the engine's.
    let domains = &text[text.find("\ndomains:").expect("a domains section") + 1..];
    let mut h = Harness::new(domains);
    let alice = [d(&[("user", "alice")])];
    for i in 0..3 {
        assert_eq!(h.send("quickstart", &alice), Code::Ok, "call {i}");
        let s = &h.response.statuses[0];
        assert_eq!(s.duration_until_reset, Duration::from_secs(60));
        assert_eq!(s.limit_remaining, 2 - i);
        h.advance(Duration::from_secs(2));
    }
    assert_eq!(h.send("quickstart", &alice), Code::OverLimit);
    let s = &h.response.statuses[0];
    assert_eq!(s.duration_until_reset, Duration::from_secs(58));
    assert_eq!(
        s.decision.unwrap().retry_after,
        Some(Duration::from_secs(54))
    );
}
