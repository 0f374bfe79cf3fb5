//! A Redis outage's requests in `floodgate_requests_total`: while the
//! failure policy answers in Redis's place, `fail_open` admits each request
//! and `fail_closed` denies it, and both binaries count them `failed_open`
//! or `failed_closed` — exactly the requests sent during the outage, not
//! `allowed` or `denied` — and count by Redis's decisions again once it is
//! back. On `floodgate serve`'s `/v1/check` and on the gateway, and in
//! their dashboards' headline.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, Gateway, Redis, http_request, wait_until};

use crate::gateway_lifecycle::upstream;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floodgate"))
}

/// One request a day per user.
const RULE: &str = "      - key: user\n        rate_limit: {requests_per_unit: 1, unit: day}\n";

/// Requests sent once the breaker has opened (decided without asking
/// Redis), beside those sent until it did (Redis asked, and failing).
const SHORT_CIRCUITED: u64 = 5;

/// How a binary under test is called and read.
struct Probe<'a> {
    /// Sends one request for `user`; its HTTP status.
    call: &'a dyn Fn(&str) -> u16,
    /// A metric's value (the first sample starting with the prefix).
    metric: &'a dyn Fn(&str) -> f64,
    /// The `floodgate_requests_total` series' `api` label.
    api: &'static str,
    /// The admin listener's port (the dashboard's data).
    admin: u16,
}

impl Probe<'_> {
    fn requests(&self, result: &str) -> u64 {
        (self.metric)(&format!(
            "floodgate_requests_total{{api=\"{}\",result=\"{result}\"}}",
            self.api
        )) as u64
    }

    /// The dashboard headline's count of `result` (every API together).
    fn shown(&self, result: &str) -> u64 {
        let (status, body) = http_request(self.admin, "GET", "/dashboard/data", None, b"")
            .expect("the dashboard's data");
        assert_eq!(status, 200, "{body}");
        let data: serde_json::Value = serde_json::from_str(&body).unwrap();
        data["requests"][result]
            .as_u64()
            .unwrap_or_else(|| panic!("{data}"))
    }

    /// Two requests of a fresh user, decided by Redis: allowed, then denied.
    fn decided_by_redis(&self, user: &str) {
        assert_eq!([(self.call)(user), (self.call)(user)], [200, 429], "{user}");
    }
}

/// Redis up, then killed, then back: `failed` (`failed_open` or
/// `failed_closed`) counts exactly the requests of the outage, each
/// answered `status`; `allowed` and `denied` only Redis's decisions.
fn outage(probe: &Probe<'_>, mut redis: Option<Redis>, failed: &str, status: u16) {
    let port = redis.as_ref().unwrap().port();
    probe.decided_by_redis("before");
    drop(redis.take());
    // One user throughout: Redis would deny all but the first.
    let mut during = 0;
    let mut send = || {
        assert_eq!((probe.call)("during"), status, "{failed}");
        during += 1;
    };
    let opened = wait_until(Duration::from_secs(20), || {
        send();
        (probe.metric)("floodgate_redis_breaker_opened_total") >= 1.0
    });
    assert!(opened, "{failed}: the breaker never opened");
    for _ in 0..SHORT_CIRCUITED {
        send();
    }
    let _redis = Redis::start_on(port);
    let closed = wait_until(Duration::from_secs(20), || {
        (probe.metric)("floodgate_redis_breaker_state ") == 0.0
    });
    assert!(closed, "{failed}: the breaker never closed");
    probe.decided_by_redis("after");

    assert_eq!(probe.requests(failed), during, "{failed}");
    assert_eq!(probe.shown(failed), during, "{failed}: the dashboard");
    assert_eq!(probe.requests("allowed"), 2, "{failed}");
    assert_eq!(probe.requests("denied"), 2, "{failed}");
    for other in ["failed_open", "failed_closed", "error", "shed", "delayed"] {
        if other != failed {
            assert_eq!(probe.requests(other), 0, "{failed}: {other}");
        }
    }
}

/// The two failure policies that answer without a store, and the result
/// and status of their answers.
const POLICIES: [(&str, &str, u16); 2] = [
    ("fail_open", "failed_open", 200),
    ("fail_closed", "failed_closed", 429),
];

#[test]
fn serve_counts_an_outages_requests_as_failed_open_or_closed() {
    for (policy, failed, status) in POLICIES {
        let redis = Redis::start();
        let url = redis.addr();
        let config = format!("domains:\n  - domain: d\n    descriptors:\n{RULE}");
        let args = [
            "--store",
            "redis",
            "--redis-url",
            &url,
            "--failure-policy",
            policy,
            "--redis-breaker-cool-down",
            "200ms",
            // Generous: a loaded machine's slow reply is still Redis's.
            "--redis-timeout",
            "2s",
        ];
        let fg = Floodgate::start(bin(), &config, &args, &[]);
        let call = |user: &str| {
            let body =
                format!(r#"{{"domain":"d","descriptors":[{{"entries":{{"user":"{user}"}}}}]}}"#);
            http_request(
                fg.http,
                "POST",
                "/v1/check",
                Some("application/json"),
                body.as_bytes(),
            )
            .unwrap_or_else(|| panic!("no answer; log:\n{}", fg.log()))
            .0
        };
        let metric = |prefix: &str| fg.metric(prefix);
        let probe = Probe {
            call: &call,
            metric: &metric,
            api: "check",
            admin: fg.admin,
        };
        outage(&probe, Some(redis), failed, status);
    }
}

#[test]
fn the_gateway_counts_an_outages_requests_as_failed_open_or_closed() {
    let up = upstream();
    for (policy, failed, status) in POLICIES {
        let redis = Redis::start();
        let config = format!(
            "gateway:\n  upstream: http://{}\nstore:\n  backend: redis\n  url: {}\n  failure_policy: {policy}\n  timeout: 2s\n  breaker: {{failures: 5, cool_down: 200ms}}\nhttp:\n  domain: edge\n  descriptors:\n    - [{{header: {{name: x-user, key: user}}}}]\ndomains:\n  - domain: edge\n    descriptors:\n{RULE}",
            up.addr,
            redis.addr()
        );
        let gw = Gateway::start(bin(), &config, &[], &[]);
        let call = |user: &str| crate::dashboard::get_with(gw.port, &[("x-user", user)]);
        let metric = |prefix: &str| gw.metric(prefix);
        let probe = Probe {
            call: &call,
            metric: &metric,
            api: "http",
            admin: gw.admin,
        };
        outage(&probe, Some(redis), failed, status);
    }
}
