//! Every metric the workspace records is documented: each name written as
//! a string in a crate's sources (outside its test module) appears in
//! docs/service.md, docs/gateway.md or docs/redis.md — spelt out, or as a
//! `_suffix` of the family named before it on the same line
//! (`` `floodgate_redis_calls_total`, `_errors_total` ``).

use std::collections::BTreeSet;
use std::path::Path;

use floodgate_testkit::workspace_root;

/// The references where metrics are documented.
const DOCS: [&str; 3] = ["docs/service.md", "docs/gateway.md", "docs/redis.md"];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The words of `text` that are `floodgate_…` metric names in double
/// quotes (`"floodgate_requests_total"`, not `"floodgate_runtime::…"`).
fn quoted_names(text: &str) -> impl Iterator<Item = &str> {
    text.split('"').skip(1).step_by(2).filter(|s| {
        s.starts_with("floodgate_")
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// The metric names the sources of every crate write, outside their test
/// modules.
fn recorded() -> BTreeSet<String> {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(workspace_root().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    let mut names = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        names.extend(quoted_names(code).map(str::to_owned));
    }
    names
}

/// The names a line of the docs documents: its `floodgate_…` names in
/// backquotes, and its `` `_suffix` ``es completed by the family (the
/// first two words) of the name before them.
fn documented_in(line: &str, names: &mut BTreeSet<String>) {
    let mut family = None;
    for word in line.split('`').skip(1).step_by(2) {
        let word = word.split('{').next().unwrap_or(word);
        if let Some(rest) = word.strip_prefix("floodgate_") {
            family = rest
                .find('_')
                .map(|i| word[.."floodgate_".len() + i].to_owned());
            names.insert(word.to_owned());
        } else if let (Some(f), true) = (&family, word.starts_with('_')) {
            names.insert(format!("{f}{word}"));
        }
    }
}

fn documented() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(workspace_root().join(doc)).unwrap();
        for line in text.lines() {
            documented_in(line, &mut names);
        }
    }
    names
}

#[test]
fn every_recorded_metric_is_documented() {
    let recorded = recorded();
    assert!(
        recorded.contains("floodgate_requests_total") && recorded.len() > 40,
        "the sources' names were not found: {recorded:?}"
    );
    let documented = documented();
    let missing: Vec<_> = recorded.difference(&documented).collect();
    assert!(missing.is_empty(), "undocumented metrics: {missing:?}");
}

#[test]
fn a_suffix_takes_the_family_of_the_name_before_it() {
    let mut names = BTreeSet::new();
    documented_in(
        "| `floodgate_redis_calls_total`, `_errors_total` | counter | `api` |",
        &mut names,
    );
    let expected = [
        "floodgate_redis_calls_total",
        "floodgate_redis_errors_total",
    ];
    assert_eq!(names, expected.map(String::from).into());
}
