//! What `floodgate --help` says of the commands.

use std::process::Command;

/// The first line names every command the list under "Commands:" offers.
#[test]
fn the_summary_names_every_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().next().unwrap_or_default();
    let commands: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 5, "{text}");
    for c in commands {
        assert!(summary.contains(c), "`{c}` missing from: {summary}");
    }
}

/// The output of `floodgate ARGS`.
fn floodgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .output()
        .unwrap()
}

/// Each command offers the settings it reads: `gateway --help` none of the
/// service's listeners and requests, `serve --help` none of the
/// gateway's; both the host's (admin listener, logs, store).
#[test]
fn each_command_offers_the_settings_it_reads() {
    let help = |command: &str| {
        let out = floodgate(&[command, "--help"]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let service = [
        "--grpc-addr",
        "--http-addr",
        "--grpc-tls-cert",
        "--http-tls-cert",
        "--body-limit",
        "--max-descriptors",
        "--max-value-bytes",
        "--limit-overrides",
        "--negative-hits",
        "--max-connections",
        "--max-requests",
        "--request-timeout",
        "--response-headers",
        "--x-ratelimit-headers",
    ];
    let gateway = [
        "--listen",
        "--upstream",
        "--gateway-max-connections",
        "--access-log",
    ];
    let shared = [
        "--admin-addr",
        "--log-level",
        "--store",
        "--reload-interval",
        "--workers",
    ];
    let (serve, gateway_help) = (help("serve"), help("gateway"));
    // `--flag <VALUE>`, or `--flag[=<BOOL>]`.
    let offers = |help: &str, flag: &str| {
        let with_value = format!("{flag}[");
        help.split_whitespace()
            .any(|w| w == flag || w.starts_with(&with_value))
    };
    for flag in service {
        assert!(offers(&serve, flag), "serve: {flag}");
        assert!(!offers(&gateway_help, flag), "gateway: {flag}");
    }
    for flag in gateway {
        assert!(offers(&gateway_help, flag), "gateway: {flag}");
        assert!(!offers(&serve, flag), "serve: {flag}");
    }
    for flag in shared {
        assert!(offers(&serve, flag), "serve: {flag}");
        assert!(offers(&gateway_help, flag), "gateway: {flag}");
    }
}

/// Another command's flag is refused, naming the command that reads it
/// and its key, before anything starts.
#[test]
fn another_commands_flag_is_refused_by_name() {
    let out = floodgate(&["gateway", "--grpc-addr", "127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--grpc-addr (`server.grpc`) is a setting of `floodgate serve`: `floodgate gateway` does not read it"),
        "{err}"
    );
    let out = floodgate(&["serve", "--upstream", "http://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--upstream (`gateway.upstream.url`) is a setting of `floodgate gateway`: `floodgate serve` does not read it"),
        "{err}"
    );
}
