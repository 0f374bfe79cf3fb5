//! Reloads that would lift limits are refused and the running rules stay:
//! a file emptied or cut short, a directory with one file emptied, a file
//! read while it is still being written (polled, or asked for at once) —
//! unless an empty configuration is explicitly allowed.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{START, d, ready};
use floodgate::{ManualClock, StoreConfig, Timestamp};
use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::{Compiled, ConfigSource, ReloadOutcome, Reloader};
use floodgate_policy::{Code, Engine, MemoryBackend, PolicySet, Response};

type TestEngine = Engine<MemoryBackend, Arc<ManualClock>>;

const POLICY: &str = "domains:
  - domain: api
    descriptors:
      - key: ip
        rate_limit: {requests: 100, per: 1h}
      - key: user
        rate_limit: {requests: 2, per: 1h}
";

fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn engine() -> Arc<TestEngine> {
    Arc::new(Engine::with_clock(
        PolicySet::empty(),
        MemoryBackend::new(StoreConfig::default()).unwrap(),
        Arc::new(ManualClock::new(Timestamp::from_secs(START))),
    ))
}

fn code(engine: &TestEngine, domain: &str, key: &str, value: &str) -> Code {
    let mut r = Response::default();
    ready(engine.evaluate(domain, &[d(&[(key, value)])], 1, &mut r)).unwrap();
    r.overall
}

/// A reloader of `paths` handing over to `engine`, which runs what they
/// hold now.
fn watch(
    paths: Vec<PathBuf>,
    options: LoadOptions,
    engine: &Arc<TestEngine>,
) -> Reloader<impl FnMut(Compiled) + Send + use<>> {
    let source = ConfigSource { paths, options };
    let compiled = source.compile().unwrap_or_else(|e| panic!("{e}"));
    let e = engine.clone();
    let reloader = Reloader::new(source, &compiled, move |c: Compiled| {
        e.replace_policy(c.policy);
    })
    .with_settle(Duration::from_millis(10));
    engine.replace_policy(compiled.policy);
    reloader
}

/// Uses up `victim`'s two requests: it is denied from then on.
fn deny(engine: &TestEngine, domain: &str, victim: &str) {
    for _ in 0..2 {
        assert_eq!(code(engine, domain, "user", victim), Code::Ok);
    }
    assert_eq!(code(engine, domain, "user", victim), Code::OverLimit);
}

#[test]
fn an_emptied_or_truncated_file_is_refused_and_the_limits_stay() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.yaml");
    replace(&file, POLICY);
    let engine = engine();
    let mut reloader = watch(vec![file.clone()], LoadOptions::default(), &engine);
    deny(&engine, "api", "victim");
    let cut_at = |needle: &str| POLICY[..POLICY.find(needle).unwrap()].to_owned();
    let cases = [
        (String::new(), "file is empty"),
        ("\n  \n# nothing but a comment\n".into(), "file is empty"),
        ("domains:\n".into(), "no domain is configured"),
        (
            cut_at("    descriptors:"),
            "domain 'api' has no descriptors",
        ),
        (
            cut_at("        rate_limit: {requests: 2"),
            "descriptor 'user' has neither rate_limit nor descriptors",
        ),
    ];
    for (text, expected) in cases {
        // Truncated and written in place, as `>` in a shell does.
        std::fs::write(&file, &text).unwrap();
        match reloader.poll() {
            ReloadOutcome::Rejected(e) => {
                assert!(e.to_string().contains(expected), "{text:?}: {e}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
        assert_eq!(
            code(&engine, "api", "user", "victim"),
            Code::OverLimit,
            "{text:?} lifted the limit"
        );
        assert_eq!(code(&engine, "api", "ip", "10.0.0.1"), Code::Ok);
    }
    // Written whole again (and replaced by a rename, atomically): applied,
    // the unchanged rule's counters carry over.
    replace(&file, &POLICY.replace("requests: 100", "requests: 50"));
    assert!(matches!(reloader.poll(), ReloadOutcome::Applied));
    assert_eq!(code(&engine, "api", "user", "victim"), Code::OverLimit);
}

#[test]
fn one_emptied_file_of_a_directory_is_refused_and_every_domain_stays() {
    let dir = tempfile::tempdir().unwrap();
    replace(&dir.path().join("a.yaml"), POLICY);
    replace(
        &dir.path().join("b.yaml"),
        &POLICY.replace("domain: api", "domain: shop"),
    );
    let engine = engine();
    let mut reloader = watch(vec![dir.path().into()], LoadOptions::default(), &engine);
    deny(&engine, "api", "victim");
    deny(&engine, "shop", "victim");
    // Emptied, or cut before its first rule: the other file still defines
    // a domain, but this one held rules and holds none.
    for (text, expected) in [
        ("", "b.yaml: file is empty"),
        (
            "domains:\n",
            "b.yaml: the file held 2 rule(s) and now holds none",
        ),
        (
            "domain: shop\n",
            "b.yaml: the file held 2 rule(s) and now holds none",
        ),
    ] {
        std::fs::write(dir.path().join("b.yaml"), text).unwrap();
        match reloader.poll() {
            ReloadOutcome::Rejected(e) => assert!(e.to_string().contains(expected), "{e}"),
            other => panic!("{text:?}: {other:?}"),
        }
        assert_eq!(code(&engine, "shop", "user", "victim"), Code::OverLimit);
        assert_eq!(code(&engine, "api", "user", "victim"), Code::OverLimit);
    }
    // Still holding something: a change like any other.
    let one_list = "domains:\n  - domain: shop\n    deny: [{key: k, values: [v]}]\n";
    std::fs::write(dir.path().join("b.yaml"), one_list).unwrap();
    assert!(matches!(reloader.poll(), ReloadOutcome::Applied));
    assert_eq!(code(&engine, "shop", "k", "v"), Code::OverLimit);
    // Removing the file removes its domain: that is a decision, not an
    // accident.
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    assert!(matches!(reloader.poll(), ReloadOutcome::Applied));
    assert_eq!(code(&engine, "shop", "user", "victim"), Code::Ok);
    assert_eq!(code(&engine, "api", "user", "victim"), Code::OverLimit);
}

#[test]
fn an_empty_configuration_loads_when_it_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.yaml");
    replace(&file, POLICY);
    let engine = engine();
    let allowed = LoadOptions {
        allow_empty: true,
        ..LoadOptions::default()
    };
    let mut reloader = watch(vec![file.clone()], allowed.clone(), &engine);
    deny(&engine, "api", "victim");
    std::fs::write(&file, "").unwrap();
    assert!(matches!(reloader.poll(), ReloadOutcome::Applied));
    assert_eq!(code(&engine, "api", "user", "victim"), Code::Ok);
    // And it may start empty.
    let source = ConfigSource {
        paths: vec![file],
        options: allowed,
    };
    assert_eq!(source.compile().unwrap().policy.domains().count(), 0);
}

/// The configuration a slow writer puts in place: many rules, the user
/// rule last, so that most prefixes cut at a line end are valid
/// configurations without it.
fn long_policy() -> String {
    let mut text = String::from("domains:\n  - domain: api\n    descriptors:\n");
    for i in 0..300 {
        text.push_str(&format!(
            "      - key: k{i}\n        rate_limit: {{requests: 100, per: 1h}}\n"
        ));
    }
    text + "      - key: user\n        rate_limit: {requests: 2, per: 1h}\n"
}

/// Truncates `file` and writes `text` into it line by line, 4 ms apart
/// (longer than a check waits for files to settle, in all), as a slow writer (a copy over a network, a template engine)
/// does; sets `done` at the end.
fn write_slowly(file: PathBuf, text: String, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut f = std::fs::File::create(&file).unwrap();
        for line in text.split_inclusive('\n') {
            f.write_all(line.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(4));
        }
        done.store(true, Ordering::Release);
    })
}

/// Records every configuration handed over that lacks the user rule.
fn without_user_rule(
    engine: &Arc<TestEngine>,
    bad: &Arc<AtomicUsize>,
    applied: &Arc<AtomicUsize>,
) -> impl FnMut(Compiled) + Send + use<> {
    let (e, bad, applied) = (engine.clone(), bad.clone(), applied.clone());
    move |c: Compiled| {
        if !c.policy.rules().iter().any(|r| &*r.path == "api.user") {
            bad.fetch_add(1, Ordering::Relaxed);
        }
        applied.fetch_add(1, Ordering::Relaxed);
        e.replace_policy(c.policy);
    }
}

#[test]
fn a_file_still_being_written_is_read_only_once_it_settles() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.yaml");
    replace(&file, POLICY);
    let engine = engine();
    let source = ConfigSource {
        paths: vec![file.clone()],
        options: LoadOptions::default(),
    };
    let compiled = source.compile().unwrap();
    engine.replace_policy(PolicySet::compile(&compiled.loaded.spec).unwrap());
    let (bad, applied) = (Arc::default(), Arc::default());
    let mut reloader = Reloader::new(
        source,
        &compiled,
        without_user_rule(&engine, &bad, &applied),
    )
    .with_settle(Duration::from_millis(300));
    deny(&engine, "api", "victim");
    let done = Arc::new(AtomicBool::new(false));
    let writer = write_slowly(file, long_policy(), done.clone());
    let mut unsettled = 0;
    while !done.load(Ordering::Acquire) {
        if let ReloadOutcome::Unsettled { file } = reloader.poll() {
            assert!(file.ends_with("floodgate.yaml"), "{file}");
            unsettled += 1;
        }
        assert_eq!(code(&engine, "api", "user", "victim"), Code::OverLimit);
    }
    writer.join().unwrap();
    assert!(unsettled > 0, "the write was never seen in progress");
    assert_eq!(bad.load(Ordering::Relaxed), 0, "a partial file was applied");
    // Settled: read and applied (if no poll caught it whole already).
    let _ = reloader.poll();
    assert_eq!(applied.load(Ordering::Relaxed), 1);
    assert_eq!(code(&engine, "api", "k299", "x"), Code::Ok);
    assert_eq!(code(&engine, "api", "user", "victim"), Code::OverLimit);
}

/// A reload asked for (SIGHUP) while the file is being written waits for
/// the write to end, then applies the whole file without being asked again.
#[test]
fn a_reload_asked_for_during_a_write_waits_for_the_end_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.yaml");
    replace(&file, POLICY);
    let engine = engine();
    let source = ConfigSource {
        paths: vec![file.clone()],
        options: LoadOptions::default(),
    };
    let compiled = source.compile().unwrap();
    engine.replace_policy(PolicySet::compile(&compiled.loaded.spec).unwrap());
    let (bad, applied) = (Arc::default(), Arc::<AtomicUsize>::default());
    let handle = Reloader::new(
        source,
        &compiled,
        without_user_rule(&engine, &bad, &applied),
    )
    .with_settle(Duration::from_millis(300))
    .spawn_with(None);
    deny(&engine, "api", "victim");
    let done = Arc::new(AtomicBool::new(false));
    let writer = write_slowly(file, long_policy(), done.clone());
    std::thread::sleep(Duration::from_millis(20));
    handle.trigger().request();
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = Mutex::new(());
    while applied.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "never applied");
        let _g = seen.lock().unwrap();
        assert_eq!(code(&engine, "api", "user", "victim"), Code::OverLimit);
        std::thread::sleep(Duration::from_millis(5));
    }
    writer.join().unwrap();
    assert_eq!(bad.load(Ordering::Relaxed), 0, "a partial file was applied");
    assert_eq!(code(&engine, "api", "k299", "x"), Code::Ok);
    assert_eq!(code(&engine, "api", "user", "victim"), Code::OverLimit);
    drop(handle);
}
