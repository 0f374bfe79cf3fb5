//! What lands in Redis: key expiry (never before the state is idle), the
//! script cache being flushed, huge and binary keys, keys holding something
//! else (another type, corrupted bytes), limits that cannot be decided
//! exactly, and the local over-limit cache.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Server, Twin, blank, item};
use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingLog,
    SlidingWindow, SubWindowCounter,
};
use floodgate::{Apply, Outcome, Timestamp};
use floodgate_policy::{Backend, BackendError};
use floodgate_redis::{Mode, RedisBackend, RedisConfig, TimeSource};
use redis::Commands;

fn every_kind() -> Vec<AnyLimit> {
    let s = Duration::from_secs;
    vec![
        Gcra::new(3, s(1), 4).unwrap().into(),
        FixedWindow::new(5, s(60)).unwrap().into(),
        SlidingWindow::new(5, s(60)).unwrap().into(),
        SubWindowCounter::new(5, s(60), 6).unwrap().into(),
        SlidingLog::new(5, s(60)).unwrap().into(),
        Shaper::new(NginxRate::PerMinute(7), 3, ShaperDelay::Queue)
            .unwrap()
            .into(),
        Concurrency::new(5).unwrap().into(),
    ]
}

async fn backend(server: &Server, f: impl FnOnce(&mut RedisConfig)) -> RedisBackend {
    let mut config = RedisConfig {
        urls: vec![server.url()],
        timeout: Duration::from_secs(2),
        ..RedisConfig::default()
    };
    f(&mut config);
    RedisBackend::connect(&config).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_when_idle_never_earlier() {
    let server = Server::start();
    let b = backend(&server, |_| {}).await;
    let mut conn = server.conn();
    for (n, limit) in every_kind().iter().enumerate() {
        let key = format!("exp:{n}");
        let items = [item(b"exp", key.as_bytes(), limit, 2)];
        let mut out = [blank()];
        let (d, at) = b
            .decide_timed(&items, Timestamp::ZERO, Apply::Commit, &mut out)
            .await
            .unwrap();
        assert!(d.is_allowed(), "{n}: {d:?}");
        let name = b.state_key(&items[0]);
        let expire: i64 = redis::cmd("PEXPIRETIME")
            .arg(&name)
            .query(&mut conn)
            .unwrap();
        if limit.is_concurrency() {
            // Permits live for the default lease after their acquisition.
            let lease = floodgate_redis::DEFAULT_CONCURRENCY_LEASE.as_millis() as i64;
            let want = (at.as_micros() / 1000) as i64 + lease;
            assert!((want..=want + 50).contains(&expire), "{expire} vs {want}");
            continue;
        }
        // The state is idle at now + reset_after; the key expires at that
        // instant rounded up to Redis's millisecond precision.
        let idle_us = at.as_micros() + d.reset_after.as_micros() as u64;
        assert_eq!(expire as u64, idle_us.div_ceil(1000), "{n}: {d:?}");
    }
    // And it really goes: a 150 ms window's key is gone after its end.
    let short = AnyLimit::from(FixedWindow::new(5, Duration::from_millis(150)).unwrap());
    let items = [item(b"exp", b"exp:short", &short, 1)];
    let mut out = [blank()];
    b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
        .await
        .unwrap();
    let name = b.state_key(&items[0]);
    assert!(conn.exists::<_, bool>(&name).unwrap());
    std::thread::sleep(out[0].reset_after + Duration::from_millis(20));
    assert!(!conn.exists::<_, bool>(&name).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_have_a_lease_unless_it_is_turned_off() {
    let server = Server::start();
    let mut conn = server.conn();
    let permits = AnyLimit::from(Concurrency::new(3).unwrap());
    let mut out = [blank()];
    // By default every permit is held a lease from its acquisition, and the
    // key expires when the last lease ends, so permits whose release never
    // comes are freed.
    let b = backend(&server, |_| {}).await;
    let items = [item(b"lease", b"lease:a", &permits, 1)];
    for _ in 0..2 {
        b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
            .await
            .unwrap();
    }
    b.release(items[0], 1, Timestamp::ZERO).await.unwrap();
    let ttl: i64 = conn.pttl(b.state_key(&items[0])).unwrap();
    // The lease's end in µs, rounded up to Redis's milliseconds.
    let lease = floodgate_redis::DEFAULT_CONCURRENCY_LEASE.as_millis() as i64;
    assert!(
        (lease - 1_000..=lease + 1).contains(&ttl),
        "lease ttl {ttl}"
    );
    // Turned off, permits are held until released.
    let b = backend(&server, |c| c.concurrency_lease = None).await;
    let items = [item(b"lease", b"lease:b", &permits, 1)];
    b.decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
        .await
        .unwrap();
    let ttl: i64 = conn.pttl(b.state_key(&items[0])).unwrap();
    assert_eq!(ttl, -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relative_expiry_with_client_time_and_leases() {
    let server = Server::start();
    let b = backend(&server, |c| {
        c.time_source = TimeSource::Client {
            expiry_slack: Duration::from_secs(10),
        };
        c.concurrency_lease = Some(Duration::from_secs(30));
    })
    .await;
    let mut conn = server.conn();
    // A client clock far from Redis's: expiry follows the decision, not
    // the absolute instant (which Redis would see as long past).
    let now = Timestamp::from_secs(1_000);
    let limit = AnyLimit::from(Gcra::new(1, Duration::from_secs(5), 2).unwrap());
    let items = [item(b"rel", b"rel:g", &limit, 2)];
    let mut out = [blank()];
    b.decide(&items, now, Apply::Commit, &mut out)
        .await
        .unwrap();
    let ttl: i64 = conn.pttl(b.state_key(&items[0])).unwrap();
    assert!((14_000..=20_000).contains(&ttl), "ttl {ttl}");
    let permits = AnyLimit::from(Concurrency::new(3).unwrap());
    let items = [item(b"rel", b"rel:c", &permits, 1)];
    b.decide(&items, now, Apply::Commit, &mut out)
        .await
        .unwrap();
    // The permit's lease ends 30 s after the decision; the key is kept the
    // slack longer, as every state is.
    let ttl: i64 = conn.pttl(b.state_key(&items[0])).unwrap();
    assert!((39_000..=40_000).contains(&ttl), "lease ttl {ttl}");
    b.release(items[0], 1, now).await.unwrap();
    assert!(!conn.exists::<_, bool>(b.state_key(&items[0])).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_time_is_the_decision_time() {
    let server = Server::start();
    let b = backend(&server, |_| {}).await;
    let limit = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
    let items = [item(b"t", b"t:a", &limit, 1)];
    let mut out = [blank()];
    // The caller's `now` is ignored: Redis's clock decides.
    let (_, at) = b
        .decide_timed(&items, Timestamp::from_secs(5), Apply::Commit, &mut out)
        .await
        .unwrap();
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert!(wall.abs_diff(Duration::from_nanos(at.as_nanos())) < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_script_cache_is_reloaded() {
    let server = Server::start();
    let t = Twin::new(vec![server.url()], Mode::Single, "nos:").await;
    let limit = AnyLimit::from(Gcra::new(10, Duration::from_secs(1), 5).unwrap());
    let items = [item(b"n", b"n:a", &limit, 2)];
    t.step(&items, 1_000_000, Apply::Commit, "first").await;
    let loads = t.redis.stats().script_loads.get();
    assert_eq!(server.cli(&["script", "flush"]).trim(), "OK");
    t.step(&items, 1_000_000, Apply::Commit, "after flush")
        .await;
    assert_eq!(t.redis.stats().script_loads.get(), loads + 1);
    t.step(&items, 1_000_000, Apply::Commit, "cached again")
        .await;
    assert_eq!(t.redis.stats().script_loads.get(), loads + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_binary_keys() {
    let server = Server::start();
    let t = Twin::new(vec![server.url()], Mode::Single, "bin:").await;
    let limit = AnyLimit::from(SlidingLog::new(3, Duration::from_secs(10)).unwrap());
    let mut huge = vec![b'x'; 1 << 20];
    huge[..5].copy_from_slice(b"huge:");
    let weird_group: &[u8] = b"\0{}\xff{";
    let weird_key: &[u8] = b"\0{}\xff{:}\0{{";
    for k in 0..5u64 {
        let items = [
            item(b"huge", &huge, &limit, 1),
            item(weird_group, weird_key, &limit, 1),
        ];
        t.step(&items, 1_000_000 + k, Apply::Commit, "keys").await;
    }
    let name = t.redis.state_key(&item(b"huge", &huge, &limit, 1));
    assert!(name.len() < 100, "huge keys are stored under their hash");
    let name = t.redis.state_key(&item(weird_group, weird_key, &limit, 1));
    assert!(name.ends_with(weird_key));
    let mut conn = server.conn();
    assert!(conn.exists::<_, bool>(&name).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_holding_something_else_are_reset() {
    let server = Server::start();
    let t = Twin::new(vec![server.url()], Mode::Single, "bad:").await;
    let mut conn = server.conn();
    let junk: [&[u8]; 9] = [
        b"garbage",
        b"f12:abc",
        b"g99999999999999999999999",
        b"g5:7:0",
        b"w1:2",
        b"l\xff\xff\xff\xff\xff\xff\xff\xff",
        b"s-1:5",
        b"c",
        b"",
    ];
    let mut resets = 0;
    for (n, limit) in every_kind().iter().enumerate() {
        for (j, bytes) in junk.iter().enumerate() {
            for kind in ["list", "hash", "string"] {
                let key = format!("bad:{n}:{j}:{kind}");
                let it = item(b"bad", key.as_bytes(), limit, 1);
                let name = t.redis.state_key(&it);
                match kind {
                    "list" => conn.lpush::<_, _, ()>(&name, *bytes).unwrap(),
                    "hash" => conn.hset::<_, _, _, ()>(&name, "f", *bytes).unwrap(),
                    _ => conn.set::<_, _, ()>(&name, *bytes).unwrap(),
                }
                // Decided as a fresh key, like the in-memory store does
                // (a store of its own: every key starts at the same time).
                t.forget_memory();
                let d = t.step(&[it], 5_000_000, Apply::Commit, &key).await;
                assert_eq!(d.outcome, Outcome::Allowed, "{key}");
                resets += 1;
                let kind: String = redis::cmd("TYPE").arg(&name).query(&mut conn).unwrap();
                assert_eq!(kind, "string", "{key} now holds its state");
                t.step(&[it], 5_000_001, Apply::Commit, &key).await;
            }
        }
    }
    // A few junk strings happen to parse as a state of their own kind only
    // when they are valid; every other one was reset.
    assert!(t.redis.stats().state_resets.get() >= resets - 3);
    // A release on a key of another type leaves it alone.
    let permits = AnyLimit::from(Concurrency::new(3).unwrap());
    let it = item(b"bad", b"bad:list-release", &permits, 1);
    conn.lpush::<_, _, ()>(t.redis.state_key(&it), "x").unwrap();
    t.redis.release(it, 1, Timestamp::ZERO).await.unwrap();
    let len: usize = conn.llen(t.redis.state_key(&it)).unwrap();
    assert_eq!(len, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_errors_not_panics() {
    let server = Server::start();
    let b = backend(&server, |_| {}).await;
    let odd = AnyLimit::from(Gcra::new(1, Duration::from_nanos(1_500), 1).unwrap());
    let mut out = [blank(), blank()];
    let e = b
        .decide(
            &[item(b"x", b"x:1", &odd, 1)],
            Timestamp::ZERO,
            Apply::Commit,
            &mut out,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, BackendError::Protocol(m) if m.contains("whole microseconds")),
        "{e}"
    );
    let e = b
        .decide(&[], Timestamp::ZERO, Apply::Commit, &mut out)
        .await;
    assert!(e.is_err());
    let ok = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap());
    let two = [item(b"x", b"x:1", &ok, 1), item(b"x", b"x:2", &ok, 1)];
    assert!(
        b.decide(&two, Timestamp::ZERO, Apply::Commit, &mut out[..1])
            .await
            .is_err()
    );
    let d = b
        .decide(
            &[item(b"x", b"x:3", &ok, u64::MAX)],
            Timestamp::ZERO,
            Apply::Commit,
            &mut out,
        )
        .await
        .unwrap();
    assert_eq!(d.outcome, Outcome::Never);
    assert_eq!(b.stats().errors.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_cache_answers_denials_until_retry() {
    let server = Server::start();
    let b = backend(&server, |c| {
        c.local_cache_capacity = 100;
        c.time_source = TimeSource::Client {
            expiry_slack: Duration::from_secs(60),
        };
    })
    .await;
    let limit = AnyLimit::from(FixedWindow::new(2, Duration::from_secs(1)).unwrap());
    let other = AnyLimit::from(Gcra::new(100, Duration::from_secs(1), 100).unwrap());
    let mut out = [blank(), blank()];
    let at = |us: u64| Timestamp::from_micros(10_000_000 + us);
    let one = |cost| [item(b"oc", b"oc:a", &limit, cost)];
    for _ in 0..2 {
        assert!(
            b.decide(&one(1), at(0), Apply::Commit, &mut out)
                .await
                .unwrap()
                .is_allowed()
        );
    }
    let denied = b
        .decide(&one(1), at(0), Apply::Commit, &mut out)
        .await
        .unwrap();
    assert_eq!(denied.retry_after, Some(Duration::from_secs(1)));
    let calls = b.stats().calls.get();
    // Answered locally, with the remaining wait.
    let d = b
        .decide(&one(2), at(400_000), Apply::Commit, &mut out)
        .await
        .unwrap();
    assert_eq!(d.retry_after, Some(Duration::from_micros(600_000)));
    assert_eq!(b.stats().calls.get(), calls);
    assert_eq!(b.stats().cache_hits.get(), 1);
    // A batch with the denied key is denied as a whole, locally.
    let batch = [
        item(b"oc", b"oc:b", &other, 1),
        item(b"oc", b"oc:a", &limit, 1),
    ];
    let d = b
        .decide(&batch, at(999_999), Apply::Commit, &mut out)
        .await
        .unwrap();
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(d.retry_after, Some(Duration::from_micros(1)));
    assert_eq!(b.stats().calls.get(), calls);
    // A peek (cost 0) and the retry instant itself go to Redis.
    assert!(
        b.decide(&one(0), at(500_000), Apply::Commit, &mut out)
            .await
            .unwrap()
            .is_allowed()
    );
    assert!(
        b.decide(&one(1), at(1_000_000), Apply::Commit, &mut out)
            .await
            .unwrap()
            .is_allowed()
    );
    assert_eq!(b.stats().calls.get(), calls + 2);
    // Penalty-mode limits whose counted denials outlive the retry instant
    // always reach Redis (their denials count there).
    let pen = AnyLimit::from(Gcra::new(1, Duration::from_secs(1), 1).unwrap()).with_penalty(true);
    let p = [item(b"oc", b"oc:p", &pen, 1)];
    for _ in 0..3 {
        b.decide(&p, at(0), Apply::Commit, &mut out).await.unwrap();
    }
    assert_eq!(b.stats().calls.get(), calls + 5);
    assert_eq!(b.stats().cache_hits.get(), 2);
}

/// Envoy-dialect rules (fixed windows counting their own denials) are
/// answered from the over-limit cache once denied, and every decision,
/// cached or not, is the in-memory engine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_cache_serves_envoy_rules_exactly() {
    use floodgate::algorithms::Penalty;
    use floodgate_policy::SyncBackend;
    let server = Server::start();
    let b = backend(&server, |c| {
        c.local_cache_capacity = 1000;
        c.time_source = TimeSource::Client {
            expiry_slack: Duration::from_secs(60),
        };
    })
    .await;
    let memory = floodgate_policy::MemoryBackend::new(floodgate::StoreConfig::default()).unwrap();
    let envoy = |n, secs| {
        AnyLimit::from(FixedWindow::new(n, Duration::from_secs(secs)).unwrap())
            .with_penalty_mode(Penalty::OwnDenials)
    };
    let (per_min, per_sec, per_hour) = (envoy(3, 60), envoy(2, 1), envoy(5, 3600));
    let plain = AnyLimit::from(Gcra::new(100, Duration::from_secs(1), 100).unwrap());
    let t0 = 1_700_000_000_000_000u64;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut now = t0;
    for step in 0..400 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        now += [0, 1, 1_000, 90_000, 400_000, 2_000_000][(rng % 6) as usize];
        let user = format!("user-{}", (rng >> 8) % 3);
        let (k1, k2, k3) = (
            format!("envoy:{user}:min"),
            format!("envoy:{user}:sec"),
            format!("envoy:{user}:hour"),
        );
        let cost = 1 + (rng >> 16) % 2;
        // One descriptor; two of one rule; one with an unpenalised limit.
        let items: Vec<_> = match (rng >> 24) % 3 {
            0 => vec![item(b"envoy", k1.as_bytes(), &per_min, cost)],
            1 => vec![
                item(b"envoy", k2.as_bytes(), &per_sec, cost),
                item(b"envoy", k3.as_bytes(), &per_hour, cost),
            ],
            _ => vec![
                item(b"envoy", k1.as_bytes(), &per_min, cost),
                item(b"other", b"other", &plain, 1),
            ],
        };
        let apply = if (rng >> 32).is_multiple_of(10) {
            Apply::Check
        } else {
            Apply::Commit
        };
        let at = Timestamp::from_micros(now);
        let mut m = vec![blank(); items.len()];
        let mut r = vec![blank(); items.len()];
        let dm = memory.decide_now(&items, at, apply, &mut m);
        let dr = b.decide(&items, at, apply, &mut r).await.unwrap();
        assert_eq!(common::as_redis(dm), dr, "step {step} at {now}");
        for (i, it) in items.iter().enumerate() {
            // A batch answered from the cache reports its unpenalised,
            // unevaluated items as admitted; every other item is exact.
            if !std::ptr::eq(it.limit, &plain) || dr.is_allowed() {
                assert_eq!(common::as_redis(m[i]), r[i], "step {step} item {i}");
            }
        }
    }
    let hits = b.stats().cache_hits.get();
    eprintln!("{hits} cache hits, {} script calls", b.stats().calls.get());
    assert!(hits > 20, "{hits} cache hits");
    assert_eq!(b.stats().errors.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_is_the_algorithms_idle_instant() {
    use floodgate::Algorithm;
    let server = Server::start();
    let slack = Duration::from_secs(600);
    let b = backend(&server, |c| {
        c.time_source = TimeSource::Client {
            expiry_slack: slack,
        };
    })
    .await;
    let mut conn = server.conn();
    let mut limits = every_kind();
    limits.pop(); // permits do not expire
    limits.push(
        AnyLimit::from(Gcra::new(7, Duration::from_millis(30), 3).unwrap()).with_penalty(true),
    );
    for (n, limit) in limits.iter().enumerate() {
        let key = format!("idle:{n}");
        let mut state = limit.fresh();
        let mut now = 1_000_000_000u64;
        for step in 0..12u64 {
            now += [0, 1, 999, 12_345, 400_000, 3_000_000][step as usize % 6];
            let cost = 1 + step % 3;
            let t = Timestamp::from_micros(now);
            let items = [item(b"idle", key.as_bytes(), limit, cost)];
            let mut out = [blank()];
            let before = state.clone();
            let expected = limit.decide(&mut state, t, cost, Apply::Commit);
            let got = b.decide(&items, t, Apply::Commit, &mut out).await.unwrap();
            assert_eq!(got.outcome, expected.outcome, "{n}/{step}");
            if state == before {
                continue; // nothing written: the expiry set before stands
            }
            let idle = limit.idle_at(&state, t);
            let ttl: i64 = conn.pttl(b.state_key(&items[0])).unwrap();
            // Written now: Redis keeps the key ceil_ms(idle − now) + slack;
            // a few ms may have passed since.
            let want = (idle.as_nanos() - t.as_nanos()).div_ceil(1_000_000) as i64
                + slack.as_millis() as i64;
            assert!(
                ttl <= want && ttl >= want - 50,
                "{n}/{step}: ttl {ttl}, want {want}"
            );
        }
    }
}

/// A sliding log whose records are garbage — a NaN or infinite number,
/// negative ones, times or counts going backwards, a last count below the
/// units dropped, counts that are not integers below 2^53 — is reset like
/// any other garbage (decided as a fresh key, counted in `state_resets`),
/// never a script error: those count towards the breaker, so one such key
/// used to open it for every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_logs_with_bad_records_are_reset() {
    let server = Server::start();
    let t = Twin::new(vec![server.url()], Mode::Single, "badlog:").await;
    let mut conn = server.conn();
    let limit = AnyLimit::from(SlidingLog::new(5, Duration::from_secs(60)).unwrap());
    let now = 500_000_000u64;
    let log = |low: f64, records: &[(f64, f64)]| {
        let mut v = vec![b'l'];
        v.extend(low.to_be_bytes());
        for (time, cum) in records {
            v.extend(time.to_be_bytes());
            v.extend(cum.to_be_bytes());
        }
        v
    };
    let at = now as f64 - 1.0;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("NaN count", log(0.0, &[(1e18, f64::NAN)])),
        ("NaN count, recent", log(0.0, &[(at, f64::NAN)])),
        ("NaN time", log(0.0, &[(f64::NAN, 3.0)])),
        ("infinite time", log(0.0, &[(f64::INFINITY, 3.0)])),
        ("negative time", log(0.0, &[(-1.0, 3.0)])),
        ("negative count", log(0.0, &[(at, -1.0)])),
        ("infinite count", log(0.0, &[(at, f64::INFINITY)])),
        ("huge count", log(0.0, &[(at, 9_007_199_254_740_992.0)])),
        ("fractional count", log(0.0, &[(at, 2.5)])),
        ("fractional low", log(0.5, &[(at, 3.0)])),
        ("times going back", log(0.0, &[(at, 1.0), (at - 5.0, 2.0)])),
        ("counts going back", log(0.0, &[(at - 5.0, 3.0), (at, 2.0)])),
        (
            "NaN in the middle",
            log(0.0, &[(at - 9.0, 1.0), (f64::NAN, 2.0), (at, 3.0)]),
        ),
        (
            "NaN among four",
            log(
                0.0,
                &[(at - 9.0, 1.0), (at - 8.0, 2.0), (at, f64::NAN), (at, 4.0)],
            ),
        ),
        (
            "the fifth going back",
            log(
                0.0,
                &[
                    (at - 9.0, 1.0),
                    (at - 8.0, 2.0),
                    (at - 7.0, 3.0),
                    (at, 4.0),
                    (at - 1.0, 5.0),
                ],
            ),
        ),
        ("last count below low", log(4.0, &[(at, 3.0)])),
    ];
    for (case, bytes) in &cases {
        let key = format!("badlog:{case}");
        let it = item(b"badlog", key.as_bytes(), &limit, 1);
        conn.set::<_, _, ()>(t.redis.state_key(&it), bytes).unwrap();
        let resets = t.redis.stats().state_resets.get();
        t.forget_memory();
        let d = t.step(&[it], now, Apply::Commit, case).await;
        assert_eq!(d.outcome, Outcome::Allowed, "{case}");
        assert_eq!(t.redis.stats().state_resets.get(), resets + 1, "{case}");
        // Its state now, kept as it is.
        for k in 1..=5 {
            t.step(&[it], now + k, Apply::Commit, case).await;
        }
        assert_eq!(t.redis.stats().state_resets.get(), resets + 1, "{case}");
    }
    // A valid log of a few records is read as it is: units 3 to 7 left the
    // window, 8 to 12 are in it.
    let it = item(b"badlog", b"badlog:valid", &limit, 1);
    let gone = now as f64 - 70_000_000.0;
    let valid = log(
        2.0,
        &[
            (gone - 10_000_000.0, 3.0),
            (gone, 7.0),
            (at - 30.0, 8.0),
            (at - 20.0, 9.0),
            (at - 20.0, 10.0),
            (at, 12.0),
        ],
    );
    conn.set::<_, _, ()>(t.redis.state_key(&it), valid).unwrap();
    let resets = t.redis.stats().state_resets.get();
    let mut out = [blank()];
    let d = t
        .redis
        .decide(&[it], Timestamp::from_micros(now), Apply::Check, &mut out)
        .await
        .unwrap();
    // The 8th leaves first.
    assert_eq!((d.outcome, d.remaining), (Outcome::Denied, 0), "{d:?}");
    assert_eq!(
        d.retry_after,
        Some(Duration::from_secs(60) - Duration::from_micros(31))
    );
    assert_eq!(t.redis.stats().state_resets.get(), resets);
    assert_eq!(t.redis.stats().errors.get(), 0);
}

/// A cost above the quota never fits: Redis and the in-memory engine answer
/// `Never`, and so does a backend with the over-limit cache (which used to
/// answer `Denied` with a retry, from the denial of a smaller cost). On a
/// blocked key the cache leaves such a cost to Redis as well, so that every
/// answer is Redis's (and the in-memory engine's), whatever they give it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_cache_leaves_costs_that_never_fit_to_redis() {
    use floodgate_policy::SyncBackend;
    let server = Server::start();
    let time = TimeSource::Client {
        expiry_slack: Duration::from_secs(60),
    };
    let cached = backend(&server, |c| {
        c.local_cache_capacity = 100;
        c.time_source = time;
        c.key_prefix = "cached:".into();
    })
    .await;
    let plain = backend(&server, |c| {
        c.time_source = time;
        c.key_prefix = "plain:".into();
    })
    .await;
    let memory = floodgate_policy::MemoryBackend::new(floodgate::StoreConfig::default()).unwrap();
    let hourly = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    let blocking = hourly.clone().with_block(Duration::from_secs(600));
    let gcra = AnyLimit::from(Gcra::new(5, Duration::from_secs(3600), 5).unwrap());
    let now = Timestamp::from_secs(1_000_000);
    let cases = [
        // (key, limit, cost, outcome (None: Redis's to say), from the cache)
        ("never:f", &hourly, 5, Some(Outcome::Allowed), false),
        ("never:f", &hourly, 5, Some(Outcome::Denied), false),
        ("never:f", &hourly, 6, Some(Outcome::Never), false),
        ("never:f", &hourly, 5, Some(Outcome::Denied), true),
        ("never:f", &hourly, u64::MAX, Some(Outcome::Never), false),
        ("never:g", &gcra, 5, Some(Outcome::Allowed), false),
        ("never:g", &gcra, 1, Some(Outcome::Denied), false),
        ("never:g", &gcra, 1, Some(Outcome::Denied), true),
        ("never:g", &gcra, 6, Some(Outcome::Never), false),
        ("never:b", &blocking, 5, Some(Outcome::Allowed), false),
        ("never:b", &blocking, 5, Some(Outcome::Denied), false),
        ("never:b", &blocking, 5, Some(Outcome::Denied), true),
        ("never:b", &blocking, 6, None, false),
        ("never:b", &blocking, u64::MAX, None, false),
        ("never:b", &blocking, 1, Some(Outcome::Denied), false),
        ("never:b", &blocking, 3, Some(Outcome::Denied), true),
    ];
    for (step, &(key, limit, cost, outcome, hit)) in cases.iter().enumerate() {
        let items = [item(b"never", key.as_bytes(), limit, cost)];
        let mut out = [blank()];
        let hits = cached.stats().cache_hits.get();
        let dc = cached
            .decide(&items, now, Apply::Commit, &mut out)
            .await
            .unwrap();
        let dp = plain
            .decide(&items, now, Apply::Commit, &mut out)
            .await
            .unwrap();
        let dm = memory.decide_now(&items, now, Apply::Commit, &mut out);
        if let Some(outcome) = outcome {
            assert_eq!(dc.outcome, outcome, "step {step}: {dc:?}");
        }
        assert_eq!(
            cached.stats().cache_hits.get(),
            hits + u64::from(hit),
            "step {step}"
        );
        assert_eq!(dc, dp, "step {step}");
        assert_eq!(common::as_redis(dm), dc, "step {step}");
    }
}

/// With the server's clock, a decision the over-limit cache answers is
/// dated by Redis's clock (an estimate), not by the caller's `now`, and
/// names the same retry instant as the denial it repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_hits_are_dated_by_the_server_clock() {
    let server = Server::start();
    let b = backend(&server, |c| c.local_cache_capacity = 100).await;
    let limit = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(3600)).unwrap());
    let items = [item(b"tc", b"tc:a", &limit, 1)];
    let mut out = [blank()];
    // Ignored with the server's clock.
    let caller = Timestamp::from_secs(5);
    let (d, _) = b
        .decide_timed(&items, caller, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_allowed());
    let (denied, at) = b
        .decide_timed(&items, caller, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(denied.is_denied());
    assert_eq!(b.stats().cache_hits.get(), 0);
    let (hit, hit_at) = b
        .decide_timed(&items, caller, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert_eq!(b.stats().cache_hits.get(), 1);
    assert!(hit.is_denied());
    assert_ne!(hit_at, caller);
    assert!(hit_at > at, "{hit_at:?} {at:?}");
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert!(wall.abs_diff(Duration::from_nanos(hit_at.as_nanos())) < Duration::from_secs(2));
    assert_eq!(
        hit_at.saturating_add(hit.retry_after.unwrap()),
        at.saturating_add(denied.retry_after.unwrap())
    );
}

/// A refund (negative hits) goes to Redis past the over-limit cache, and
/// makes the cache forget the key's denial: the units given back are
/// admitted at once, not after the retry instant the cache remembers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_reaches_redis_and_clears_the_over_limit_cache() {
    let server = Server::start();
    let b = backend(&server, |c| c.local_cache_capacity = 100).await;
    let limit = AnyLimit::from(FixedWindow::new(2, Duration::from_secs(3600)).unwrap());
    let one = |cost| [item(b"rc", b"rc:a", &limit, cost)];
    let mut out = [blank()];
    let now = Timestamp::ZERO;
    for _ in 0..2 {
        let d = b.decide(&one(1), now, Apply::Commit, &mut out).await;
        assert!(d.unwrap().is_allowed());
    }
    for _ in 0..2 {
        let d = b.decide(&one(1), now, Apply::Commit, &mut out).await;
        assert!(d.unwrap().is_denied());
    }
    assert_eq!(b.stats().cache_hits.get(), 1);
    let calls = b.stats().calls.get();
    let d = b
        .decide(&one(1), now, Apply::Refund, &mut out)
        .await
        .unwrap();
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 1));
    assert_eq!(b.stats().calls.get(), calls + 1, "decided by Redis");
    let d = b
        .decide(&one(1), now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!(b.stats().cache_hits.get(), 1);
    // The key holds what Redis counted: nothing left.
    let d = b
        .decide(&one(1), now, Apply::Commit, &mut out)
        .await
        .unwrap();
    assert!(d.is_denied());
}
