//! Reloads in process, all or nothing: a configuration with any invalid
//! part leaves the running policies and limiter the very same objects; a
//! valid one replaces the policies, and the limiter only when the `http:`
//! section changed.

use crate::support;

use std::sync::Arc;

use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::ConfigSource;
use support::{ConfigFile, gateway, upstream};

const ROUTES: &str = r#"["/api/{*rest}"]"#;
const CLASHING_ROUTES: &str = r#"["/api/{*rest}", "/api/{*other}"]"#;
const SERVER: &str = "server: {reload_interval: 0}\n";

fn config(requests: u32, routes: &str, http: &str, more: &str) -> String {
    format!(
        r#"http:
  domain: gw
  routes: {routes}
  descriptors:
    - [{{header: {{name: x-user, key: user}}}}, route]
{http}domains:
  - domain: gw
    descriptors:
      - key: user
        descriptors:
          - key: route
            rate_limit: {{name: per-user, requests: {requests}, per: 1h}}
{more}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_part_changes_nothing_and_a_valid_file_changes_both() {
    let up = upstream().await;
    let file = ConfigFile::new(&config(3, ROUTES, "", SERVER));
    let gw = gateway(&file, &format!("http://{}", up.addr)).await;
    let g = gw.gateway().clone();
    let source = ConfigSource {
        paths: vec![file.path.clone()],
        options: LoadOptions {
            other_sections: floodgate_runtime::host::sections(
                &<floodgate_gateway::Proxying as floodgate_runtime::host::Frontend>::sections(),
            ),
            ..Default::default()
        },
    };
    let reload = &gw;
    let (policy, limiter) = (g.engine().policy(), g.limiter());

    for (what, text, error) in [
        (
            "http routes",
            config(6, CLASHING_ROUTES, "", SERVER),
            "matches the same paths",
        ),
        (
            "http trusted hops",
            config(6, ROUTES, "  client_ip: {trusted_hops: 1000}\n", SERVER),
            "trusted_hops",
        ),
        (
            "gateway section",
            config(
                6,
                ROUTES,
                "",
                &format!("{SERVER}gateway: {{limits: {{max_headers: lots}}}}\n"),
            ),
            "found `lots`",
        ),
        (
            "server section",
            config(
                6,
                ROUTES,
                "",
                "server: {reload_interval: 0, colour: blue}\n",
            ),
            "colour",
        ),
        (
            "store section",
            config(
                6,
                ROUTES,
                "",
                &format!("{SERVER}store: {{backend: etcd}}\n"),
            ),
            "etcd",
        ),
    ] {
        file.rewrite(&text);
        let compiled = source.compile().unwrap_or_else(|e| panic!("{what}: {e}"));
        let err = match reload.apply(compiled) {
            Ok(()) => panic!("{what}: applied"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(error), "{what}: {err}");
        assert!(
            Arc::ptr_eq(&g.engine().policy(), &policy),
            "{what}: policy replaced"
        );
        assert!(
            Arc::ptr_eq(&g.limiter(), &limiter),
            "{what}: limiter replaced"
        );
    }

    // The layer's state (its queues, counts, adaptive limit), by the
    // address of its counters.
    let state = |l: &Arc<Option<floodgate_gateway::Limiter<_>>>| {
        l.as_ref()
            .as_ref()
            .map(|l| std::ptr::from_ref(l.layer().stats()))
    };
    // The same `http:` section: new policies, the running layer's state
    // stays, now deciding under them.
    file.rewrite(&config(6, ROUTES, "", SERVER));
    reload.apply(source.compile().unwrap()).unwrap();
    assert!(!Arc::ptr_eq(&g.engine().policy(), &policy));
    assert_eq!(state(&g.limiter()), state(&limiter));

    // A changed one: both.
    let policy = g.engine().policy();
    file.rewrite(&config(9, ROUTES, "  responses: {status: 503}\n", SERVER));
    reload.apply(source.compile().unwrap()).unwrap();
    assert!(!Arc::ptr_eq(&g.engine().policy(), &policy));
    let now = g.limiter();
    assert_ne!(state(&now), state(&limiter));
    let section = now.as_ref().as_ref().map(|l| l.section().contract.status);
    assert_eq!(section.map(|s| s.as_u16()), Some(503));
    gw.shutdown().await;
}

/// A reload reads the new files with the flags and environment the gateway
/// started with: an upstream given by the environment beside a `gateway:`
/// section without one is as valid on reload as at startup, and so are the
/// Redis settings of a file whose store a flag chose (Redis is down: the
/// failure policy decides).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reads_the_files_with_the_startup_flags_and_environment() {
    let up = upstream().await;
    let url = format!("http://{}", up.addr);
    let text = |requests| {
        let more = format!(
            "{SERVER}gateway: {{access_log: false}}\nstore: {{timeout: 50ms, connect_timeout: 50ms}}\n"
        );
        config(requests, ROUTES, "", &more)
    };
    let file = ConfigFile::new(&text(3));
    let flags = floodgate_runtime::settings::Flags::new()
        .with("config", file.path.display().to_string())
        .with("gateway.listen", "127.0.0.1:0")
        .with("store.backend", "redis")
        .with("store.url", "127.0.0.1:1")
        .with("server.admin", "off");
    let env = |name: &str| (name == "FLOODGATE_UPSTREAM").then(|| url.clone());
    let loaded = floodgate_gateway::load(&flags, &floodgate_runtime::settings::Env::new(&env))
        .unwrap_or_else(|e| panic!("{e}"));
    let gw = floodgate_gateway::start(loaded, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A rule's fingerprint covers its limit.
    let rules = |gw: &floodgate_gateway::Running| {
        let policy = gw.gateway().engine().policy();
        policy
            .rules()
            .iter()
            .map(|r| r.fingerprint)
            .collect::<Vec<_>>()
    };
    let started = rules(&gw);

    file.rewrite(&text(6));
    gw.reload_now();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while rules(&gw) == started {
        assert!(
            std::time::Instant::now() < end,
            "the reload was not applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    gw.shutdown().await;
}
