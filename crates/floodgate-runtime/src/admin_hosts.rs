//! The names the admin listener answers to. A page an operator's browser
//! opens can make its own name resolve to the admin listener's address
//! (DNS rebinding) and read `/dashboard/data`, the configuration and
//! `/metrics` as the same origin; the browser still sends that name as
//! `Host`. So a request is answered only when its authority (`Host`, or
//! HTTP/2's `:authority`) names the listener:
//!
//! * a loopback name: `localhost` or a name under it (`*.localhost`,
//!   which browsers resolve to loopback themselves, RFC 6761 §6.3);
//! * an IP address (`127.0.0.1`, `[::1]`, a pod's address): an address
//!   is no name a page can rebind;
//! * a name listed in `server.admin_hosts`;
//!
//! with any port, in any case, with or without a final dot. A request
//! without an authority (HTTP/1.0) is answered: no browser sends one.
//! Anything else is **421 Misdirected Request**, counted in
//! `floodgate_admin_misdirected_total`.

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use floodgate_http::authority::{Authority, valid_authority};

/// Why a name cannot be an admin host.
pub(crate) const NOT_A_NAME: &str =
    "expected a host name (letters, digits, `-`, `.`), without a port";

/// The names the admin listener answers to besides loopback names and IP
/// addresses: lowercase, without a final dot.
#[derive(Clone, Debug, Default)]
pub(crate) struct AdminHosts {
    names: Vec<String>,
}

impl AdminHosts {
    /// Answers to `names` too (each checked by [`check_name`]).
    pub(crate) fn new(names: &[String]) -> Self {
        let names = names
            .iter()
            .map(|n| n.trim().trim_end_matches('.').to_ascii_lowercase())
            .collect();
        AdminHosts { names }
    }

    /// Whether a request for `authority` (none: not given) is for this
    /// listener.
    pub(crate) fn answers(&self, authority: Option<&[u8]>) -> bool {
        let Some(raw) = authority else {
            return true;
        };
        if !valid_authority(raw) {
            return false;
        }
        let a = Authority::new(raw, None);
        let host = a.host();
        a.ip().is_some()
            || host.eq_ignore_ascii_case(b"localhost")
            || (host.len() > b".localhost".len()
                && host[host.len() - b".localhost".len()..].eq_ignore_ascii_case(b".localhost"))
            || self
                .names
                .iter()
                .any(|n| n.as_bytes().eq_ignore_ascii_case(host))
    }
}

/// Checks one name of `server.admin_hosts`.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let n = name.trim();
    let valid =
        !n.is_empty() && !n.contains(':') && !n.starts_with('[') && valid_authority(n.as_bytes());
    valid
        .then_some(())
        .ok_or_else(|| format!("`{n}`: {NOT_A_NAME}"))
}

/// The authority of `req`: its target's (HTTP/2's `:authority`), else
/// `Host`.
pub(crate) fn authority_of<B>(req: &Request<B>) -> Option<&[u8]> {
    match req.uri().authority() {
        Some(a) => Some(a.as_str().as_bytes()),
        None => req.headers().get(header::HOST).map(HeaderValue::as_bytes),
    }
}

/// The answer to a request for another name.
pub(crate) fn misdirected() -> Response<Body> {
    metrics::counter!("floodgate_admin_misdirected_total").increment(1);
    let text = "421 Misdirected Request: the admin listener answers only requests for \
                localhost, an IP address, or a name in server.admin_hosts\n";
    let mut res = Response::new(Body::from(text));
    *res.status_mut() = StatusCode::MISDIRECTED_REQUEST;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_ip_addresses_and_listed_names() {
        let hosts = AdminHosts::new(&["Admin.Internal.".to_owned()]);
        for ok in [
            "localhost",
            "LOCALHOST:6070",
            "localhost.",
            "grafana.localhost:3000",
            "127.0.0.1",
            "127.0.0.1:6070",
            "10.1.2.3:6070",
            "[::1]:6070",
            "[fe80::1]",
            "admin.internal",
            "admin.internal.:6070",
        ] {
            assert!(hosts.answers(Some(ok.as_bytes())), "{ok}");
        }
        assert!(hosts.answers(None), "no authority: no browser");
        for refused in [
            "attacker.example",
            "attacker.example:6070",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "xlocalhost",
            ".localhost",
            "admin.internal.example",
            "2130706433",
            "0x7f.0.0.1",
            "127.1",
            "",
            "local host",
            "u@localhost",
        ] {
            assert!(!hosts.answers(Some(refused.as_bytes())), "{refused}");
        }
        assert!(!AdminHosts::default().answers(Some(b"admin.internal")));
    }

    #[test]
    fn listed_names_are_names() {
        for ok in ["admin.internal", "Metrics.Example.", "a_b"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a:80", "[::1]", "a b", "a/b", "u@a", "a..b"] {
            assert!(check_name(bad).unwrap_err().contains(NOT_A_NAME), "{bad}");
        }
    }
}
