//! The gateway's settings as plain data: what the `gateway:` section of a
//! Floodgate file reads into, and what code can build directly.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

pub use floodgate_http::identity::EncodedSlashes;
use floodgate_runtime::listener::ConnectionLimits;
pub use floodgate_runtime::tls::ListenerTls;
use http::Uri;

/// The protocol spoken to the upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 with keep-alive (the default).
    #[default]
    Http1,
    /// HTTP/2: over cleartext with prior knowledge (h2c) for `http://`
    /// URLs, negotiated with ALPN (`h2`) for `https://` ones; one
    /// multiplexed connection per upstream address.
    Http2,
}

impl UpstreamProtocol {
    /// The configuration name (`http1`, `http2`).
    pub const fn name(self) -> &'static str {
        match self {
            UpstreamProtocol::Http1 => "http1",
            UpstreamProtocol::Http2 => "http2",
        }
    }
}

/// The `Host` the upstream sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostHeader {
    /// The client's `Host` (or HTTP/2 `:authority`), unchanged (the
    /// default; nginx's `proxy_set_header Host $http_host`).
    #[default]
    Preserve,
    /// The upstream URL's authority (nginx's default, `$proxy_host`).
    Upstream,
}

/// One upstream base URL: `http://host:port` or `https://host:port`, with
/// an optional path prefix prepended to every request path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamUrl {
    /// `host:port` (the port is always explicit).
    pub authority: http::uri::Authority,
    /// A path prefix without a trailing `/` (empty: none).
    pub prefix: String,
    /// `https://`: the upstream is reached over TLS.
    pub tls: bool,
}

impl UpstreamUrl {
    /// Parses `http://host[:port][/prefix]` or `https://host[:port][/prefix]`
    /// (default ports 80 and 443).
    pub fn parse(text: &str) -> Result<UpstreamUrl, String> {
        let uri: Uri = text
            .trim()
            .parse()
            .map_err(|e| format!("`{text}` is not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => {
                return Err(format!(
                    "upstream scheme `{other}` is not supported (http:// or https://)"
                ));
            }
            None => return Err(format!("`{text}` has no scheme (write http://host:port)")),
        };
        let Some(auth) = uri.authority() else {
            return Err(format!("`{text}` has no host"));
        };
        if auth.as_str().contains('@') {
            return Err(format!(
                "`{text}`: credentials in upstream URLs are not supported"
            ));
        }
        let port = auth.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let authority = format!("{}:{port}", auth.host())
            .parse()
            .map_err(|e| format!("`{text}`: {e}"))?;
        if uri.query().is_some() {
            return Err(format!("`{text}`: an upstream URL has no query"));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(UpstreamUrl {
            authority,
            prefix,
            tls,
        })
    }

    /// The scheme (`http` or `https`).
    pub fn scheme(&self) -> http::uri::Scheme {
        if self.tls {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        }
    }
}

/// TLS towards `https://` upstreams.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    /// PEM file of the certificate authorities trusted for the upstream
    /// (none: the system's roots).
    pub ca: Option<PathBuf>,
    /// PEM certificate chain presented to the upstream (client
    /// authentication), with `key`.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
}

/// Where requests go and how (`Default`: blank, see
/// [`GatewayConfig::default`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpstreamConfig {
    /// Base URLs, used in turn (round robin); at least one.
    pub urls: Vec<UpstreamUrl>,
    /// HTTP/1.1 or HTTP/2.
    pub protocol: UpstreamProtocol,
    /// Longest time to open a TCP connection (and complete the TLS
    /// handshake); beyond → 504.
    pub connect_timeout: Duration,
    /// Longest time from the request being sent whole to the response
    /// head, and longest pause of an upstream not reading the request
    /// body (beyond → 504); also the longest pause in the response body
    /// (beyond, the client's response ends with an error).
    pub response_timeout: Duration,
    /// Idle pooled connections are closed after this long.
    pub pool_idle_timeout: Duration,
    /// Idle connections kept per upstream address.
    pub pool_max_idle: usize,
    /// The `Host` sent.
    pub host: HostHeader,
    /// TLS settings for `https://` URLs.
    pub tls: UpstreamTls,
}

/// Client-side protections of the listener (`Default`: blank, see
/// [`GatewayConfig::default`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenerLimits {
    /// The protections of each connection: the header timeout (slow
    /// clients, slowloris, are disconnected after it), the largest request
    /// head and most fields, the HTTP/2 streams and idle timeout.
    pub connection: ConnectionLimits,
    /// Longest pause between two chunks of a request body while it is
    /// forwarded (beyond → 408, and the upstream request is aborted).
    pub body_read_timeout: Duration,
    /// Largest request body (nginx's `client_max_body_size`): a larger
    /// `Content-Length` → 413 before the request is limited, a body that
    /// grows past it → 413 and the upload aborted. None: any size.
    pub max_body_bytes: Option<u64>,
    /// Open client connections at most; beyond, new connections wait in
    /// the kernel's accept backlog (`None`: 10 000, or what the open files
    /// limit leaves room for).
    pub max_connections: Option<usize>,
}

/// What of a request's protocol the gateway lets through to the upstream
/// (`Default`: blank, see [`GatewayConfig::default`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forwarding {
    /// The protocols a client may ask to upgrade to (`Upgrade`), lower
    /// case; any other is dropped from the request, which goes on as a
    /// plain one. Never `h2c`.
    pub upgrades: Vec<String>,
    /// What `%2F`, `%5C` and `\` in a request path mean.
    pub encoded_slashes: EncodedSlashes,
}

/// The `gateway:` section; `Default` is every setting at its declared
/// default ([`settings`](crate::settings)), without an upstream.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayConfig {
    /// The client-facing listener.
    pub listen: SocketAddr,
    /// TLS on the listener (none: cleartext).
    pub tls: Option<ListenerTls>,
    /// The upstream.
    pub upstream: UpstreamConfig,
    /// Listener protections.
    pub limits: ListenerLimits,
    /// What is forwarded of a request's protocol.
    pub forwarding: Forwarding,
    /// One log line per request (see [`crate::access`]).
    pub access_log: bool,
    /// The sources (networks, `(address, prefix length)`) whose
    /// connections start with a PROXY protocol header, and only they
    /// may ([`floodgate_runtime::listener::proxy_protocol`]); empty: no
    /// header is read.
    pub proxy_protocol: Vec<(IpAddr, u8)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls() {
        let u = UpstreamUrl::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(u.authority.as_str(), "127.0.0.1:9000");
        assert_eq!(u.prefix, "");
        let u = UpstreamUrl::parse("http://backend/api/").unwrap();
        assert_eq!(u.authority.as_str(), "backend:80");
        assert_eq!(u.prefix, "/api");
        let u = UpstreamUrl::parse("https://x").unwrap();
        assert!(u.tls);
        assert_eq!(u.authority.as_str(), "x:443");
        assert!(UpstreamUrl::parse("ftp://x").is_err());
        assert!(UpstreamUrl::parse("x:1").is_err());
        assert!(UpstreamUrl::parse("http://u:p@x").is_err());
        assert!(UpstreamUrl::parse("http://x/?a=1").is_err());
    }
}
