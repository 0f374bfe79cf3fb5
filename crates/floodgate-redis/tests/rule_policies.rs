//! Failure policies per rule (`Item::on_failure`, a rule's `on_failure`)
//! with a real Redis taken down: each item follows its rule's policy, the
//! others the backend's; a batch gets its narrowest decision; the `local`
//! items count on the local store, atomically together. Also through the
//! engine, from a Floodgate YAML file.

use crate::common;

use std::time::Duration;

use common::{Server, blank, item};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Timestamp};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{
    Backend, Code, Engine, Item, OnFailure, OwnedDescriptor, PolicySet, Response,
};
use floodgate_redis::{
    BreakerConfig, BreakerState, FailurePolicy, RedisBackend, RedisConfig, ResilientBackend,
};

async fn backend(server: &Server, policy: FailurePolicy) -> ResilientBackend {
    let config = RedisConfig {
        urls: vec![server.url()],
        timeout: Duration::from_millis(50),
        connect_timeout: Duration::from_millis(100),
        failure_policy: policy,
        breaker: BreakerConfig {
            failure_threshold: 3,
            cool_down: Duration::from_secs(60),
        },
        ..RedisConfig::default()
    };
    let redis = RedisBackend::connect(&config).await.expect("connect");
    ResilientBackend::new(redis, &config).expect("resilient")
}

fn with(policy: Option<OnFailure>, i: Item<'_>) -> Item<'_> {
    Item {
        on_failure: policy,
        ..i
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_item_follows_its_rules_policy() {
    let mut server = Server::start();
    let b = backend(&server, FailurePolicy::FailOpen).await;
    let ten = AnyLimit::from(FixedWindow::new(10, Duration::from_secs(3600)).unwrap());
    let three = AnyLimit::from(FixedWindow::new(3, Duration::from_secs(3600)).unwrap());
    let now = Timestamp::from_secs(1_000_000);
    let open = with(Some(OnFailure::FailOpen), item(b"o", b"o:1", &ten, 1));
    let closed = with(Some(OnFailure::FailClosed), item(b"c", b"c:1", &ten, 1));
    let local = with(Some(OnFailure::Local), item(b"l", b"l:1", &three, 1));
    let global = item(b"g", b"g:1", &ten, 1);
    let mut out = [blank(); 3];
    // Redis decides while it is up, whatever the policies say.
    let d = b
        .decide(&[open, closed], now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_allowed());
    assert_eq!(b.redis().stats().decisions.get(), 1);
    tokio::task::block_in_place(|| server.kill());

    // A fail-open and a fail-closed rule on one request: denied.
    let d = b
        .decide(&[open, closed], now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_denied(), "{d:?}");
    assert!(out[0].is_allowed() && out[1].is_denied());
    assert_eq!(out[1].retry_after, None);
    // The fail-open rule alone: admitted, with its full quota.
    let d = b
        .decide(&[open], now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_allowed() && d.remaining == 10, "{d:?}");
    // An item without a policy follows the backend's (fail open here).
    assert!(
        b.decide(&[global], now, Apply::Commit, &mut out)
            .await
            .unwrap()
            .is_allowed()
    );
    // A denied request charges nothing locally: the fail-closed item
    // denies it, the local limit keeps its 3 units.
    for _ in 0..5 {
        let d = b
            .decide(&[local, closed], now, Apply::Commit, &mut out)
            .await
            .unwrap();
        assert!(d.is_denied() && out[0].is_allowed());
    }
    // The local rule counts on the local store: 3 admitted, then denied.
    let mut admitted = 0;
    for _ in 0..5 {
        let d = b
            .decide(&[local, open], now, Apply::Commit, &mut out)
            .await
            .unwrap();
        admitted += u32::from(d.is_allowed());
    }
    assert_eq!(admitted, 3);
    assert!(out[0].is_denied() && out[0].retry_after.is_some());
    // Local items of one batch are decided together, atomically: a second
    // local limit that is spent keeps the first from being charged.
    let fresh = with(Some(OnFailure::Local), item(b"l2", b"l2:1", &three, 1));
    let d = b
        .decide(&[fresh, local], now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_denied() && out[0].is_allowed() && out[1].is_denied());
    let d = b
        .decide(&[fresh], now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert_eq!(d.remaining, 2, "the denied batch did not charge it");

    let s = b.stats();
    assert_eq!(b.breaker_state(), BreakerState::Open);
    assert_eq!(s.decisions.get(), 1 + 1 + 1 + 1 + 5 + 5 + 2);
    // Each policy counted once per decision that used it.
    assert_eq!(s.fail_closed.get(), 1 + 5);
    assert_eq!(s.fail_open.get(), 1 + 1 + 1 + 5);
    assert_eq!(s.local_fallbacks.get(), 5 + 5 + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backends_policy_covers_items_without_one() {
    let mut server = Server::start();
    let b = backend(&server, FailurePolicy::FailClosed).await;
    let ten = AnyLimit::from(FixedWindow::new(10, Duration::from_secs(3600)).unwrap());
    let now = Timestamp::from_secs(1_000_000);
    tokio::task::block_in_place(|| server.kill());
    let mut out = [blank(); 2];
    let plain = item(b"p", b"p:1", &ten, 1);
    let open = with(Some(OnFailure::FailOpen), item(b"o", b"o:1", &ten, 1));
    assert!(
        b.decide(&[plain], now, Apply::Commit, &mut out)
            .await
            .unwrap()
            .is_denied()
    );
    assert!(
        b.decide(&[open], now, Apply::Commit, &mut out)
            .await
            .unwrap()
            .is_allowed()
    );
    assert!(
        b.decide(&[open, plain], now, Apply::Commit, &mut out)
            .await
            .unwrap()
            .is_denied()
    );
    // A local rule works even though the backend's policy is not local.
    let local = with(Some(OnFailure::Local), item(b"l", b"l:1", &ten, 1));
    for i in 0..12 {
        let d = b
            .decide(&[local], now, Apply::Commit, &mut out)
            .await
            .unwrap();
        assert_eq!(d.is_allowed(), i < 10, "request {i}");
    }
}

const POLICY: &str = "domains:
  - domain: shop
    descriptors:
      - key: login
        rate_limit: {requests: 100, per: 1h, on_failure: fail_closed}
      - key: browse
        rate_limit: {requests: 100, per: 1h, on_failure: fail_open}
      - key: upload
        rate_limit: {requests: 3, per: 1h, on_failure: local}
";

fn d(key: &str, value: &str) -> OwnedDescriptor {
    OwnedDescriptor::new([(key, value)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_engine_from_yaml() {
    let mut server = Server::start();
    let spec = load_str("shop.yaml", POLICY, &LoadOptions::default()).unwrap();
    let policy = PolicySet::compile(&spec).unwrap();
    let engine = Engine::new(policy, backend(&server, FailurePolicy::FailOpen).await);
    let mut r = Response::default();
    let login_and_browse = [d("login", "alice"), d("browse", "home")];
    engine
        .evaluate("shop", &login_and_browse, 1, &mut r)
        .await
        .unwrap();
    assert_eq!(r.overall, Code::Ok);
    tokio::task::block_in_place(|| server.kill());

    engine
        .evaluate("shop", &login_and_browse, 1, &mut r)
        .await
        .unwrap();
    assert_eq!(r.overall, Code::OverLimit, "the fail-closed rule denies");
    assert_eq!(r.statuses[0].code, Code::OverLimit);
    engine
        .evaluate("shop", &[d("browse", "home")], 1, &mut r)
        .await
        .unwrap();
    assert_eq!(r.overall, Code::Ok, "the fail-open rule alone passes");
    let mut codes = Vec::new();
    for _ in 0..5 {
        engine
            .evaluate("shop", &[d("upload", "bob")], 1, &mut r)
            .await
            .unwrap();
        codes.push(r.overall);
    }
    assert_eq!(
        codes,
        [
            Code::Ok,
            Code::Ok,
            Code::Ok,
            Code::OverLimit,
            Code::OverLimit
        ],
        "the local rule counts on the local store"
    );
    let s = engine.backend().stats();
    assert!(s.fail_closed.get() >= 1 && s.fail_open.get() >= 2);
    assert_eq!(s.local_fallbacks.get(), 5);
}

/// With Redis unreachable and the breaker open, a replica stays ready when
/// its global failure policy still decides (local, fail open), and reports
/// not ready when it would deny everything (fail closed); each rule's own
/// policy does not change that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_whether_the_global_policy_decides() {
    let limit = AnyLimit::from(FixedWindow::new(10, Duration::from_secs(3600)).unwrap());
    let now = Timestamp::from_secs(1_000_000);
    for (policy, ready) in [
        (FailurePolicy::Local { divide_by: 1 }, true),
        (FailurePolicy::Local { divide_by: 4 }, true),
        (FailurePolicy::FailOpen, true),
        (FailurePolicy::FailClosed, false),
    ] {
        let config = RedisConfig {
            urls: vec![format!("redis://127.0.0.1:{}", common::free_port())],
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(50),
            failure_policy: policy,
            breaker: BreakerConfig {
                failure_threshold: 1,
                cool_down: Duration::from_secs(60),
            },
            ..RedisConfig::default()
        };
        let redis = RedisBackend::connect_lazy(&config).await.expect("lazy");
        let b = ResilientBackend::new(redis, &config).expect("resilient");
        assert!(b.is_ready(), "{policy:?} before any failure");
        let mut out = [blank()];
        for on_failure in [None, Some(OnFailure::FailClosed), Some(OnFailure::Local)] {
            let it = with(on_failure, item(b"r", b"r:1", &limit, 1));
            b.decide(&[it], now, Apply::Commit, &mut out).await.unwrap();
            assert_eq!(b.breaker_state(), BreakerState::Open, "{policy:?}");
            assert_eq!(b.is_ready(), ready, "{policy:?}");
        }
        assert!(b.stats().backend_errors.get() >= 1);
    }
}

/// `decide_by` says who answered: Redis while it decides, else the
/// policy the batch's answer stands for — failed closed when a fail-closed
/// item denies it, failed open when items failing open admit it, local when
/// the local store's decision is the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_by_says_which_policy_answered() {
    use floodgate_policy::Fallback;
    let mut server = Server::start();
    let b = backend(&server, FailurePolicy::FailOpen).await;
    let ten = AnyLimit::from(FixedWindow::new(10, Duration::from_secs(3600)).unwrap());
    let one = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(3600)).unwrap());
    let now = Timestamp::from_secs(1_000_000);
    let open = with(Some(OnFailure::FailOpen), item(b"o", b"o:1", &ten, 1));
    let closed = with(Some(OnFailure::FailClosed), item(b"c", b"c:1", &ten, 1));
    let local = with(Some(OnFailure::Local), item(b"l", b"l:1", &one, 1));
    let global = item(b"g", b"g:1", &ten, 1);
    let mut out = [blank(); 2];
    let mut by = async |items: &[Item<'_>]| {
        let d = b
            .decide_by(items, now, Apply::Commit, &mut out)
            .await
            .unwrap();
        (d.decision.is_allowed(), d.fallback)
    };
    assert_eq!(by(&[open, closed]).await, (true, None), "Redis decided");
    tokio::task::block_in_place(|| server.kill());

    assert_eq!(
        by(&[open, closed]).await,
        (false, Some(Fallback::FailedClosed))
    );
    assert_eq!(by(&[open]).await, (true, Some(Fallback::FailedOpen)));
    assert_eq!(by(&[global]).await, (true, Some(Fallback::FailedOpen)));
    assert_eq!(by(&[local]).await, (true, Some(Fallback::Local)));
    // The local limit (1) is spent: its denial is the answer.
    assert_eq!(by(&[local, open]).await, (false, Some(Fallback::Local)));
    assert_eq!(by(&[local]).await, (false, Some(Fallback::Local)));
}

/// The engine's response carries who answered, so that a frontend counts a
/// request decided by a failure policy as failed open or failed closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_response_says_which_policy_answered() {
    use floodgate_policy::Fallback;
    let mut server = Server::start();
    let spec = load_str("shop.yaml", POLICY, &LoadOptions::default()).unwrap();
    let policy = PolicySet::compile(&spec).unwrap();
    let engine = Engine::new(policy, backend(&server, FailurePolicy::FailOpen).await);
    let mut r = Response::default();
    let login_and_browse = [d("login", "alice"), d("browse", "home")];
    let mut answer = async |descriptors: &[OwnedDescriptor]| {
        engine
            .evaluate("shop", descriptors, 1, &mut r)
            .await
            .unwrap();
        (r.overall, r.fallback())
    };
    assert_eq!(answer(&login_and_browse).await, (Code::Ok, None));
    tokio::task::block_in_place(|| server.kill());

    assert_eq!(
        answer(&login_and_browse).await,
        (Code::OverLimit, Some(Fallback::FailedClosed))
    );
    assert_eq!(
        answer(&[d("browse", "home")]).await,
        (Code::Ok, Some(Fallback::FailedOpen))
    );
    assert_eq!(
        answer(&[d("upload", "bob")]).await,
        (Code::Ok, Some(Fallback::Local))
    );
    // A shadow-mode rule's batch changes no answer and is not reported.
    let shadow = "domains:\n  - domain: shop\n    descriptors:\n      - key: login\n        rate_limit: {requests: 100, per: 1h, on_failure: fail_closed}\n        shadow_mode: true\n";
    let spec = load_str("shop.yaml", shadow, &LoadOptions::default()).unwrap();
    engine.replace_policy(PolicySet::compile(&spec).unwrap());
    assert_eq!(answer(&[d("login", "alice")]).await, (Code::Ok, None));
}
