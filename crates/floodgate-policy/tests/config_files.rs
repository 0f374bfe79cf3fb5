//! Loading configuration: envoyproxy/ratelimit files unchanged (a corpus
//! covering every key), the same rejections with the same reasons, and
//! Floodgate's own format with file:line:column errors.

use std::path::{Path, PathBuf};

use floodgate_policy::PolicySet;
use floodgate_policy::read::{LoadOptions, load, load_str};

fn corpus(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/envoy_corpus")
        .join(sub)
}

#[test]
fn every_valid_envoy_file_loads_and_compiles() {
    let loaded =
        load(&[corpus("valid")], &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let set = PolicySet::compile(&loaded.spec).unwrap_or_else(|e| panic!("{e}"));
    let mut names: Vec<_> = set.domains().map(|d| d.name.to_string()).collect();
    names.sort();
    assert_eq!(names, ["anchors", "every_key", "minimal", "yaml11"]);
    assert_eq!(loaded.files.len(), 4);
    // Aliases resolve, YAML 1.1 booleans and digit-string values read as
    // envoyproxy/ratelimit reads them.
    let yaml11 = set.domain("yaml11").unwrap();
    let _ = yaml11;
    assert!(
        set.rules()
            .iter()
            .any(|r| &*r.domain == "yaml11" && r.shadow)
    );
    assert!(
        set.rules()
            .iter()
            .any(|r| r.path.as_ref() == "yaml11.b_0123")
    );
    assert_eq!(
        set.rules()
            .iter()
            .filter(|r| &*r.domain == "anchors")
            .count(),
        2
    );
}

#[test]
fn every_invalid_envoy_file_is_rejected_with_envoys_reason_and_a_position() {
    let dir = corpus("invalid");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 14);
    for file in files {
        let expect = std::fs::read_to_string(file.with_extension("expect")).unwrap();
        let expect = expect.trim();
        let result = load(std::slice::from_ref(&file), &LoadOptions::default())
            .and_then(|l| PolicySet::compile(&l.spec).map(|_| ()));
        let err = match result {
            Ok(()) => panic!("{} loaded, but should fail with: {expect}", file.display()),
            Err(e) => e,
        };
        let text = err.to_string();
        assert!(
            text.contains(expect),
            "{}: got {text:?}, want {expect:?}",
            file.display()
        );
        let first = &err.0[0];
        assert!(
            first
                .at
                .file
                .ends_with(file.file_name().unwrap().to_str().unwrap())
        );
        assert!(first.at.line > 0, "{}: no line in {text}", file.display());
    }
}

#[test]
fn two_files_of_one_domain_are_rejected_unless_merging() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
    std::fs::write(dir.path().join("b.yaml"), "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
    std::fs::write(dir.path().join(".hidden.yaml"), "not: [valid").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
    let paths = [dir.path().to_path_buf()];
    let err = load(&paths, &LoadOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("duplicate domain 'd' in config file"),
        "{err}"
    );
    // Where the other one is, and the two ways out.
    let first = dir.path().join("a.yaml").display().to_string();
    let text = err.to_string();
    assert!(text.contains(&format!("(first at {first}:1:")), "{text}");
    assert!(text.contains("`--merge-domains`"), "{text}");
    assert!(text.contains("`floodgate config check --each`"), "{text}");
    let merged = load(
        &paths,
        &LoadOptions {
            merge_domains: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(merged.spec.domains.len(), 1);
    assert_eq!(merged.spec.domains[0].descriptors.len(), 2);
}

/// A file named twice, or on its own and through its directory, is one
/// file: read once, never a duplicate of itself.
#[test]
fn a_file_reached_twice_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.yaml");
    std::fs::write(&file, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
    let through = dir.path().join(".").join("a.yaml");
    for paths in [
        vec![file.clone(), file.clone()],
        vec![dir.path().to_path_buf(), file.clone()],
        vec![file.clone(), through],
    ] {
        let loaded =
            load(&paths, &LoadOptions::default()).unwrap_or_else(|e| panic!("{paths:?}: {e}"));
        assert_eq!(loaded.spec.domains.len(), 1, "{paths:?}");
    }
}

/// An entry named as a configuration file that is none — a directory, a
/// symbolic link to nothing (a ConfigMap whose key became a directory, a
/// link left by a half-done swap) — is a configuration that cannot be
/// read, never one without that file: a clear error, even when an empty
/// configuration is allowed.
#[test]
fn an_entry_named_as_a_file_that_is_none_is_an_error() {
    let options = LoadOptions {
        allow_empty: true,
        ..Default::default()
    };
    for (make, why) in [
        (
            (|p: &Path| std::fs::create_dir(p).unwrap()) as fn(&Path),
            "cannot read: a directory, not a file",
        ),
        (
            |p: &Path| std::os::unix::fs::symlink("gone.yaml", p).unwrap(),
            "cannot read: a symbolic link to nothing",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        make(&dir.path().join("config.yaml"));
        let err = load(&[dir.path().to_path_buf()], &options).unwrap_err();
        let at = dir.path().join("config.yaml").display().to_string();
        assert!(err.to_string().contains(&format!("{at}: {why}")), "{err}");
    }
    // Hidden entries and other names stay out of it, whatever they are.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("..2026_11_29_13_00_00.123456789")).unwrap();
    std::os::unix::fs::symlink("gone", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("gone", dir.path().join(".x.yaml")).unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    assert!(load(&[dir.path().to_path_buf()], &options).is_ok());
}

#[test]
fn floodgate_format_reports_unknown_keys_with_line_and_column() {
    let yaml = "settings:
  shadow_mode: false
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit:
          algorithm: token_bucket
          requests: 10
          per: 1s
          burts: 20
";
    let err = load_str("floodgate.yaml", yaml, &LoadOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("floodgate.yaml:11:11: unknown key 'burts'"),
        "{text}"
    );
    assert!(text.contains("burst"), "lists the allowed keys: {text}");
    assert!(
        text.contains("(did you mean 'burst'? expected one of:"),
        "suggests the key meant: {text}"
    );
    let unlike = yaml.replace("burts", "colour");
    let text = load_str("floodgate.yaml", &unlike, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(!text.contains("did you mean"), "no key is like it: {text}");
}

#[test]
fn floodgate_format_errors_name_the_offending_value() {
    let cases = [
        (
            "algorithm: tokenbucket\n      requests: 1\n      per: 1s",
            "unknown algorithm 'tokenbucket'",
        ),
        (
            "requests: 10\n      per: 5 parsecs",
            "expected a duration such as 500ms, 1.5s, 1m30s, 1d or minute, found `5 parsecs`",
        ),
        (
            "requests: -1\n      per: 1s",
            "expected a non-negative integer, found `-1`",
        ),
        ("requests: 0x\n      per: 1s", "found `0x`"),
        (
            "algorithm: sliding_log\n      requests: 2000000\n      per: 1s",
            "at most 1000000",
        ),
        (
            "algorithm: token_bucket\n      requests: 10\n      per: 1s\n      burst: 0",
            "invalid burst",
        ),
        (
            "algorithm: shaper\n      rate: 0.5r/s",
            "invalid rate '0.5r/s'",
        ),
        (
            "algorithm: shaper\n      rate: 10r/s\n      nodelay: true\n      delay: 3",
            "either nodelay or delay",
        ),
        (
            "requests: 18446744073709551616\n      per: 1s",
            "non-negative integer",
        ),
        (
            "requests: 1099511627777\n      per: 1s",
            "at most 1099511627776",
        ),
        ("requests: 5\n      per: 40000d", "at most 100 years"),
        ("algorithm: concurrency", "needs 'max'"),
        (
            "algorithm: concurrency\n      max: 2\n      penalty: true",
            "penalty does not apply to a concurrency limit",
        ),
        (
            "algorithm: concurrency\n      max: 2\n      block_for: 1m",
            "block_for does not apply to a concurrency limit",
        ),
    ];
    for (limit, want) in cases {
        let limit = limit.replace("\n      ", "\n          ");
        let yaml = format!(
            "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit:\n          {limit}\n"
        );
        let result = load_str("f.yaml", &yaml, &LoadOptions::default())
            .and_then(|s| PolicySet::compile(&s).map(|_| ()));
        let err = result.err().unwrap_or_else(|| panic!("accepted:\n{yaml}"));
        assert!(
            err.to_string().contains(want),
            "{yaml}\n=> {err}\n(want {want})"
        );
        assert!(err.0[0].at.line > 0, "{err}");
    }
}

#[test]
fn all_errors_are_reported_not_just_the_first() {
    let yaml = "domains:
  - domain: d
    descriptors:
      - key: a
        rate_limit: {unit: secnd, requests_per_unit: 1}
      - key: b
        rate_limit: {unlimited: true}
        bogus: 1
      - value: no_key
";
    let err = load_str("f.yaml", yaml, &LoadOptions::default()).unwrap_err();
    assert_eq!(err.0.len(), 3, "{err}");
}

#[test]
fn other_components_sections_are_accepted_only_when_declared() {
    let yaml = "server:\n  grpc: 127.0.0.1:8081\ndomains:\n  - domain: d\n    deny: [{key: k, values: [v]}]\n";
    assert!(load_str("f.yaml", yaml, &LoadOptions::default()).is_err());
    let opts = LoadOptions {
        other_sections: vec!["server"],
        ..Default::default()
    };
    assert!(load_str("f.yaml", yaml, &opts).is_ok());
}

#[test]
fn hostile_inputs_give_bounded_errors_never_panics() {
    let opts = LoadOptions::default();
    // A 1 MB value.
    let big = "x".repeat(1 << 20);
    let yaml = format!(
        "domain: d\ndescriptors:\n  - key: k\n    value: {big}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
    );
    let spec = load_str("big.yaml", &yaml, &opts).unwrap();
    assert!(PolicySet::compile(&spec).is_ok());
    // Deep nesting.
    let mut deep = String::from("domain: d\ndescriptors:\n");
    for i in 0..200 {
        let pad = "  ".repeat(i * 2);
        deep.push_str(&format!("{pad}  - key: k{i}\n{pad}    descriptors:\n"));
    }
    let _ = load_str("deep.yaml", &deep, &opts).map(|s| PolicySet::compile(&s));
    // A billion laughs.
    let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..9 {
        laughs.push_str(&format!(
            "b{i}: &b{i} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
            p = if i == 0 {
                "a".to_string()
            } else {
                format!("b{}", i - 1)
            }
        ));
    }
    assert!(load_str("laughs.yaml", &laughs, &opts).is_err());
    // Garbage.
    for junk in [
        "\0\0\0",
        "[[[[",
        "domain: [1, {",
        "- - - -",
        "{a: b}: c",
        "domain: !!binary aGVsbG8=",
    ] {
        let _ = load_str("junk.yaml", junk, &opts).map(|s| PolicySet::compile(&s));
    }
    // Many errors are capped.
    let mut many = String::from("domains:\n  - domain: d\n    descriptors:\n");
    for _ in 0..5000 {
        many.push_str("      - key: ''\n");
    }
    let err = load_str("many.yaml", &many, &opts).unwrap_err();
    assert!(err.0.len() <= 1000);
}

/// A path naming an endless device is refused after the size bound, not
/// read until memory runs out; an empty device is an empty file (refused
/// unless an empty configuration is allowed).
#[cfg(unix)]
#[test]
fn endless_files_are_refused_at_the_size_bound() {
    let opts = LoadOptions::default();
    let started = std::time::Instant::now();
    let err = load(&[PathBuf::from("/dev/zero")], &opts).unwrap_err();
    assert!(
        err.to_string()
            .contains("file is larger than 16777216 bytes"),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let err = load(&[PathBuf::from("/dev/null")], &opts).unwrap_err();
    assert!(err.to_string().contains("file is empty"), "{err}");
    let allowed = LoadOptions {
        allow_empty: true,
        ..LoadOptions::default()
    };
    let empty = load(&[PathBuf::from("/dev/null")], &allowed).unwrap();
    assert!(PolicySet::compile(&empty.spec).is_ok());
}

#[test]
fn ten_thousand_rules_load_quickly() {
    let mut yaml = String::from("domain: big\ndescriptors:\n");
    for i in 0..10_000 {
        yaml.push_str(&format!("  - key: k\n    value: v{i}\n    rate_limit: {{unit: second, requests_per_unit: {}}}\n", i + 1));
    }
    let t = std::time::Instant::now();
    let spec = load_str("big.yaml", &yaml, &LoadOptions::default()).unwrap();
    let set = PolicySet::compile(&spec).unwrap();
    assert_eq!(set.rules().len(), 10_000);
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
}
