//! The pipelining window: concurrent commands share pipelines, a full
//! pipeline leaves before its window ends, `NOSCRIPT` inside a pipeline is
//! answered, a paused server still gives every caller its timeout, and the
//! window's task runs where the connections do, whichever runtime calls.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Server, blank, item};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Timestamp};
use floodgate_policy::{Backend, BackendError};
use floodgate_redis::{RedisBackend, RedisConfig};

async fn backend(server: &Server, f: impl FnOnce(&mut RedisConfig)) -> Arc<RedisBackend> {
    let mut config = RedisConfig {
        urls: vec![server.url()],
        connections: 1,
        timeout: Duration::from_secs(30),
        ..RedisConfig::default()
    };
    f(&mut config);
    let b = RedisBackend::connect(&config).await.expect("connect");
    // The script loaded ahead, so that pipelines hold first sends only.
    let (code, sha) = b.decide_script();
    assert_eq!(server.cli(&["script", "load", code]).trim(), sha);
    Arc::new(b)
}

fn limit() -> AnyLimit {
    FixedWindow::new(3, Duration::from_secs(3600))
        .unwrap()
        .into()
}

/// `n` callers at once, each deciding twice on a key of its own; returns
/// each caller's two outcomes (admitted?) and how long the slowest took.
async fn burst(
    b: &Arc<RedisBackend>,
    n: usize,
    prefix: &str,
) -> (Vec<Result<[bool; 2], BackendError>>, Duration) {
    let start = Instant::now();
    // Every caller is ready before any sends: on a loaded machine a caller
    // spawned late could otherwise find the others done and wait out the
    // window of a pipeline no one else joins.
    let ready = Arc::new(tokio::sync::Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let b = b.clone();
            let key = format!("{prefix}:{i}");
            let ready = ready.clone();
            tokio::spawn(async move {
                ready.wait().await;
                let limit = limit();
                let items = [item(b"p", key.as_bytes(), &limit, 2)];
                let mut out = [blank()];
                let first = b
                    .decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
                    .await?
                    .is_allowed();
                let second = b
                    .decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
                    .await?
                    .is_allowed();
                Ok([first, second])
            })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("caller"));
    }
    (out, start.elapsed())
}

/// One decision of cost 1 on `key`: admitted?
async fn decide(b: Arc<RedisBackend>, key: &'static str) -> Result<bool, BackendError> {
    let limit = limit();
    let items = [item(b"p", key.as_bytes(), &limit, 1)];
    let mut out = [blank()];
    b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
        .await
        .map(|d| d.is_allowed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_share_pipelines() {
    let server = Server::start();
    let b = backend(&server, |c| c.pipeline_window = Duration::from_millis(20)).await;
    let (outcomes, _) = burst(&b, 64, "share").await;
    for o in outcomes {
        // Cost 2 of 3: the first admitted, the second denied.
        assert_eq!(o.expect("decision"), [true, false]);
    }
    let (calls, pipelines) = (b.stats().calls.get(), b.stats().pipelines.get());
    assert_eq!(calls, 128);
    // Two rounds of 64 callers, each round in a few pipelines.
    assert!((2..=16).contains(&pipelines), "{pipelines} pipelines");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pipeline_leaves_before_its_window_ends() {
    let server = Server::start();
    let b = backend(&server, |c| {
        c.pipeline_window = Duration::from_secs(10);
        c.pipeline_limit = 8;
    })
    .await;
    let (outcomes, took) = burst(&b, 64, "full").await;
    for o in outcomes {
        assert_eq!(o.expect("decision"), [true, false]);
    }
    // 128 commands in pipelines of 8, none waiting out its 10 s window.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(b.stats().pipelines.get(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_inside_a_pipeline_is_answered() {
    let server = Server::start();
    let b = backend(&server, |c| c.pipeline_window = Duration::from_millis(5)).await;
    let (outcomes, _) = burst(&b, 8, "warm").await;
    assert!(outcomes.iter().all(std::result::Result::is_ok));
    assert_eq!(server.cli(&["script", "flush"]).trim(), "OK");
    let loads = b.stats().script_loads.get();
    let (outcomes, _) = burst(&b, 32, "cold").await;
    for o in outcomes {
        assert_eq!(o.expect("decision"), [true, false]);
    }
    assert!(b.stats().script_loads.get() > loads);
    assert_eq!(b.stats().errors.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_still_gives_every_caller_its_timeout() {
    let server = Server::start();
    let b = backend(&server, |c| {
        c.timeout = Duration::from_millis(200);
        c.pipeline_window = Duration::from_millis(1);
    })
    .await;
    let (outcomes, _) = burst(&b, 4, "before").await;
    assert!(outcomes.iter().all(std::result::Result::is_ok));
    server.pause();
    let (outcomes, took) = burst(&b, 16, "paused").await;
    server.resume();
    for o in &outcomes {
        assert!(matches!(o, Err(BackendError::Timeout(_))), "{o:?}");
    }
    // The first decision of each caller failed within its timeout.
    assert!(took < Duration::from_secs(2), "{took:?}");
    // And the window works again once the server does.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (outcomes, _) = burst(&b, 4, "after").await;
        if outcomes.iter().all(std::result::Result::is_ok) {
            break;
        }
        assert!(Instant::now() < deadline, "{outcomes:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A caller on another runtime, left idle after its call, does not hold
/// the window's task: it runs on the runtime the backend was built on.
#[test]
fn a_caller_on_an_idle_runtime_does_not_hold_the_window() {
    let server = Server::start();
    let main = common::runtime();
    let b = main.block_on(backend(&server, |c| {
        c.timeout = Duration::from_millis(500);
        c.pipeline_window = Duration::from_micros(200);
    }));
    let side = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    assert_eq!(side.block_on(decide(b.clone(), "idle:a")), Ok(true));
    // `side` stays alive, and idle, while `main` decides.
    for _ in 0..2 {
        assert_eq!(main.block_on(decide(b.clone(), "idle:a")), Ok(true));
    }
    assert_eq!(main.block_on(decide(b.clone(), "idle:a")), Ok(false));
    drop(side);
}

/// The runtime the backend was built on gone (a lazy backend dials from
/// its first caller's): each window's task starts on the caller's runtime.
#[test]
fn a_window_whose_home_runtime_ended_starts_on_the_callers() {
    let server = Server::start();
    let main = common::runtime();
    // Built lazily on a runtime that is then shut down: nothing is dialled
    // until the first decision, so the connections' own tasks live where
    // that decision runs.
    let builder = common::runtime();
    let b = builder.block_on(async {
        let config = RedisConfig {
            urls: vec![server.url()],
            connections: 1,
            timeout: Duration::from_secs(30),
            pipeline_window: Duration::from_micros(500),
            ..RedisConfig::default()
        };
        Arc::new(RedisBackend::connect_lazy(&config).await.expect("connect"))
    });
    drop(builder);
    // The runtime the backend was built on is gone: the window's task
    // starts on the caller's.
    for _ in 0..3 {
        assert_eq!(main.block_on(decide(b.clone(), "rt:a")), Ok(true));
    }
    assert_eq!(main.block_on(decide(b, "rt:a")), Ok(false));
}
