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
