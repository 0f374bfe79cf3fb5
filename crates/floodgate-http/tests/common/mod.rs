//! Shared test helpers: identities from inline YAML, requests, and the
//! descriptors they give as plain data.

#![allow(dead_code)]

use std::net::SocketAddr;

use floodgate_http::identity::{HttpIdentity, NoExtensions, RequestDescriptors};
use floodgate_policy::Descriptor;

/// An identity from the `http:` section `body` (indented under `http:`).
pub(crate) fn identity(body: &str) -> HttpIdentity {
    let text = format!("http:\n{}", indent(body));
    HttpIdentity::from_yaml_str("test.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The errors of the `http:` section `body`, one message a line.
pub(crate) fn errors(body: &str) -> String {
    let text = format!("http:\n{}", indent(body));
    match HttpIdentity::from_yaml_str("test.yaml", &text) {
        Ok(_) => panic!("expected errors for\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn indent(body: &str) -> String {
    body.lines().map(|l| format!("  {l}\n")).collect::<String>()
}

/// A request head: `method path` with `headers` (a header may repeat).
pub(crate) fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

pub(crate) fn peer(addr: &str) -> SocketAddr {
    match addr.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => SocketAddr::new(addr.parse().unwrap(), 40000),
    }
}

pub(crate) type Entries = Vec<Vec<(String, String)>>;

/// The descriptors of a request as plain entries.
pub(crate) fn plain(out: &RequestDescriptors) -> Entries {
    out.iter()
        .map(|d| {
            (0..d.len())
                .map(|i| {
                    let (k, v) = d.entry(i);
                    (k.to_owned(), v.to_owned())
                })
                .collect()
        })
        .collect()
}

/// The descriptors of `GET /` from `from` with `headers`.
pub(crate) fn run(id: &HttpIdentity, from: &str, headers: &[(&str, &str)]) -> Entries {
    run_request(id, &request("GET", "/", headers), from)
}

pub(crate) fn run_request(id: &HttpIdentity, parts: &http::request::Parts, from: &str) -> Entries {
    let mut out = RequestDescriptors::new();
    id.build(parts, peer(from).ip(), &NoExtensions, &mut out);
    plain(&out)
}

/// Expected entries from literals.
pub(crate) fn e(descriptors: &[&[(&str, &str)]]) -> Entries {
    descriptors
        .iter()
        .map(|d| {
            d.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// The client address key of a request (first descriptor `[client_ip]`).
pub(crate) fn client(id: &HttpIdentity, from: &str, headers: &[(&str, &str)]) -> String {
    let d = run(id, from, headers);
    d[0][0].1.clone()
}
