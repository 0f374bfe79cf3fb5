//! A Redis whose memory is full (`maxmemory` small, `noeviction`) refuses
//! writes with `OOM` but still answers: a client that fills it with
//! distinct keys erases no restriction under any failure policy, the
//! breaker stays closed, and new keys are answered by the failure policy.
//! The server's memory policy is read at start (`CONFIG GET`).

use crate::common;

use std::time::Duration;

use common::{Server, blank, item};
use floodgate::algorithms::{AnyLimit, FixedWindow};
use floodgate::{Apply, Decision, Timestamp};
use floodgate_policy::Backend;
use floodgate_redis::{
    BreakerConfig, BreakerState, FailurePolicy, MemoryPolicy, RedisBackend, RedisConfig,
    ResilientBackend,
};

async fn backend(server: &Server, policy: FailurePolicy) -> ResilientBackend {
    let config = RedisConfig {
        urls: vec![server.url()],
        timeout: Duration::from_secs(2),
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

async fn decide(b: &ResilientBackend, key: &[u8], limit: &AnyLimit, cost: u64) -> Decision {
    let mut out = [blank()];
    let now = Timestamp::from_secs(1_700_000_000);
    b.decide(
        &[item(b"g", key, limit, cost)],
        now,
        Apply::Commit,
        &mut out,
    )
    .await
    .expect("decided")
}

/// Floods distinct keys, a hundred a batch, until Redis refuses to write;
/// returns how many were sent.
async fn fill(b: &ResilientBackend, limit: &AnyLimit) -> usize {
    let keys: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("{i:0>200}").into_bytes())
        .collect();
    let now = Timestamp::from_secs(1_700_000_000);
    for round in 0..2_000usize {
        let prefix = format!("flood-{round}-");
        let named: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| [prefix.as_bytes(), k].concat())
            .collect();
        let items: Vec<_> = named.iter().map(|k| item(b"g", k, limit, 1)).collect();
        let mut out = vec![blank(); items.len()];
        b.decide(&items, now, Apply::Commit, &mut out)
            .await
            .expect("decided");
        if b.stats().memory_full.get() > 0 {
            return round * 100 + top_up(b, limit).await;
        }
    }
    panic!("Redis never refused a write: {:?}", b.redis().stats());
}

/// Single keys until Redis refuses three in a row (a refused batch's own
/// buffers may have been what tipped it over); returns how many were sent.
async fn top_up(b: &ResilientBackend, limit: &AnyLimit) -> usize {
    let mut refused = 0;
    for n in 0..20_000 {
        let before = b.stats().memory_full.get();
        decide(b, format!("top-up-{n}").as_bytes(), limit, 1).await;
        refused = if b.stats().memory_full.get() > before {
            refused + 1
        } else {
            0
        };
        if refused == 3 {
            return n;
        }
    }
    panic!("Redis kept taking writes: {:?}", b.redis().stats());
}

#[tokio::test]
async fn a_full_redis_erases_no_restriction() {
    let hourly = AnyLimit::from(FixedWindow::new(3, Duration::from_secs(3_600)).unwrap());
    for policy in [
        FailurePolicy::FailOpen,
        FailurePolicy::FailClosed,
        FailurePolicy::Local { divide_by: 1 },
    ] {
        let server =
            Server::start_with(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]);
        let b = backend(&server, policy).await;
        assert!(decide(&b, b"victim", &hourly, 3).await.is_allowed());
        assert!(decide(&b, b"victim", &hourly, 1).await.is_denied());
        let sent = fill(&b, &hourly).await;
        eprintln!("{policy:?}: full after {sent} keys");
        // New keys: Redis cannot charge them, the failure policy answers
        // (more of them than the breaker's threshold of failures). Redis,
        // full to within a few keys, finds room for some as its clients'
        // buffers shrink: those it charges are ordinary decisions.
        let refused = refused_newcomers(&b, &hourly, 5).await;
        for (key, d) in &refused {
            match policy {
                FailurePolicy::FailClosed => assert!(d.is_denied(), "{key}: {d:?}"),
                _ => assert!(d.is_allowed(), "{policy:?}: {key}: {d:?}"),
            }
        }
        let first_refused = refused[0].0.clone();
        if let FailurePolicy::Local { .. } = policy {
            local_and_redis_each_hold_the_limit(&b, &first_refused, &hourly).await;
        }
        // Not an outage: the breaker stays closed, and the restriction
        // Redis holds still denies.
        assert_eq!(b.breaker_state(), BreakerState::Closed, "{policy:?}");
        for _ in 0..10 {
            let d = decide(&b, b"victim", &hourly, 1).await;
            assert!(d.is_denied(), "{policy:?}: the victim was admitted: {d:?}");
        }
        // Refused as full, never as an outage.
        let stats = b.stats();
        assert!(
            stats.memory_full.get() > 0 && stats.backend_errors.get() == 0,
            "{stats:?}"
        );
    }
}

/// A key the local store charged once in Redis's place, asked six times
/// more: each answer comes from the local store while Redis refuses the
/// write (its count of local fallbacks tells), and from Redis once it finds
/// room for the key (as its clients'
/// buffers shrink), counting from there. Each holds the limit of 3 on
/// what it charged: the local store admits 2 more, then denies; Redis at
/// most 3.
async fn local_and_redis_each_hold_the_limit(b: &ResilientBackend, key: &str, limit: &AnyLimit) {
    let (mut local, mut redis) = (vec![], vec![]);
    for _ in 0..6 {
        let fallbacks = b.stats().local_fallbacks.get();
        let admitted = decide(b, key.as_bytes(), limit, 1).await.is_allowed();
        match b.stats().local_fallbacks.get() > fallbacks {
            true => local.push(admitted),
            false => redis.push(admitted),
        }
    }
    // Full to within a key, Redis refuses most: the local limit is seen
    // to deny.
    assert!(local.len() >= 3, "local: {local:?}, Redis: {redis:?}");
    let expected: Vec<bool> = (0..local.len()).map(|n| n < 2).collect();
    assert_eq!(local, expected, "answered locally (Redis: {redis:?})");
    let by_redis = redis.iter().filter(|a| **a).count();
    assert!(by_redis <= 3, "Redis admitted {by_redis}: {redis:?}");
}

/// New keys, one at a time, until `n` of them are answered by the
/// failure policy in Redis's place: those keys and their decisions.
async fn refused_newcomers(
    b: &ResilientBackend,
    limit: &AnyLimit,
    n: usize,
) -> Vec<(String, Decision)> {
    let mut refused = Vec::new();
    for i in 0..20_000 {
        let key = format!("newcomer-{i}");
        let before = answered_by_policy(b);
        let d = decide(b, key.as_bytes(), limit, 1).await;
        if answered_by_policy(b) > before {
            refused.push((key, d));
            if refused.len() == n {
                return refused;
            }
        }
    }
    panic!("Redis kept taking new keys: {:?}", b.stats());
}

/// Decisions the failure policy answered in Redis's place.
fn answered_by_policy(b: &ResilientBackend) -> u64 {
    let s = b.stats();
    s.fail_open.get() + s.fail_closed.get() + s.local_fallbacks.get()
}

#[tokio::test]
async fn the_memory_policy_is_read_at_start() {
    let evicts = |name: &str| MemoryPolicy::Evicts(name.into());
    let cases: [(&[&str], Option<MemoryPolicy>); 5] = [
        (&[], Some(MemoryPolicy::Keeps)),
        (
            &["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"],
            Some(evicts("allkeys-lru")),
        ),
        (
            &["--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"],
            Some(evicts("volatile-ttl")),
        ),
        // An evicting policy without a memory limit evicts nothing.
        (
            &["--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"],
            Some(MemoryPolicy::Unbounded("allkeys-lru".into())),
        ),
        // A managed Redis that hides CONFIG: unknown.
        (&["--rename-command", "CONFIG", ""], None),
    ];
    for (args, expected) in cases {
        let server = Server::start_with(args);
        let config = RedisConfig {
            urls: vec![server.url()],
            ..RedisConfig::default()
        };
        let redis = RedisBackend::connect(&config).await.expect("connect");
        let policy = redis.memory_policy().await;
        match expected {
            Some(p) => assert_eq!(policy, p, "{args:?}"),
            None => assert!(matches!(policy, MemoryPolicy::Unknown(_)), "{policy:?}"),
        }
    }
}
