//! A command that fails says why once: each cause of its error printed
//! once (a listener's address in use was followed by its cause twice),
//! whatever the logs' format, or with logs off.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    path.display().to_string()
}

/// The standard error of `floodgate ARGS`, which must fail.
fn fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `text` holds `what` exactly once.
fn once(text: &str, what: &str) {
    assert_eq!(
        text.matches(what).count(),
        1,
        "`{what}` not said once:\n{text}"
    );
}

#[test]
fn a_listener_address_in_use_is_said_once() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let serve = example("floodgate.yaml");
    let gateway = example("gateway.yaml");
    for logs in [
        &["--log-format", "text"][..],
        &["--log-format", "json"],
        &["--log-level", "off"],
    ] {
        let mut args = vec!["serve", "--config", &serve, "--grpc-addr", &addr];
        args.extend(["--http-addr", "off", "--admin-addr", "off"]);
        args.extend(logs);
        let err = fails(&args);
        once(&err, &format!("cannot listen on {addr}"));
        once(&err, "in use");
        let mut args = vec!["gateway", "--config", &gateway, "--listen", &addr];
        args.extend(["--admin-addr", "off"]);
        args.extend(logs);
        let err = fails(&args);
        once(&err, &format!("cannot listen on {addr}"));
        once(&err, "in use");
    }
}

#[test]
fn a_configuration_that_does_not_load_is_said_once() {
    for command in [&["serve"][..], &["gateway"], &["config", "check"]] {
        for logs in [&["--log-format", "json"][..], &["--log-level", "off"]] {
            let mut args = command.to_vec();
            args.extend(["--config", "/nonexistent/floodgate.yaml"]);
            args.extend(logs);
            let err = fails(&args);
            once(&err, "/nonexistent/floodgate.yaml");
        }
    }
    let err = fails(&[
        "replay",
        "--config",
        "/nonexistent/floodgate.yaml",
        "--log",
        "-",
    ]);
    once(&err, "/nonexistent/floodgate.yaml");
}
