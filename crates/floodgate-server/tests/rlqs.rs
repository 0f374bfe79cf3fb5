//! The rate limit quota service (RLQS) seen from Envoy instances built
//! from Envoy's published protos (grpcio, `tests/python/rlqs.py`), on
//! [`POLICY`](crate::support::POLICY) (100 a minute per user): shares
//! that add up to the limit, deny-all once it is spent, counts kept
//! across a cut stream, a silent stream's share given back after the time
//! to live, an unknown bucket allowed, a lying instance's damage, a fleet
//! enforcing its shares within the stated bound, bad reports refused with
//! a clear status, bounded buckets, a bucket abandoned when a reload
//! removes its rule, shutdown with a stream open, and with Redis: a limit
//! and its streams shared by two instances, and the failure policy's
//! assignments while Redis is down.

use crate::support::{Service, python, start};

/// The seconds line `i` of a scenario's `lines` tells after `prefix`
/// (`<prefix>1.25s`).
fn seconds(lines: &[String], i: usize, prefix: &str) -> f64 {
    lines[i]
        .strip_prefix(prefix)
        .and_then(|s| s.strip_suffix('s'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("line {i} is not `{prefix}<seconds>s`: {lines:?}"))
}

/// The lines of the scenario `name`, played against a service of its own
/// started with `settings` (the server section's extra lines).
async fn played(settings: &str, name: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), settings).await;
    scenario(&service, name, &[]).await
}

async fn scenario(service: &Service, name: &str, extra: &[String]) -> Vec<String> {
    let mut args = vec![format!("127.0.0.1:{}", service.grpc), name.to_owned()];
    args.extend_from_slice(extra);
    python("rlqs.py", args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_limit_and_an_unknown_bucket_is_allowed() {
    let lines = played("", "shares").await;
    assert_eq!(
        lines,
        [
            "one: user=a share 100/MINUTE ttl=10",
            "two: user=a share 50/MINUTE ttl=10",
            // Pushed at once, without waiting for its next report.
            "one pushed: user=a share 50/MINUTE ttl=10",
            "one: user=a share 50/MINUTE ttl=10",
            "one: tier=x allow_all ttl=10",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bucket_rule_is_assigned_shares_of_its_burst_and_rate() {
    let lines = played("", "tokens").await;
    assert_eq!(
        lines,
        [
            "one: user=a token_bucket max=20 fill=10/1s ttl=10",
            "two: user=a token_bucket max=10 fill=5/1s ttl=10",
            "one pushed: user=a token_bucket max=10 fill=5/1s ttl=10",
            "one: user=a token_bucket max=10 fill=5/1s ttl=10",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_limit_denies_all_and_a_resumed_stream_keeps_the_count() {
    let lines = played("  rlqs:\n    assignment_ttl: 4s\n", "spent").await;
    assert_eq!(
        lines,
        [
            "one: user=a share 100/MINUTE ttl=4",
            // The cut stream no longer shares the limit; its 60 still count.
            "again: user=a share 100/MINUTE ttl=4",
            "again: user=a deny_all ttl=4",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_or_lying_instance_keeps_a_quarter_share_and_cannot_deny_past_the_window() {
    let lines = played("", "liar").await;
    assert_eq!(
        lines,
        [
            "honest: user=a share 100/MINUTE ttl=10",
            // Reporting nothing (an idle instance, or one hiding what it
            // admits) earns the liar a quarter of its equal share; the
            // busy honest instance gets the rest, at once.
            "liar: user=a share 12/MINUTE ttl=10",
            "honest pushed: user=a share 88/MINUTE ttl=10",
            "honest: user=a share 88/MINUTE ttl=10",
            // Over-reporting spends the counter: every instance is denied
            // until the rule's window refills it.
            "liar: user=a deny_all ttl=10",
            "honest: user=a deny_all ttl=10",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reports_end_their_stream_with_a_clear_status() {
    let lines = played("", "refused").await;
    let expect = [
        (
            "huge: ERR INVALID_ARGUMENT",
            "18446744073709551615 requests were allowed",
        ),
        ("negative: ERR INVALID_ARGUMENT", "(a negative count?)"),
        ("nodomain: ERR INVALID_ARGUMENT", "names no domain"),
        ("emptyvalue: ERR INVALID_ARGUMENT", "empty key or value"),
        ("otherdomain: user=a share 100/MINUTE", ""),
        (
            "otherdomain: ERR INVALID_ARGUMENT",
            "a report names `elsewhere`",
        ),
    ];
    assert_eq!(lines.len(), expect.len(), "{lines:#?}");
    for (line, (start, has)) in lines.iter().zip(expect) {
        assert!(line.starts_with(start) && line.contains(has), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_are_bounded_per_stream_and_overall() {
    let dir = tempfile::tempdir().unwrap();
    let server = "  rlqs:\n    max_buckets_per_stream: 2\n    max_buckets: 1\n";
    let service = start(dir.path(), server).await;
    let many = scenario(&service, "many", &[]).await;
    assert_eq!(many.len(), 1);
    assert!(
        many[0].starts_with("many: ERR RESOURCE_EXHAUSTED") && many[0].contains("max_buckets"),
        "{many:?}"
    );
    let full = scenario(&service, "full", &[]).await;
    assert_eq!(full[0], "one: user=a share 100/MINUTE ttl=10");
    assert!(
        full[1].starts_with("two: ERR RESOURCE_EXHAUSTED")
            && full[1].contains("server.rlqs.max_buckets"),
        "{full:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_whose_rule_a_reload_removes_is_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), "  rlqs:\n    assignment_ttl: 1s\n").await;
    let config = dir.path().join("floodgate.yaml").display().to_string();
    let lines = scenario(&service, "reload", &[config]).await;
    assert_eq!(
        lines,
        [
            "one: user=a share 100/MINUTE ttl=1",
            "one: user=a abandon",
            // Reported again: a new subscription, no rule limits it.
            "one: user=a allow_all ttl=1",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stream_stops_sharing_once_the_time_to_live_has_passed() {
    let lines = played("  rlqs:\n    assignment_ttl: 1s\n", "silent").await;
    assert_eq!(
        lines[..3],
        [
            "one: user=a share 100/MINUTE ttl=1",
            "two: user=a share 50/MINUTE ttl=1",
            "one pushed: user=a share 50/MINUTE ttl=1",
        ]
    );
    let whole = seconds(&lines, 3, "one: whole again after ");
    // Not before the silent stream's time to live ended.
    assert!(whole >= 0.9, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_pushed_the_whole_limit_once_the_other_falls_silent() {
    let lines = played("  rlqs:\n    assignment_ttl: 1s\n", "expired").await;
    assert_eq!(
        lines[..5],
        [
            "one: user=a share 100/MINUTE ttl=1",
            "two: user=a share 50/MINUTE ttl=1",
            "one pushed: user=a share 50/MINUTE ttl=1",
            "one: user=a share 50/MINUTE ttl=1",
            // No report asked: the silent stream's time to live ended.
            "one pushed: user=a share 100/MINUTE ttl=1",
        ]
    );
    let after = seconds(&lines, 5, "one: pushed after ");
    // After the time to live, within half of it more (the check's period).
    assert!((0.9..=2.0).contains(&after), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_enforcing_its_shares_admits_the_limit_and_one_round_at_most() {
    let lines = played("", "fleet").await;
    let admitted: u64 = lines[0].strip_prefix("admitted ").unwrap().parse().unwrap();
    // The bound of docs/service.md: the limit (100), plus what the three
    // instances admit in one reporting interval (10 each) once it is spent.
    assert!((100..=130).contains(&admitted), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_the_buckets_their_streams_and_assignments_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), "").await;
    let marker = dir.path().join("open");
    let args = vec![
        format!("127.0.0.1:{}", service.grpc),
        "shown".to_owned(),
        marker.display().to_string(),
    ];
    let url = format!("http://127.0.0.1:{}/dashboard", service.admin);
    let runtime = tokio::runtime::Handle::current();
    let client = tokio::task::spawn_blocking(move || {
        use floodgate_testkit::{browser::Browser, wait_until};
        let long = std::time::Duration::from_secs(30);
        // The page first, then the streams (open for 20 s at most).
        let browser = Browser::start();
        let page = browser.open(&url);
        let updated = "document.getElementById('updated').textContent";
        assert!(wait_until(long, || page.eval(updated) != "never"));
        let client = runtime.spawn(python("rlqs.py", args));
        let rows = || {
            let text = page.eval("JSON.stringify([...document.querySelectorAll('#panels tbody tr')].map(tr => [...tr.children].map(td => td.textContent)))");
            serde_json::from_str::<serde_json::Value>(text.as_str().unwrap_or("null")).unwrap()
        };
        // The bucket two streams share first, each assigned half; then the
        // one whose value is markup, shown as text.
        let hostile = "user=<img src=x onerror=\"document.title='owned'\">";
        let expected = serde_json::json!([
            ["api", "user=a", "2", "50 per minute; 50 per minute", "0.0", "requests_per_time_unit"],
            ["api", hostile, "1", "100 per minute", "0.0", "requests_per_time_unit"],
        ]);
        let listed = wait_until(long, || marker.exists() && rows() == expected);
        assert!(listed, "{} {:?}", rows(), page.problems());
        assert_eq!(page.eval("document.title"), "Floodgate dashboard");
        assert!(page.problems().is_empty(), "{:?}", page.problems());
        client
    })
    .await
    .unwrap();
    service.stop().await.unwrap();
    client.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_ends_unavailable_when_the_service_shuts_down() {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), "").await;
    let marker = dir.path().join("open");
    let args = [marker.display().to_string()];
    let target = format!("127.0.0.1:{}", service.grpc);
    let client = tokio::spawn(async move {
        let mut all = vec![target, "hold".to_owned()];
        all.extend(args);
        python("rlqs.py", all).await
    });
    wait_for(&marker).await;
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), service.stop());
    stopped
        .await
        .expect("an open stream held up shutdown")
        .unwrap();
    let lines = client.await.unwrap();
    assert_eq!(lines[0], "one: user=a share 100/MINUTE ttl=10");
    assert!(lines[1].starts_with("one: ERR UNAVAILABLE"), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_one_instances_reports_spend_the_limit_for_every_instance() {
    let redis = floodgate_testkit::Redis::start();
    let store = format!(
        "store:\n  backend: redis\n  url: redis://{}\n",
        redis.addr()
    );
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(a_dir.path(), &store).await;
    let b = start(b_dir.path(), &store).await;
    assert_eq!(report(&b, 0).await, ["one: user=a share 100/MINUTE ttl=10"]);
    assert_eq!(report(&a, 100).await, ["one: user=a deny_all ttl=10"]);
    // The other instance's streams see the shared counter spent.
    assert_eq!(report(&b, 0).await, ["one: user=a deny_all ttl=10"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_streams_on_two_instances_share_the_limit_and_a_silent_one_gives_its_share_back()
{
    let redis = floodgate_testkit::Redis::start();
    let store = format!(
        "  rlqs:\n    assignment_ttl: 1s\nstore:\n  backend: redis\n  url: redis://{}\n",
        redis.addr()
    );
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(a_dir.path(), &store).await;
    let b = start(b_dir.path(), &store).await;
    let other = format!("127.0.0.1:{}", b.grpc);
    let lines = scenario(&a, "across", &[other]).await;
    assert_eq!(
        lines[..3],
        [
            "one: user=a share 100/MINUTE ttl=1",
            // Another instance's stream: half each, over the fleet.
            "two: user=a share 50/MINUTE ttl=1",
            "one: user=a share 50/MINUTE ttl=1",
        ]
    );
    let whole = seconds(&lines, 3, "one: whole again after ");
    assert!(whole >= 0.9, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_an_idle_instance_gives_what_it_does_not_use_to_a_busy_one() {
    let redis = floodgate_testkit::Redis::start();
    let store = format!(
        "store:\n  backend: redis\n  url: redis://{}\n",
        redis.addr()
    );
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(a_dir.path(), &store).await;
    let b = start(b_dir.path(), &store).await;
    let other = format!("127.0.0.1:{}", b.grpc);
    assert_eq!(
        scenario(&a, "busy_across", &[other]).await,
        [
            "idle: user=a share 100/MINUTE ttl=10",
            // 10 in a second is busy; the other instance's stream used
            // nothing: it keeps a quarter of its half.
            "busy: user=a share 88/MINUTE ttl=10",
            "idle: user=a share 12/MINUTE ttl=10",
        ]
    );
}

/// What a stream is assigned once Redis stops answering, under the store's
/// failure policy `policy`.
async fn assigned_in_an_outage(policy: &str) -> Vec<String> {
    let redis = floodgate_testkit::Redis::start();
    let store = format!(
        "store:\n  backend: redis\n  url: redis://{}\n  failure_policy: {policy}\n  timeout: 100ms\n",
        redis.addr()
    );
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), &store).await;
    let (first, paused) = (dir.path().join("first"), dir.path().join("paused"));
    let args = [first.display().to_string(), paused.display().to_string()];
    let target = format!("127.0.0.1:{}", service.grpc);
    let client = tokio::spawn(async move {
        let mut all = vec![target, "outage".to_owned()];
        all.extend(args);
        python("rlqs.py", all).await
    });
    wait_for(&first).await;
    redis.pause();
    std::fs::write(&paused, "").unwrap();
    let lines = client.await.unwrap();
    redis.resume();
    lines
}

async fn wait_for(path: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{path:?} never came");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_a_report_is_assigned_by_the_failure_policy() {
    let before = unshared(recorder());
    assert_eq!(
        assigned_in_an_outage("fail_open").await,
        [
            "one: user=a share 100/MINUTE ttl=10",
            "one: user=a allow_all ttl=10"
        ]
    );
    assert_eq!(
        assigned_in_an_outage("local/2").await,
        [
            "one: user=a share 100/MINUTE ttl=10",
            // This instance's one stream, the limit divided by 2.
            "one: user=a share 50/MINUTE ttl=10"
        ]
    );
    assert!(unshared(recorder()) >= before + 2);
}

/// This process's Prometheus recorder, installed by the first call (before
/// the services whose metrics it records start).
fn recorder() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| floodgate_runtime::host::metrics::install().unwrap())
}

/// `floodgate_rlqs_unshared_total` as `handle` has it.
fn unshared(handle: &metrics_exporter_prometheus::PrometheusHandle) -> u64 {
    (handle.render().lines())
        .find_map(|l| l.strip_prefix("floodgate_rlqs_unshared_total "))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// One instance's one report of `allowed` requests to `service`.
async fn report(service: &Service, allowed: u64) -> Vec<String> {
    scenario(service, "report", &[allowed.to_string()]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shortest_time_to_live_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), "  rlqs:\n    assignment_ttl: 1ns\n").await;
    assert_eq!(
        report(&service, 0).await,
        ["one: user=a share 100/MINUTE ttl=0"]
    );
}

#[test]
fn reflection_describes_the_rlqs_service() {
    use prost::Message;
    let set = prost_types::FileDescriptorSet::decode(floodgate_server::proto::FILE_DESCRIPTOR_SET);
    let services: Vec<String> = (set.unwrap().file.iter())
        .flat_map(|f| {
            f.service
                .iter()
                .map(move |s| format!("{}.{}", f.package(), s.name()))
        })
        .collect();
    for expected in [
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
    ] {
        assert!(services.iter().any(|s| s == expected), "{services:?}");
    }
}
