//! Hand-written cases for every algorithm: the Redis scripts against the
//! in-memory algorithms (client-supplied, microsecond-aligned time), plus
//! the exact values the algorithms' documentation promises.

use crate::common;

use std::time::Duration;

use common::{Server, Twin, item};
use floodgate::Apply::{Check, Commit};
use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Gcra, NginxRate, Penalty, Shaper, ShaperDelay, SlidingLog,
    SlidingWindow, SubWindowCounter,
};
use floodgate::{Decision, Outcome};
use floodgate_redis::Mode;

async fn twin(server: &Server) -> Twin {
    Twin::new(vec![server.url()], Mode::Single, "t:").await
}

const T0: u64 = 1_700_000_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_fractional_interval() {
    let server = Server::start();
    let t = twin(&server).await;
    // 3 per second: T = 333 333⅓ µs, never rounded.
    let limit = AnyLimit::from(Gcra::new(3, Duration::from_secs(1), 2).unwrap());
    let one = [item(b"g", b"g:a", &limit, 1)];
    assert!(t.step(&one, T0, Commit, "1st").await.is_allowed());
    assert!(t.step(&one, T0, Commit, "2nd").await.is_allowed());
    let d = t.step(&one, T0, Commit, "3rd").await;
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(d.retry_after, Some(Duration::from_micros(333_334)));
    assert!(
        t.step(&one, T0 + 333_333, Commit, "early")
            .await
            .is_denied()
    );
    assert!(
        t.step(&one, T0 + 333_334, Commit, "on time")
            .await
            .is_allowed()
    );
    // Three intervals later exactly one whole refill has accumulated.
    for dt in [
        666_667, 1_000_000, 1_000_001, 1_333_334, 1_999_999, 2_000_000,
    ] {
        t.step(&one, T0 + dt, Commit, "refill").await;
    }
    let peek = [item(b"g", b"g:a", &limit, 0)];
    t.step(&peek, T0 + 2_100_000, Commit, "peek").await;
    let never = [item(b"g", b"g:a", &limit, 3)];
    let d = t.step(&never, T0 + 2_100_000, Commit, "never").await;
    assert_eq!(d.outcome, Outcome::Never);
    // Weighted and dry-run requests.
    let two = [item(b"g", b"g:a", &limit, 2)];
    t.step(&two, T0 + 9_000_000, Check, "check").await;
    t.step(&two, T0 + 9_000_000, Commit, "two").await;
    t.step(&two, T0 + 9_500_000, Commit, "two again").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_penalty_and_odd_rates() {
    let server = Server::start();
    let t = twin(&server).await;
    let pen = AnyLimit::from(Gcra::new(7, Duration::from_millis(3), 3).unwrap()).with_penalty(true);
    let big = AnyLimit::from(Gcra::new(999_983, Duration::from_secs(3600), 999_983).unwrap());
    for (k, dt) in [
        0u64, 0, 0, 0, 1, 429, 430, 2_000, 2_001, 10_000, 10_000, 10_000,
    ]
    .iter()
    .enumerate()
    {
        let items = [item(b"p", b"p:x", &pen, 1)];
        t.step(&items, T0 + dt, Commit, &format!("penalty {k}"))
            .await;
        let items = [item(b"b", b"b:x", &big, 1 + k as u64 * 77_777)];
        t.step(&items, T0 + dt, Commit, &format!("big {k}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window() {
    let server = Server::start();
    let t = twin(&server).await;
    let limit = AnyLimit::from(FixedWindow::new(2, Duration::from_secs(60)).unwrap());
    let one = [item(b"f", b"f:a", &limit, 1)];
    let t5 = 125_000_000; // 5 s into the window [120 s, 180 s)
    let two = [item(b"f", b"f:a", &limit, 2)];
    assert!(t.step(&two, t5, Commit, "fill").await.is_allowed());
    let d = t.step(&one, t5, Commit, "over").await;
    assert_eq!(d.retry_after, Some(Duration::from_secs(55)));
    t.step(&one, 179_999_999, Commit, "last µs").await;
    assert!(t.step(&one, 180_000_000, Commit, "next").await.is_allowed());
    t.step(
        &[item(b"f", b"f:a", &limit, 0)],
        180_000_001,
        Commit,
        "peek",
    )
    .await;
    t.step(
        &[item(b"f", b"f:a", &limit, 3)],
        180_000_001,
        Commit,
        "never",
    )
    .await;
    // Penalty mode counts the denied requests too.
    let pen = AnyLimit::from(FixedWindow::new(3, Duration::from_micros(1_000_003)).unwrap())
        .with_penalty(true);
    for k in 0..8u64 {
        let items = [item(b"f", b"f:p", &pen, 1 + k % 2)];
        t.step(&items, T0 + k * 300_001, Commit, &format!("penalty {k}"))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_windows() {
    let server = Server::start();
    let t = twin(&server).await;
    // Cloudflare's example: 50 per minute, 42 then 18 15 s into the next.
    let limit = AnyLimit::from(SlidingWindow::new(50, Duration::from_secs(60)).unwrap());
    let at = |k| [item(b"w", b"w:a", &limit, k)];
    t.step(&at(42), 0, Commit, "42").await;
    let d = t.step(&at(18), 75_000_000, Commit, "18").await;
    assert_eq!(d.remaining, 0);
    let d = t.step(&at(1), 75_000_000, Commit, "one more").await;
    assert_eq!(d.retry_after, Some(Duration::from_micros(714_286)));
    for dt in [
        714_285,
        714_286,
        20_000_000,
        45_000_000,
        60_000_000,
        119_999_999,
    ] {
        t.step(&at(7), 75_000_000 + dt, Commit, "later").await;
    }
    let subs = AnyLimit::from(SubWindowCounter::new(20, Duration::from_secs(4), 4).unwrap())
        .with_penalty(true);
    for k in 0..30u64 {
        let items = [item(b"n", b"n:a", &subs, k % 5)];
        t.step(&items, T0 + k * 377_777, Commit, &format!("subs {k}"))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log() {
    let server = Server::start();
    let t = twin(&server).await;
    // The login limit: 5 attempts per 15 minutes.
    let limit = AnyLimit::from(SlidingLog::new(5, Duration::from_secs(900)).unwrap());
    let one = [item(b"l", b"l:a", &limit, 1)];
    for i in 0..5 {
        assert!(
            t.step(&one, i * 60_000_000, Commit, "attempt")
                .await
                .is_allowed()
        );
    }
    let d = t.step(&one, 300_000_000, Commit, "sixth").await;
    assert_eq!(d.retry_after, Some(Duration::from_secs(600)));
    t.step(&one, 899_999_999, Commit, "early").await;
    t.step(&one, 900_000_000, Commit, "first left").await;
    let pen =
        AnyLimit::from(SlidingLog::new(4, Duration::from_millis(10)).unwrap()).with_penalty(true);
    for k in 0..40u64 {
        let items = [item(b"l", b"l:p", &pen, k % 3)];
        t.step(&items, T0 + k * 1_777, Commit, &format!("penalty {k}"))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shaper() {
    let server = Server::start();
    let t = twin(&server).await;
    // rate=10r/s burst=5: an instant burst is delayed 0, 100, ..., 500 ms.
    let limit =
        AnyLimit::from(Shaper::new(NginxRate::PerSecond(10), 5, ShaperDelay::Queue).unwrap());
    let one = [item(b"s", b"s:a", &limit, 1)];
    for k in 0..6u64 {
        let d = t.step(&one, 1_000_000, Commit, "burst").await;
        assert_eq!(d.delay(), Duration::from_millis(100 * k));
    }
    assert_eq!(
        t.step(&one, 1_000_000, Commit, "over").await.outcome,
        Outcome::Denied
    );
    let kinds = [
        Shaper::new(NginxRate::PerMinute(1), 2, ShaperDelay::NoDelay).unwrap(),
        Shaper::new(NginxRate::PerMinute(90), 6, ShaperDelay::After(2)).unwrap(),
        Shaper::new(NginxRate::PerSecond(3), 0, ShaperDelay::Queue).unwrap(),
    ];
    for (n, s) in kinds.into_iter().enumerate() {
        let limit = AnyLimit::from(s).with_penalty(n == 1);
        let key = format!("s:k{n}");
        for k in 0..25u64 {
            let items = [item(b"s", key.as_bytes(), &limit, k % 4)];
            t.step(&items, T0 + k * 123_457, Commit, &format!("shaper {n}/{k}"))
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency() {
    let server = Server::start();
    let t = twin(&server).await;
    let limit = AnyLimit::from(Concurrency::new(2).unwrap());
    let it = |c| [item(b"c", b"c:a", &limit, c)];
    assert!(t.step(&it(2), 0, Commit, "take 2").await.is_allowed());
    assert!(t.step(&it(1), 0, Commit, "full").await.is_denied());
    t.release(it(1)[0], 1).await;
    assert!(t.step(&it(1), 0, Commit, "one back").await.is_allowed());
    t.release(it(1)[0], 5).await;
    t.step(&it(3), 0, Commit, "never").await;
    let d = t.step(&it(0), 0, Check, "empty again").await;
    assert_eq!(d.remaining, 2);
    // A dry run reports what the real call would: 2 taken, none left.
    let d = t.step(&it(2), 0, Check, "dry run").await;
    assert_eq!((d.is_allowed(), d.remaining), (true, 0));
    let d = t.step(&it(0), 0, Check, "still empty").await;
    assert_eq!(d.remaining, 2);
    // Nothing held: the key is gone.
    t.release(it(1)[0], 2).await;
    let key = t.redis.state_key(&it(1)[0]);
    let exists: bool = redis::cmd("EXISTS")
        .arg(key)
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_decide_duplicates_in_order_and_charge_all_or_nothing() {
    let server = Server::start();
    let t = twin(&server).await;
    // One key twice: each item reports the count after its own cost.
    let five = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    let all = five.clone().with_penalty(true);
    let twice = |l, c| [item(b"d", b"d:k", l, c), item(b"d", b"d:k", l, c)];
    let d = t.step(&twice(&five, 2), T0, Commit, "twice").await;
    assert_eq!(d.remaining, 1);
    let each = |(_, out): (Decision, Vec<Decision>)| -> Vec<(bool, u64)> {
        out.iter().map(|d| (d.is_allowed(), d.remaining)).collect()
    };
    // A dry run of 1 + 1 more: 5, then 6 — over, so the real call would
    // charge nothing, and the first is told what is left.
    let dry = t.step_each(&twice(&five, 1), T0, Check, "dry").await;
    assert_eq!(each(dry), [(true, 1), (false, 0)]);
    // Counted whatever the outcome: 5, then 6.
    let all = t.step_each(&twice(&all, 1), T0, Commit, "all").await;
    assert_eq!(each(all), [(true, 0), (false, 0)]);
    let d = t
        .step(&[item(b"d", b"d:k", &five, 0)], T0, Commit, "after")
        .await;
    assert!(d.is_denied(), "6 > 5: {d:?}");
    let per_sec = AnyLimit::from(Gcra::new(10, Duration::from_secs(1), 3).unwrap());
    let per_hour = AnyLimit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    let log =
        AnyLimit::from(SlidingLog::new(4, Duration::from_secs(1)).unwrap()).with_penalty(true);
    for k in 0..12u64 {
        let items = [
            item(b"u", b"u:sec", &per_sec, 1),
            item(b"u", b"u:hour", &per_hour, 1),
            item(b"u", b"u:sec", &per_sec, k % 2),
            item(b"v", b"v:log", &log, 1),
        ];
        let apply = if k % 5 == 4 { Check } else { Commit };
        t.step(&items, T0 + k * 50_000, apply, &format!("batch {k}"))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn magnitudes_beyond_2_pow_53_in_products() {
    let server = Server::start();
    let t = twin(&server).await;
    let day = Duration::from_secs(86_400);
    // Products such as limit × window in µs exceed 2^53: the scripts' exact
    // multiply-divide must agree with the in-memory 128-bit arithmetic.
    let limits = [
        AnyLimit::from(SlidingWindow::new(4_000_000_000, day).unwrap()),
        AnyLimit::from(SubWindowCounter::new(1 << 40, day * 1000, 1000).unwrap())
            .with_penalty(true),
        AnyLimit::from(Gcra::new(999_999_937, Duration::from_secs(3600), 999_999_937).unwrap()),
        AnyLimit::from(Gcra::new((1 << 40) - 87, day * 365, 1 << 40).unwrap()),
        AnyLimit::from(FixedWindow::new(1 << 40, day * 365 * 100).unwrap()).with_penalty(true),
        AnyLimit::from(
            Shaper::new(
                NginxRate::PerSecond(1 << 30),
                1 << 30,
                ShaperDelay::After(1 << 29),
            )
            .unwrap(),
        ),
    ];
    let costs = [
        1u64,
        3_999_999_999,
        1 << 39,
        123_456_789_012,
        (1 << 40) + 1,
        7,
        0,
        1 << 40,
    ];
    for k in 0..40u64 {
        for (n, limit) in limits.iter().enumerate() {
            let key = format!("big:{n}");
            let cost = costs[(k as usize + n) % costs.len()];
            let items = [item(b"big", key.as_bytes(), limit, cost)];
            t.step(
                &items,
                T0 + k * 7_777_777_777,
                Commit,
                &format!("limit {n} step {k}"),
            )
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_denials_charge_only_the_denying_limit() {
    use floodgate_policy::Backend;
    let server = Server::start();
    let t = twin(&server).await;
    let sec = Duration::from_secs(1);
    let own = |n| {
        AnyLimit::from(FixedWindow::new(n, sec).unwrap()).with_penalty_mode(Penalty::OwnDenials)
    };
    let (small, large) = (own(2), own(5));
    let all =
        AnyLimit::from(FixedWindow::new(5, sec).unwrap()).with_penalty_mode(Penalty::AllDenials);
    let batch = [
        item(b"o", b"o:small", &small, 1),
        item(b"o", b"o:large", &large, 1),
        item(b"o", b"o:all", &all, 1),
    ];
    let mut out = [common::blank(); 3];
    for k in 0..4u64 {
        t.step(&batch, T0 + k, Commit, &format!("batch {k}")).await;
    }
    // Two admitted, then two denied by `small` alone: `small` and `all`
    // count the denials, `large` does not.
    let now = floodgate::Timestamp::from_micros(T0 + 10);
    let peek = [
        item(b"o", b"o:small", &small, 0),
        item(b"o", b"o:large", &large, 0),
        item(b"o", b"o:all", &all, 0),
    ];
    t.redis.decide(&peek, now, Check, &mut out).await.unwrap();
    assert_eq!(out.map(|d| d.remaining), [0, 3, 1]);
    // `small` counted its denials past its limit: a check finds it over.
    assert!(out[0].is_denied());
    // A single item denied by itself counts the denial too.
    let one = [item(b"o", b"o:single", &small, 2)];
    for k in 0..3u64 {
        t.step(&one, T0 + k, Commit, &format!("single {k}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_deny_until_they_end_then_start_afresh() {
    use redis::Commands;
    let server = Server::start();
    let t = twin(&server).await;
    let block = Duration::from_millis(10_000);
    let limit =
        AnyLimit::from(FixedWindow::new(2, Duration::from_secs(1)).unwrap()).with_block(block);
    let other = AnyLimit::from(Gcra::new(1, Duration::from_secs(1), 1).unwrap())
        .with_block(Duration::from_nanos(2_500_500));
    let one = [item(b"b", b"b:k", &limit, 1)];
    t.step(&one, T0, Commit, "1").await;
    t.step(&one, T0, Commit, "2").await;
    let d = t.step(&one, T0 + 1, Commit, "denied").await;
    assert_eq!(d.retry_after, Some(block));
    // Blocked: a dry run and a later window are denied too, without
    // extending the block.
    let d = t.step(&one, T0 + 2_000_000, Check, "check").await;
    assert_eq!(
        d.retry_after,
        Some(block - Duration::from_micros(1_999_999))
    );
    t.step(&one, T0 + 5_000_000, Commit, "later").await;
    let key = t.redis.state_key(&one[0]);
    let v: Vec<u8> = server.conn().get(&key).unwrap();
    assert_eq!(v[0], b'b');
    // The key lives until the block ends (plus the client-time slack).
    let ttl: i64 = server.conn().pttl(&key).unwrap();
    assert!(ttl > 3_600_000 + 9_000, "{ttl}");
    // When it ends the key starts afresh.
    let end = T0 + 1 + 10_000_000;
    assert!(
        t.step(&one, end - 1, Commit, "last blocked")
            .await
            .is_denied()
    );
    assert!(t.step(&one, end, Commit, "fresh").await.is_allowed());
    // A block that is not whole microseconds, in a batch, and a dry run
    // that never blocks.
    let batch = [
        item(b"b", b"b:g", &other, 1),
        item(b"b", b"b:k2", &limit, 1),
    ];
    for (k, dt) in [0u64, 0, 1, 2_500, 2_501, 900_000, 1_000_000, 4_000_000]
        .into_iter()
        .enumerate()
    {
        let apply = if k == 1 { Check } else { Commit };
        t.step(&batch, end + dt, apply, &format!("batch {k}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_key_expires_when_its_block_ends_on_server_time() {
    use floodgate_policy::Backend;
    use redis::Commands;
    let server = Server::start();
    let config = floodgate_redis::RedisConfig::new(&server.url(), Mode::Single).unwrap();
    let redis = floodgate_redis::RedisBackend::connect(&config)
        .await
        .unwrap();
    // The window (10 s, on the server's clock) holds both decisions even on
    // a loaded machine; its own end would set a TTL of at most 10 s.
    let limit = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(10)).unwrap())
        .with_block(Duration::from_secs(30));
    let one = [item(b"s", b"s:k", &limit, 1)];
    let mut out = [common::blank()];
    let now = floodgate::Timestamp::ZERO;
    redis.decide(&one, now, Commit, &mut out).await.unwrap();
    let d = redis.decide(&one, now, Commit, &mut out).await.unwrap();
    assert_eq!(d.retry_after, Some(Duration::from_secs(30)));
    let ttl: i64 = server.conn().pttl(redis.state_key(&one[0])).unwrap();
    assert!((29_000..=30_001).contains(&ttl), "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_key_never_admits_a_cost_above_the_quota() {
    let server = Server::start();
    let t = twin(&server).await;
    let limit = AnyLimit::from(FixedWindow::new(2, Duration::from_secs(60)).unwrap())
        .with_block(Duration::from_secs(10));
    let it = |c| [item(b"bn", b"bn:k", &limit, c)];
    assert!(t.step(&it(2), T0, Commit, "2").await.is_allowed());
    assert!(t.step(&it(1), T0, Commit, "blocks").await.is_denied());
    let d = t.step(&it(5), T0 + 1, Commit, "never").await;
    assert_eq!((d.outcome, d.retry_after), (Outcome::Never, None));
    let d = t.step(&it(2), T0 + 2, Check, "still blocked").await;
    assert_eq!(d.outcome, Outcome::Denied);
    t.step(&it(5), T0 + 10_000_000, Commit, "never after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_request_takes_no_permit_units() {
    use floodgate::Apply::Force;
    let server = Server::start();
    let t = twin(&server).await;
    // Penalty and block do not apply to an in-flight limit.
    let permits = AnyLimit::from(Concurrency::new(2).unwrap())
        .with_penalty(true)
        .with_block(Duration::from_secs(10));
    let rate = AnyLimit::from(Gcra::new(1, Duration::from_secs(1), 1).unwrap()).with_penalty(true);
    let batch = [
        item(b"r", b"r:permits", &permits, 1),
        item(b"r", b"r:rate", &rate, 1),
    ];
    for (k, apply) in [Commit, Commit, Force, Force].into_iter().enumerate() {
        t.step(&batch, T0 + k as u64, apply, &format!("batch {k}"))
            .await;
    }
    let d = t
        .step(
            &[item(b"r", b"r:permits", &permits, 0)],
            T0 + 5,
            Check,
            "held",
        )
        .await;
    assert_eq!(d.remaining, 1, "one request admitted, one unit in flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_debt_from_a_cost_known_after_the_response() {
    let server = Server::start();
    let t = twin(&server).await;
    // 10 per second, 5 at most, penalty: a cost of 8 charged after the
    // response is counted whole, 3 tokens in debt.
    let limit =
        AnyLimit::from(Gcra::new(10, Duration::from_secs(1), 5).unwrap()).with_penalty(true);
    let check = [item(b"g", b"g:debt", &limit, 0)];
    let cost = [item(b"g", b"g:debt", &limit, 8)];
    assert!(t.step(&check, T0, Commit, "admission").await.is_allowed());
    assert_eq!(
        t.step(&cost, T0, Commit, "cost").await.outcome,
        Outcome::Never
    );
    let d = t.step(&check, T0, Commit, "in debt").await;
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(d.retry_after, Some(Duration::from_millis(300)));
    assert_eq!(d.reset_after, Duration::from_millis(800));
    assert!(
        t.step(&check, T0 + 299_999, Commit, "early")
            .await
            .is_denied()
    );
    assert!(
        t.step(&check, T0 + 300_000, Commit, "repaid")
            .await
            .is_allowed()
    );
}
