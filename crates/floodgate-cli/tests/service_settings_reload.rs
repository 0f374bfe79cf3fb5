//! The service's own settings (`server.body_limit`, ...) are read at
//! startup only, as the host's: a reload that changes them says so at
//! WARN and applies the policies; one that leaves them says nothing.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::{Floodgate, metric, wait_until};

const POLICY: &str = "domains:\n  - domain: api\n    descriptors:\n      - key: user\n        rate_limit: {name: per-user, requests: 5, per: 1m}\n";

fn config(body_limit: &str, rule: &str) -> String {
    format!(
        "server: {{body_limit: {body_limit}}}\n{}",
        POLICY.replace("per-user", rule)
    )
}

#[test]
fn a_reload_changing_the_service_settings_says_so() {
    let bin = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let serve = Floodgate::start_polling(bin, &config("1MiB", "first"), "50ms", &[], &[]);
    let reloads = || metric(serve.admin, "floodgate_config_reloads_total{result=\"ok\"}");
    let changed = |log: &str| log.matches("the service's settings changed").count();
    // The policies change, the service's settings stay: nothing said.
    serve.write_config(&config("1MiB", "second"));
    assert!(
        wait_until(Duration::from_secs(10), || reloads() >= 1.0),
        "{}",
        serve.log()
    );
    assert_eq!(changed(&serve.log()), 0, "{}", serve.log());
    // Both change: said once, and the policies applied.
    serve.write_config(&config("2MiB", "third"));
    assert!(
        wait_until(Duration::from_secs(10), || changed(&serve.log()) == 1),
        "{}",
        serve.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || reloads() >= 2.0),
        "{}",
        serve.log()
    );
}
