//! Hot reload: a valid change takes effect, an invalid one is rejected and
//! the old rules keep enforcing, counters of unchanged rules carry over —
//! while other threads keep sending requests.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{START, d, heap, ready};
use floodgate::{ManualClock, StoreConfig, Timestamp};
use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::{Compiled, ConfigSource, ReloadOutcome, Reloader};
use floodgate_policy::{Code, Engine, MemoryBackend, Response};

fn write(path: &Path, text: &str) {
    // Replace the file (as editors and ConfigMap updates do), so the change
    // is visible even within one timestamp tick.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// `floodgate.yaml` (holding [`V1`]) in a temporary directory, and a
/// source watching the file (or, `whole_dir`, the directory), compiled.
struct Watched {
    dir: tempfile::TempDir,
    file: PathBuf,
    source: ConfigSource,
    compiled: Compiled,
}

fn watched(whole_dir: bool) -> Watched {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floodgate.yaml");
    write(&file, V1);
    let source = ConfigSource {
        paths: vec![if whole_dir {
            dir.path().to_path_buf()
        } else {
            file.clone()
        }],
        options: LoadOptions::default(),
    };
    let compiled = source.compile().unwrap();
    Watched {
        dir,
        file,
        source,
        compiled,
    }
}

/// How long files must stay unchanged before they are read, in the tests
/// that do not write slowly.
const SETTLE: Duration = Duration::from_millis(10);

const V1: &str = "domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {requests: 5, per: 1h}
      - key: ip
        rate_limit: {requests: 3, per: 1h}
";

#[test]
fn reloads_apply_valid_changes_and_reject_invalid_ones_under_traffic() {
    let Watched {
        dir: _dir,
        file,
        source,
        compiled,
    } = watched(false);
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(START)));
    let engine = Arc::new(Engine::with_clock(
        floodgate_policy::PolicySet::empty(),
        MemoryBackend::new(StoreConfig::default()).unwrap(),
        clock,
    ));
    let e = engine.clone();
    let mut reloader = Reloader::new(source, &compiled, move |c| {
        e.replace_policy(c.policy);
    })
    .with_settle(SETTLE);
    engine.replace_policy(compiled.policy);

    // Background traffic on another key the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let traffic: Vec<_> = (0..2)
        .map(|t| {
            let (engine, stop, errors) = (engine.clone(), stop.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut r = Response::default();
                let req = [d(&[("user", &*format!("background-{t}"))])];
                while !stop.load(Ordering::Relaxed) {
                    if ready(engine.evaluate("api", &req, 1, &mut r)).is_err() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    let admitted = |key: (&str, &str), n: usize| {
        let mut r = Response::default();
        let req = [d(&[key])];
        (0..n)
            .filter(|_| {
                ready(engine.evaluate("api", &req, 1, &mut r)).unwrap();
                r.overall == Code::Ok
            })
            .count()
    };
    assert_eq!(admitted(("user", "alice"), 2), 2);
    assert_eq!(admitted(("ip", "1.2.3.4"), 1), 1);
    assert!(matches!(reloader.poll(), ReloadOutcome::Unchanged));

    // A valid change: the ip limit goes to 10; the user rule is unchanged,
    // so alice's counter (2 used of 5) carries over.
    write(&file, &V1.replace("requests: 3", "requests: 10"));
    assert!(matches!(reloader.poll(), ReloadOutcome::Applied));
    assert_eq!(admitted(("user", "alice"), 10), 3);
    assert_eq!(
        admitted(("ip", "1.2.3.4"), 20),
        10,
        "a changed rule starts afresh"
    );

    // An invalid change is rejected; the rules in force stay.
    write(&file, &V1.replace("requests: 5", "requests: five"));
    match reloader.poll() {
        ReloadOutcome::Rejected(e) => assert!(e.to_string().contains("floodgate.yaml:5:"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(admitted(("user", "bob"), 10), 5);
    // Still rejected on the next poll without a new change? Unchanged.
    assert!(matches!(reloader.poll(), ReloadOutcome::Unchanged));

    // A deleted file is rejected too.
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(reloader.poll(), ReloadOutcome::Rejected(_)));
    assert_eq!(admitted(("user", "carol"), 10), 5);

    // Fixed again: applied.
    write(&file, &V1.replace("requests: 5", "requests: 7"));
    assert!(matches!(reloader.poll(), ReloadOutcome::Applied));
    assert_eq!(admitted(("user", "dave"), 10), 7);

    stop.store(true, Ordering::Relaxed);
    for t in traffic {
        t.join().unwrap();
    }
    assert_eq!(errors.load(Ordering::Relaxed), 0);
}

#[test]
fn the_watcher_thread_picks_up_changes_by_itself() {
    let Watched {
        dir,
        file: _,
        source,
        compiled,
    } = watched(true);
    let applied = Arc::new(Mutex::new(0));
    let a = applied.clone();
    let handle = Reloader::new(source, &compiled, move |_| *a.lock().unwrap() += 1)
        .spawn(Duration::from_millis(20));
    // A new file in the watched directory counts as a change.
    write(
        &dir.path().join("more.yaml"),
        "domain: other\ndescriptors: []\n",
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while *applied.lock().unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "no reload seen");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(handle);
}

#[test]
fn a_hand_over_can_refuse_a_configuration() {
    let Watched {
        dir: _dir,
        file,
        source,
        compiled,
    } = watched(false);
    // The hand-over refuses the first configuration it is given.
    let mut calls = 0;
    let mut reloader = Reloader::new(source, &compiled, move |_| {
        calls += 1;
        if calls == 1 {
            Err("an ip rule")
        } else {
            Ok(())
        }
    })
    .with_settle(SETTLE);
    write(&file, &V1.replace("requests: 3", "requests: 4"));
    match reloader.poll() {
        ReloadOutcome::Refused(reason) => assert_eq!(reason, "an ip rule"),
        other => panic!("{other:?}"),
    }
    write(&file, &V1.replace("key: ip", "key: asn"));
    assert!(matches!(reloader.poll(), ReloadOutcome::Applied));
}

/// A reload asked for compares the contents even when no file's metadata
/// changed (rewritten in place, same size, modification time put back),
/// where a poll sees nothing.
#[test]
fn a_reload_asked_for_compares_contents_whatever_the_metadata() {
    let Watched {
        dir: _dir,
        file,
        source,
        compiled,
    } = watched(false);
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let applied = Arc::new(Mutex::new(0));
    let a = applied.clone();
    let mut reloader =
        Reloader::new(source, &compiled, move |_| *a.lock().unwrap() += 1).with_settle(SETTLE);
    // Same length ("5" becomes "7"), same file, same modification time.
    let edited = V1.replace("requests: 5", "requests: 7");
    assert_eq!(edited.len(), V1.len());
    std::fs::write(&file, &edited).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert!(matches!(reloader.poll(), ReloadOutcome::Unchanged));
    assert_eq!(*applied.lock().unwrap(), 0);
    assert!(matches!(reloader.poll_now(), ReloadOutcome::Applied));
    assert_eq!(*applied.lock().unwrap(), 1);
    // Asked again with nothing changed: nothing applied.
    assert!(matches!(reloader.poll_now(), ReloadOutcome::Unchanged));
    assert_eq!(*applied.lock().unwrap(), 1);
}

/// A watcher without an interval checks only when asked (as `serve` and
/// `gateway` do on SIGHUP with `reload_interval: 0`).
#[test]
fn a_watcher_without_interval_reloads_only_when_asked() {
    let Watched {
        dir: _dir,
        file,
        source,
        compiled,
    } = watched(false);
    let applied = Arc::new(Mutex::new(0));
    let a = applied.clone();
    let handle =
        Reloader::new(source, &compiled, move |_| *a.lock().unwrap() += 1).spawn_with(None);
    let trigger = handle.trigger();
    write(&file, &V1.replace("requests: 5", "requests: 9"));
    // Not polled: a while later, still nothing applied.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(*applied.lock().unwrap(), 0);
    trigger.request();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while *applied.lock().unwrap() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the asked-for reload never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The handle stops the thread even though it never times out.
    drop(handle);
    trigger.request();
    assert_eq!(*applied.lock().unwrap(), 1);
}

/// A request made before the watcher first waits is kept: the thread it
/// runs on may have spent the wake-up meanwhile (here it parks once
/// before running the watcher, as a thread waiting for its next job does),
/// and the watcher still checks at once instead of waiting for the next
/// request.
#[test]
fn a_request_before_the_watcher_waits_is_not_lost() {
    let Watched {
        dir: _dir,
        file,
        source,
        compiled,
    } = watched(false);
    let applied = Arc::new(Mutex::new(0));
    let a = applied.clone();
    let (started, start) = std::sync::mpsc::channel();
    let handle = Reloader::new(source, &compiled, move |_| *a.lock().unwrap() += 1).spawn_on(
        None,
        move |watch| {
            let thread = std::thread::spawn(move || {
                started.send(()).unwrap();
                // Spends the request's wake-up (or returns at once if
                // it already came).
                std::thread::park();
                watch();
            });
            Some(thread)
        },
    );
    start.recv().unwrap();
    write(&file, &V1.replace("requests: 5", "requests: 9"));
    handle.trigger().request();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while *applied.lock().unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the request was lost");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Files read again with the same bytes (asked for, or written anew) are
/// not compiled: a check allocates a few blocks, not the many a compile
/// of their rules takes.
#[test]
fn unchanged_files_are_not_compiled_again() {
    let rules = 2_000;
    let mut text = String::from("domains:\n  - domain: tenants\n    descriptors:\n");
    for i in 0..rules {
        text.push_str(&format!(
            "      - key: tenant\n        value: tenant-{i}\n        rate_limit: {{requests: 5, per: 1h}}\n"
        ));
    }
    let Watched {
        dir: _dir,
        file,
        source,
        compiled: _,
    } = watched(false);
    write(&file, &text);
    let compiled = source.compile().unwrap();
    let applied = Arc::new(Mutex::new(0));
    let a = applied.clone();
    let mut reloader =
        Reloader::new(source, &compiled, move |_| *a.lock().unwrap() += 1).with_settle(SETTLE);
    for rewrite in [false, true] {
        if rewrite {
            write(&file, &text);
        }
        let before = heap::made();
        assert!(matches!(reloader.poll_now(), ReloadOutcome::Unchanged));
        let made = heap::made() - before;
        assert!(
            made < 100,
            "{made} allocations to find {rules} rules unchanged"
        );
    }
    assert_eq!(*applied.lock().unwrap(), 0);
    // A change is still compiled and applied.
    write(&file, &text.replace("tenant-7\n", "tenant-x\n"));
    assert!(matches!(reloader.poll_now(), ReloadOutcome::Applied));
    assert_eq!(*applied.lock().unwrap(), 1);
}
