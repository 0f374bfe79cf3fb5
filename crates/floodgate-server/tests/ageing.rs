//! Connection ageing on the gRPC listener (envoyproxy/ratelimit's
//! `GRPC_MAX_CONNECTION_AGE` and `_GRACE`), watched from real clients: a
//! raw HTTP/2 client sees the `GOAWAY` at the connection's age, give or
//! take a tenth, its call in flight completes (or is cut at the end of the
//! grace), and grpcio's channel carries on over new connections.

use serde_json::Value;

use crate::support::{python, start};

/// The service with connections aged at one second, and `grace`, on
/// `http2` (the gRPC listener's HTTP/2 server).
fn ageing(grace: &str, http2: &str) -> String {
    format!(
        "  grpc_max_connection_age: 1s\n  grpc_max_connection_age_grace: {grace}\n  \
         grpc_http2: {http2}\n"
    )
}

/// Each test on hyper's HTTP/2 server and on the service's own.
macro_rules! on_both_servers {
    ($test:ident, $hyper:ident, $direct:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $hyper() {
            $test("hyper").await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $direct() {
            $test("direct").await
        }
    };
}

on_both_servers!(
    a_call_in_flight_completes,
    an_old_connection_gets_goaway_and_its_call_in_flight_completes,
    on_the_own_server_an_old_connection_gets_goaway_and_its_call_in_flight_completes
);
on_both_servers!(
    a_call_in_flight_is_cut,
    a_call_still_in_flight_at_the_end_of_the_grace_is_cut,
    on_the_own_server_a_call_still_in_flight_at_the_end_of_the_grace_is_cut
);
on_both_servers!(
    grpcio_carries_on,
    grpcio_carries_on_over_new_connections,
    on_the_own_server_grpcio_carries_on_over_new_connections
);

/// What `goaway.py` saw on one connection to `port` in `mode`.
async fn watch(port: u16, mode: &str) -> Value {
    let args = vec!["127.0.0.1".into(), port.to_string(), mode.into()];
    let out = python("goaway.py", args).await;
    serde_json::from_str(&out[0]).unwrap()
}

fn secs(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not seconds: {v}"))
}

async fn a_call_in_flight_completes(http2: &str) {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), &ageing("30s", http2)).await;
    let seen = watch(service.grpc, "complete").await;
    let goaway = secs(&seen["goaway_after"]);
    // At one second, give or take a tenth: not before 0.9 s (the timer
    // starts at the accept, after the client's clock); a generous bound
    // above for a loaded machine.
    assert!((0.9..6.0).contains(&goaway), "{seen}");
    assert_eq!(seen["goaway_error"], 0, "NO_ERROR: {seen}");
    assert_eq!(seen["status"], "0", "the call in flight completed: {seen}");
    // Closed once its call completed, long before the grace's end.
    assert!(secs(&seen["closed_after"]) - goaway < 20.0, "{seen}");
}

async fn a_call_in_flight_is_cut(http2: &str) {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), &ageing("1s", http2)).await;
    let seen = watch(service.grpc, "abandon").await;
    let goaway = secs(&seen["goaway_after"]);
    assert!((0.9..6.0).contains(&goaway), "{seen}");
    assert_eq!(seen["status"], Value::Null, "{seen}");
    let grace = secs(&seen["closed_after"]) - goaway;
    assert!(
        (0.9..6.0).contains(&grace),
        "closed after its grace: {seen}"
    );
}

/// grpcio's channel, told to go away, opens a new connection: every
/// call succeeds over several ages.
async fn grpcio_carries_on(http2: &str) {
    let dir = tempfile::tempdir().unwrap();
    let service = start(dir.path(), &ageing("1s", http2)).await;
    let args = ["--calls", "8", "--every", "0.5"].map(str::to_owned);
    let mut all = vec![format!("127.0.0.1:{}", service.grpc)];
    all.extend(args);
    let out = python("grpc_call.py", all).await;
    assert_eq!(out, vec!["OK OK"; 8]);
}
