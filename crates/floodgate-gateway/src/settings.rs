//! The `gateway:` section's settings, declared once each (file key,
//! variable, flag, default, documentation) and read as every Floodgate
//! setting is: flags > environment > file > defaults
//! ([`table`](mod@floodgate_runtime::settings::table)). TLS files are loaded and
//! checked as they are read, so `floodgate config check` reports a missing
//! file, a malformed PEM or a key that does not match its certificate where
//! the setting was given; relative paths in a file are relative to its
//! directory.

use std::net::{IpAddr, SocketAddr};

use std::path::PathBuf;
use std::sync::LazyLock;

use floodgate_policy::error::{ConfigError, ConfigErrors, Errors};
use floodgate_policy::read::parse_cidr;
use floodgate_policy::yaml::Document;
use floodgate_runtime::listener::ConnectionLimits;
use floodgate_runtime::settings::listener::{
    self, ConnectionsAt, ProtectionsAt, ProtectionsInstance, TlsAt, TlsInstance, TlsSettings,
    relative_to_origin,
};
use floodgate_runtime::settings::table::{self, Declared, Env, Flags, Kind, Origin, Origins};
use floodgate_runtime::settings::{
    ANY, boolean, choice, count_in, parse_listen_on, parse_size, positive_duration,
};

use crate::config::{
    EncodedSlashes, Forwarding, GatewayConfig, HostHeader, ListenerLimits, UpstreamConfig,
    UpstreamProtocol, UpstreamUrl,
};
use floodgate_runtime::tls::pem::{certificates, private_key};

/// The top-level key of the gateway's settings.
pub const SECTION: &str = "gateway";

/// What the settings of the section read into, before the files they name
/// are checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    config: GatewayConfig,
    tls: TlsSettings,
}

impl TlsAt<Draft> for Draft {
    fn tls(s: &mut Draft) -> &mut TlsSettings {
        &mut s.tls
    }
}

impl ProtectionsAt<Draft> for Draft {
    fn limits(s: &mut Draft) -> &mut ConnectionLimits {
        &mut s.config.limits.connection
    }
}

impl ConnectionsAt<Draft> for Draft {
    fn max_connections(s: &mut Draft) -> &mut Option<usize> {
        &mut s.config.limits.max_connections
    }
}

/// The listener's TLS settings: `gateway.tls.*`.
const TLS: TlsInstance = TlsInstance {
    key: "gateway.tls",
    env: "FLOODGATE_GATEWAY_TLS",
    flag: "tls",
    listener: "the listener",
    envoy: None,
};

/// The listener's protections: `gateway.limits.*`.
const PROTECTIONS: ProtectionsInstance = ProtectionsInstance {
    key: "gateway.limits",
    env: "FLOODGATE_GATEWAY_",
    flag: "gateway-",
    max_concurrent_streams: "256",
    http2_idle_timeout: "10s",
};

type S = table::Setting<Draft>;

fn path(v: &table::Value) -> Result<PathBuf, String> {
    let t = v.text();
    if t.trim().is_empty() {
        return Err("expected a file path".into());
    }
    Ok(PathBuf::from(t.trim()))
}

impl Declared for Draft {
    fn table() -> &'static [S] {
        static TABLE: LazyLock<Vec<S>> = LazyLock::new(declare);
        &TABLE
    }

    /// `gateway.upstream: URL` is `gateway.upstream.url: URL`.
    const SHORTHANDS: &'static [(&'static str, &'static str)] =
        &[("gateway.upstream", "gateway.upstream.url")];

    fn blank() -> Self {
        let config = GatewayConfig {
            listen: SocketAddr::new(ANY, 0),
            tls: None,
            upstream: UpstreamConfig::default(),
            limits: ListenerLimits::default(),
            forwarding: Forwarding::default(),
            access_log: false,
            proxy_protocol: Vec::new(),
        };
        Draft {
            config,
            tls: TlsSettings::default(),
        }
    }
}

const UPSTREAM: &[(&str, &str)] = &[("gateway.upstream.url", "http://127.0.0.1:9")];

// One setting in a few lines each: tables, laid out by hand, one per topic.
fn declare() -> Vec<S> {
    let mut t = listener();
    t.extend(upstream());
    t.extend(upstream_tls());
    listener::declare_tls::<_, Draft>(&mut t, &TLS);
    t.extend(limits());
    listener::declare_protections::<_, Draft>(&mut t, &PROTECTIONS);
    listener::declare_max_connections::<_, Draft>(&mut t, &PROTECTIONS);
    t.extend(forwarding());
    // Every setting but the upstream needs one to apply.
    for s in t.iter_mut().filter(|s| s.key != "gateway.upstream.url") {
        s.context = UPSTREAM;
    }
    t
}

/// The listener and its log.
#[rustfmt::skip]
fn listener() -> Vec<S> {
    vec![
        S::new("gateway.listen", "FLOODGATE_GATEWAY_LISTEN", "listen", Kind::Addr, "0.0.0.0:8000",
            "the client-facing listener (`host:port`, `:port` or a port on all interfaces)",
            |s, v| {
                s.config.listen = parse_listen_on(&v.text(), ANY)?
                    .ok_or("the gateway needs a listen address")?;
                Ok(())
            }),
        S::new("gateway.access_log", "FLOODGATE_ACCESS_LOG", "access-log", Kind::Bool, "false",
            "one log line per request",
            |s, v| { s.config.access_log = boolean(&v.text())?; Ok(()) }),
        S::new("gateway.proxy_protocol", "FLOODGATE_GATEWAY_PROXY_PROTOCOL", "gateway-proxy-protocol", Kind::List, "",
            "load balancers (addresses or networks) whose connections start with a PROXY protocol header (v1 or v2), whose source is then the client address; a header from any other peer closes its connection; `[]`: no header is read",
            |s, v| { s.config.proxy_protocol = networks(v)?; Ok(()) })
            .samples("10.0.0.0/8", "192.0.2.1,2001:db8::/32"),
    ]
}

/// Addresses or networks (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.1`),
/// as items or comma-separated.
fn networks(v: &table::Value) -> Result<Vec<(IpAddr, u8)>, String> {
    let mut list = Vec::new();
    for item in v.items() {
        for n in item.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let net = parse_cidr(n).ok_or_else(|| {
                format!("`{n}` is not an address or network (e.g. 10.0.0.0/8, 2001:db8::/32)")
            })?;
            list.push(net);
        }
    }
    Ok(list)
}

/// Where requests go and how.
#[rustfmt::skip]
fn upstream() -> Vec<S> {
    vec![
        S::new("gateway.upstream.url", "FLOODGATE_UPSTREAM", "upstream", Kind::List, "",
            "upstream base URLs, used in turn (`http://host:port[/prefix]` or `https://`; `gateway.upstream: URL` for one); required",
            |s, v| {
                let mut urls = Vec::new();
                for item in v.items() {
                    for u in item.split(',').filter(|u| !u.trim().is_empty()) {
                        urls.push(UpstreamUrl::parse(u)?);
                    }
                }
                if urls.is_empty() {
                    return Err("at least one upstream URL is needed".into());
                }
                s.config.upstream.urls = urls;
                Ok(())
            })
            .samples("http://a:1", "http://b:2/api"),
        S::new("gateway.upstream.protocol", "FLOODGATE_UPSTREAM_PROTOCOL", "upstream-protocol", Kind::Choice, "http1",
            "`http1` or `http2` (h2c for `http://`, ALPN for `https://`)",
            |s, v| {
                s.config.upstream.protocol = choice(&v.text(), &[
                    (&["http1", "http/1.1", "HTTP/1.1"], UpstreamProtocol::Http1),
                    (&["http2", "h2c", "http/2", "HTTP/2"], UpstreamProtocol::Http2),
                ])?;
                Ok(())
            })
            .samples("http2", "http1"),
        S::new("gateway.upstream.connect_timeout", "FLOODGATE_UPSTREAM_CONNECT_TIMEOUT", "upstream-connect-timeout", Kind::Duration, "5s",
            "longest time to connect (and complete TLS); beyond: 504",
            |s, v| { s.config.upstream.connect_timeout = positive_duration(&v.text())?; Ok(()) }),
        S::new("gateway.upstream.response_timeout", "FLOODGATE_UPSTREAM_RESPONSE_TIMEOUT", "upstream-response-timeout", Kind::Duration, "60s",
            "longest wait for the response head, and longest pause of either body; beyond: 504",
            |s, v| { s.config.upstream.response_timeout = positive_duration(&v.text())?; Ok(()) }),
        S::new("gateway.upstream.pool_idle_timeout", "FLOODGATE_UPSTREAM_POOL_IDLE_TIMEOUT", "upstream-pool-idle-timeout", Kind::Duration, "90s",
            "idle pooled connections are closed after this long",
            |s, v| { s.config.upstream.pool_idle_timeout = positive_duration(&v.text())?; Ok(()) }),
        S::new("gateway.upstream.pool_max_idle", "FLOODGATE_UPSTREAM_POOL_MAX_IDLE", "upstream-pool-max-idle", Kind::Count, "1024",
            "idle connections kept per upstream address",
            |s, v| { s.config.upstream.pool_max_idle = count_in(&v.text(), 0, 1 << 20)?; Ok(()) }),
        S::new("gateway.upstream.host", "FLOODGATE_UPSTREAM_HOST", "upstream-host", Kind::Choice, "preserve",
            "the `Host` sent: the client's (`preserve`) or the upstream URL's (`upstream`)",
            |s, v| {
                s.config.upstream.host = choice(&v.text(), &[
                    (&["preserve"], HostHeader::Preserve),
                    (&["upstream"], HostHeader::Upstream),
                ])?;
                Ok(())
            })
            .samples("upstream", "preserve"),
    ]
}

/// TLS towards `https://` upstreams.
#[rustfmt::skip]
fn upstream_tls() -> Vec<S> {
    vec![
        S::new("gateway.upstream.tls.ca", "FLOODGATE_UPSTREAM_TLS_CA", "upstream-tls-ca", Kind::Text, "",
            "`https://` upstreams: PEM file of the trusted authorities (default: the system's roots)",
            |s, v| { s.config.upstream.tls.ca = Some(path(v)?); Ok(()) }),
        S::new("gateway.upstream.tls.cert", "FLOODGATE_UPSTREAM_TLS_CERT", "upstream-tls-cert", Kind::Text, "",
            "`https://` upstreams: PEM client certificate (with `key`)",
            |s, v| { s.config.upstream.tls.cert = Some(path(v)?); Ok(()) }),
        S::new("gateway.upstream.tls.key", "FLOODGATE_UPSTREAM_TLS_KEY", "upstream-tls-key", Kind::Text, "",
            "`https://` upstreams: the client certificate's PEM key",
            |s, v| { s.config.upstream.tls.key = Some(path(v)?); Ok(()) }),
    ]
}

/// What a request's body may be.
#[rustfmt::skip]
fn limits() -> Vec<S> {
    vec![
        S::new("gateway.limits.body_read_timeout", "FLOODGATE_GATEWAY_BODY_READ_TIMEOUT", "gateway-body-read-timeout", Kind::Duration, "60s",
            "longest pause in a request body while it is forwarded (beyond: 408)",
            |s, v| { s.config.limits.body_read_timeout = positive_duration(&v.text())?; Ok(()) }),
        S::new("gateway.limits.max_body_bytes", "FLOODGATE_GATEWAY_MAX_BODY_BYTES", "gateway-max-body-bytes", Kind::Size, "0",
            "largest request body (beyond: 413, before any of it reaches the upstream; `0`: no limit)",
            |s, v| {
                s.config.limits.max_body_bytes = match parse_size(&v.text()) {
                    Some(0) => None,
                    Some(n) => Some(n as u64),
                    None => {
                        return Err(format!(
                            "expected a size such as 10MiB (0: no limit), found `{}`",
                            v.text()
                        ));
                    }
                };
                Ok(())
            }),
    ]
}

/// What of a request's protocol goes through.
#[rustfmt::skip]
fn forwarding() -> Vec<S> {
    vec![
        S::new("gateway.upgrades", "FLOODGATE_GATEWAY_UPGRADES", "gateway-upgrades", Kind::List, "websocket",
            "protocols a client may upgrade a connection to (`Upgrade`); any other is dropped from the request, which goes on as a plain one; `h2c` is never allowed; `[]`: none",
            |s, v| { s.config.forwarding.upgrades = upgrade_list(v)?; Ok(()) })
            .samples("websocket", "websocket,x-custom/1"),
        S::new("gateway.encoded_slashes", "FLOODGATE_GATEWAY_ENCODED_SLASHES", "gateway-encoded-slashes", Kind::Choice, "refuse",
            "`%2F`, `%5C` or `\\` in a request path: refused with 400 (`refuse`) or kept as data in its segment (`keep`)",
            |s, v| {
                s.config.forwarding.encoded_slashes = choice(&v.text(), &[
                    (&["refuse"], EncodedSlashes::Refuse),
                    (&["keep"], EncodedSlashes::Keep),
                ])?;
                Ok(())
            })
            .samples("keep", "refuse"),
    ]
}

/// The protocols of `gateway.upgrades`: tokens, lower-cased; `h2c` is
/// refused (an upgraded connection carries requests the limiter never
/// sees).
fn upgrade_list(v: &table::Value) -> Result<Vec<String>, String> {
    let mut list = Vec::new();
    for item in v.items() {
        for p in item.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let p = p.to_ascii_lowercase();
            if p == "h2c" || p.starts_with("h2c/") {
                return Err(
                    "`h2c` is never forwarded: an upgraded HTTP/2 connection would carry \
                            requests the limiter never sees (clients fall back to HTTP/1.1, or \
                            speak HTTP/2 to the gateway directly)"
                        .into(),
                );
            }
            if http::HeaderValue::from_str(&p).is_err() || p.contains([' ', '"', ';']) {
                return Err(format!("`{p}` is not a protocol name (e.g. `websocket`)"));
            }
            list.push(p);
        }
    }
    Ok(list)
}

impl GatewayConfig {
    /// Reads the gateway's settings from `flags`, `env` and the `gateway:`
    /// section of `documents`. `Ok(None)` when none of them configures a
    /// gateway (no section, no upstream given).
    pub fn resolve(
        flags: &Flags,
        env: &Env<'_>,
        documents: &[Document],
    ) -> Result<Option<GatewayConfig>, ConfigErrors> {
        let mut errors = Errors::default();
        let Some((draft, origins)) = table::read::<Draft>(flags, env, documents, &[], &mut errors)
        else {
            return errors.finish(None);
        };
        let section = origins.section(SECTION).cloned();
        if section.is_none() && !Draft::table().iter().any(|s| origins.given(s.key)) {
            return errors.finish(None);
        }
        if !origins.given("gateway.upstream.url") {
            let at = section.unwrap_or_else(|| Origin::Default.at());
            errors.push(ConfigError::new(at, "missing required key 'upstream'"));
        }
        let config = finish(draft, &origins, &mut errors);
        errors.finish(Some(config))
    }

    /// Reads the `gateway:` section of `documents` (no flags, no
    /// environment). `Ok(None)` when no file has one.
    pub fn from_documents(documents: &[Document]) -> Result<Option<GatewayConfig>, ConfigErrors> {
        GatewayConfig::resolve(&Flags::new(), &Env::new(&|_| None), documents)
    }
}

impl Default for GatewayConfig {
    /// Every setting at its declared default (and no upstream).
    fn default() -> Self {
        Draft::defaults().config
    }
}

/// The TLS files resolved and checked (each problem where its setting was
/// given).
fn finish(draft: Draft, origins: &Origins, errors: &mut Errors) -> GatewayConfig {
    let Draft {
        mut config,
        mut tls,
    } = draft;
    listener::finish_tls(&mut tls, &TLS, origins, errors);
    config.tls = tls.files();
    let up = &mut config.upstream.tls;
    if let Some(ca) = &up.ca {
        let o = origins.of("gateway.upstream.tls.ca");
        let ca = relative_to_origin(ca, &o);
        if let Err(e) = certificates(&ca) {
            errors.push(o.error(e.to_string()));
        }
        up.ca = Some(ca);
    }
    let half = "a client certificate needs both 'cert' and 'key'";
    let client = pair(
        (up.cert.take(), up.key.take()),
        ["gateway.upstream.tls.cert", "gateway.upstream.tls.key"],
        half,
        origins,
        errors,
    );
    (up.cert, up.key) = client.unzip();
    config
}

/// A client certificate and its key (settings `keys`), given both or
/// neither (else the error `half` for the one given), resolved and read.
fn pair(
    files: (Option<PathBuf>, Option<PathBuf>),
    keys: [&str; 2],
    half: &str,
    origins: &Origins,
    errors: &mut Errors,
) -> Option<(PathBuf, PathBuf)> {
    let (co, ko) = (origins.of(keys[0]), origins.of(keys[1]));
    match files {
        (Some(cert), Some(key)) => {
            let (cert, key) = (
                relative_to_origin(&cert, &co),
                relative_to_origin(&key, &ko),
            );
            if let Err(e) = certificates(&cert) {
                errors.push(co.error(e.to_string()));
            } else if let Err(e) = private_key(&key) {
                errors.push(ko.error(e.to_string()));
            }
            Some((cert, key))
        }
        (Some(_), None) => {
            errors.push(co.error(half));
            None
        }
        (None, Some(_)) => {
            errors.push(ko.error(half));
            None
        }
        (None, None) => None,
    }
}
