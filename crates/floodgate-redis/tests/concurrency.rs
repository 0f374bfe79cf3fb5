//! Many callers on several backend instances (separate connections, as
//! several app servers would have) hammer one key: exactly the limit is
//! admitted, for every algorithm; and on a cluster, for a rule with several
//! limits (one group, so one slot and one atomic script).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Cluster, Server, blank, item};
use floodgate::algorithms::{
    AnyLimit, Concurrency, FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingLog,
    SlidingWindow, SubWindowCounter,
};
use floodgate::{Apply, Timestamp};
use floodgate_policy::Backend;
use floodgate_redis::{Mode, RedisBackend, RedisConfig};

const L: u64 = 150;
const YEARS_50: Duration = Duration::from_secs(86_400 * 365 * 50);

async fn backends(urls: Vec<String>, mode: Mode, n: usize) -> Vec<Arc<RedisBackend>> {
    backends_with(urls, mode, n, |_, _| {}).await
}

/// `n` backends, the `i`-th's settings changed by `f(i, ..)`.
async fn backends_with(
    urls: Vec<String>,
    mode: Mode,
    n: usize,
    f: impl Fn(usize, &mut RedisConfig),
) -> Vec<Arc<RedisBackend>> {
    let mut v = Vec::new();
    for i in 0..n {
        let mut config = RedisConfig {
            urls: urls.clone(),
            mode: mode.clone(),
            timeout: Duration::from_secs(5),
            ..RedisConfig::default()
        };
        f(i, &mut config);
        v.push(Arc::new(
            RedisBackend::connect(&config).await.expect("connect"),
        ));
    }
    v
}

/// A rule's limits: (group, key, limit).
type Rule = Arc<Vec<(Vec<u8>, Vec<u8>, AnyLimit)>>;

/// `tasks` callers spread over `backends`, each trying `per_task` times;
/// returns how many were admitted.
async fn hammer(
    backends: &[Arc<RedisBackend>],
    limits: Rule,
    tasks: usize,
    per_task: usize,
) -> u64 {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let b = backends[t % backends.len()].clone();
        let limits = limits.clone();
        handles.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..per_task {
                let items: Vec<_> = limits.iter().map(|(g, k, l)| item(g, k, l, 1)).collect();
                let mut out = vec![blank(); items.len()];
                let d = b
                    .decide(&items, Timestamp::ZERO, Apply::Commit, &mut out)
                    .await
                    .expect("decision");
                admitted += u64::from(d.is_allowed());
            }
            admitted
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("task");
    }
    total
}

/// One limit of every kind, each with `L` to admit.
fn every_limit() -> Vec<AnyLimit> {
    vec![
        Gcra::new(1, Duration::from_secs(3600), L).unwrap().into(),
        AnyLimit::from(Gcra::new(1, Duration::from_secs(3600), L).unwrap()).with_penalty(true),
        FixedWindow::new(L, YEARS_50).unwrap().into(),
        SlidingWindow::new(L, YEARS_50).unwrap().into(),
        SubWindowCounter::new(L, YEARS_50 / 5 * 4, 4)
            .unwrap()
            .into(),
        SlidingLog::new(L, Duration::from_secs(3600))
            .unwrap()
            .into(),
        Shaper::new(NginxRate::PerMinute(1), L - 1, ShaperDelay::NoDelay)
            .unwrap()
            .into(),
        Concurrency::new(L).unwrap().into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_admits_exactly_the_limit() {
    let server = Server::start();
    let bs = backends(vec![server.url()], Mode::Single, 4).await;
    for (n, limit) in every_limit().into_iter().enumerate() {
        let key = format!("hot:{n}").into_bytes();
        let one = Arc::new(vec![(b"hot".to_vec(), key, limit.clone())]);
        let admitted = hammer(&bs, one, 32, (3 * L as usize).div_ceil(32)).await;
        assert_eq!(admitted, L, "limit {n}: {limit:?}");
    }
}

/// The same through pipelining windows: commands of many callers written
/// together (and pipelines of several instances interleaved in Redis)
/// still admit exactly the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_admits_exactly_the_limit_through_pipelining_windows() {
    let server = Server::start();
    let bs = backends_with(vec![server.url()], Mode::Single, 4, |i, c| {
        c.pipeline_window = Duration::from_micros(if i % 2 == 0 { 1_000 } else { 300 });
        c.pipeline_limit = if i < 2 { 0 } else { 4 };
    })
    .await;
    for (n, limit) in every_limit().into_iter().enumerate() {
        let key = format!("win:{n}").into_bytes();
        let one = Arc::new(vec![(b"win".to_vec(), key, limit.clone())]);
        let admitted = hammer(&bs, one, 32, (3 * L as usize).div_ceil(32)).await;
        assert_eq!(admitted, L, "limit {n}: {limit:?}");
    }
    let (calls, pipelines) = bs.iter().fold((0, 0), |(c, p), b| {
        (c + b.stats().calls.get(), p + b.stats().pipelines.get())
    });
    assert!(
        pipelines > 0 && calls >= pipelines,
        "{calls} calls, {pipelines} pipelines"
    );
    // 32 callers on 4 instances: commands did share pipelines.
    assert!(
        calls > pipelines * 3 / 2,
        "{calls} calls in {pipelines} pipelines"
    );
}

#[test]
fn cluster_rule_with_several_limits_is_exact() {
    let cluster = Cluster::start();
    let rt = common::runtime();
    rt.block_on(async {
        let bs = backends(cluster.urls(), Mode::Cluster, 3).await;
        // One rule: three limits, one group, so one slot and one script.
        let rule = Arc::new(vec![
            (
                b"rule".to_vec(),
                b"rule:window".to_vec(),
                AnyLimit::from(FixedWindow::new(L, YEARS_50).unwrap()),
            ),
            (
                b"rule".to_vec(),
                b"rule:bucket".to_vec(),
                AnyLimit::from(Gcra::new(1, Duration::from_secs(3600), L + 20).unwrap()),
            ),
            (
                b"rule".to_vec(),
                b"rule:log".to_vec(),
                AnyLimit::from(SlidingLog::new(L + 7, Duration::from_secs(3600)).unwrap()),
            ),
        ]);
        let admitted = hammer(&bs, rule.clone(), 24, (3 * L as usize).div_ceil(24)).await;
        assert_eq!(admitted, L);
        // All or nothing: each limit was charged exactly L times.
        let mut out = [blank()];
        for ((g, k, l), left) in rule.iter().zip([0, 20, 7]) {
            let d = bs[0]
                .decide(&[item(g, k, l, 0)], Timestamp::ZERO, Apply::Check, &mut out)
                .await
                .unwrap();
            assert_eq!(d.remaining, left, "{}", String::from_utf8_lossy(k));
        }
        assert_eq!(
            bs.iter().map(|b| b.stats().cross_slot.get()).sum::<u64>(),
            0
        );

        // Across groups (two slots): best effort, but never over a limit.
        let spread = Arc::new(vec![
            (
                b"ga".to_vec(),
                b"ga:x".to_vec(),
                AnyLimit::from(FixedWindow::new(L, YEARS_50).unwrap()),
            ),
            (
                b"gb".to_vec(),
                b"gb:y".to_vec(),
                AnyLimit::from(FixedWindow::new(L, YEARS_50).unwrap()),
            ),
        ]);
        let admitted = hammer(&bs, spread.clone(), 24, (3 * L as usize).div_ceil(24)).await;
        assert!(admitted <= L, "admitted {admitted}");
        for (g, k, l) in spread.iter() {
            let d = bs[0]
                .decide(&[item(g, k, l, 0)], Timestamp::ZERO, Apply::Check, &mut out)
                .await
                .unwrap();
            assert!(
                L - d.remaining >= admitted,
                "each limit counts every admission"
            );
        }
        assert!(bs.iter().map(|b| b.stats().cross_slot.get()).sum::<u64>() > 0);
    });
}
