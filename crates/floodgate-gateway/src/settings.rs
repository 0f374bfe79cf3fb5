//! The `gateway:` section's settings, declared once each (file key,
//! variable, flag, default, documentation) and read as every Floodgate
//! setting is: flags > environment > file > defaults
//! ([`table`](mod@floodgate_runtime::settings::table)). TLS files are loaded and
//! checked as they are read, so `floodgate config check` reports a missing
//! file, a malformed PEM or a key that does not match its certificate where
//! the setting was given; relative paths in a file are relative to its
//! directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use floodgate_policy::error::{ConfigError, ConfigErrors, Errors};
use floodgate_policy::yaml::Document;
use floodgate_runtime::settings::table::{self, Declared, Env, Flags, Kind, Origin, Origins};
use floodgate_runtime::settings::{
    ANY, boolean, choice, count_in, header_bytes, parse_listen_on, parse_size, positive_duration,
};

use crate::config::{
    EncodedSlashes, Forwarding, GatewayConfig, HostHeader, ListenerLimits, ListenerTls,
    UpstreamConfig, UpstreamProtocol, UpstreamUrl,
};
use crate::tls::pem::{certificates, private_key};
use crate::tls::server::load_certified_key;

/// The top-level key of the gateway's settings.
pub const SECTION: &str = "gateway";

/// What the settings of the section read into, before the files they name
/// are checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    config: GatewayConfig,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

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
        };
        Draft {
            config,
            tls_cert: None,
            tls_key: None,
        }
    }
}

const UPSTREAM: &[(&str, &str)] = &[("gateway.upstream.url", "http://127.0.0.1:9")];

// One setting in a few lines each: a table, laid out by hand.
#[rustfmt::skip]
fn declare() -> Vec<S> {
    let mut t = vec![
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
        S::new("gateway.tls.cert", "FLOODGATE_GATEWAY_TLS_CERT", "tls-cert", Kind::Text, "",
            "TLS on the listener: PEM certificate chain (with `key`)",
            |s, v| { s.tls_cert = Some(path(v)?); Ok(()) }),
        S::new("gateway.tls.key", "FLOODGATE_GATEWAY_TLS_KEY", "tls-key", Kind::Text, "",
            "TLS on the listener: its PEM private key",
            |s, v| { s.tls_key = Some(path(v)?); Ok(()) }),
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
        S::new("gateway.upstream.tls.ca", "FLOODGATE_UPSTREAM_TLS_CA", "upstream-tls-ca", Kind::Text, "",
            "`https://` upstreams: PEM file of the trusted authorities (default: the system's roots)",
            |s, v| { s.config.upstream.tls.ca = Some(path(v)?); Ok(()) }),
        S::new("gateway.upstream.tls.cert", "FLOODGATE_UPSTREAM_TLS_CERT", "upstream-tls-cert", Kind::Text, "",
            "`https://` upstreams: PEM client certificate (with `key`)",
            |s, v| { s.config.upstream.tls.cert = Some(path(v)?); Ok(()) }),
        S::new("gateway.upstream.tls.key", "FLOODGATE_UPSTREAM_TLS_KEY", "upstream-tls-key", Kind::Text, "",
            "`https://` upstreams: the client certificate's PEM key",
            |s, v| { s.config.upstream.tls.key = Some(path(v)?); Ok(()) }),
        S::new("gateway.limits.header_read_timeout", "FLOODGATE_GATEWAY_HEADER_READ_TIMEOUT", "gateway-header-read-timeout", Kind::Duration, "10s",
            "time a client has for a request head (or the HTTP/2 preface), and for an idle keep-alive connection",
            |s, v| { s.config.limits.connection.header_read_timeout = positive_duration(&v.text())?; Ok(()) }),
        S::new("gateway.limits.body_read_timeout", "FLOODGATE_GATEWAY_BODY_READ_TIMEOUT", "gateway-body-read-timeout", Kind::Duration, "60s",
            "longest pause in a request body while it is forwarded (beyond: 408)",
            |s, v| { s.config.limits.body_read_timeout = positive_duration(&v.text())?; Ok(()) }),
        S::new("gateway.limits.max_header_bytes", "FLOODGATE_GATEWAY_MAX_HEADER_BYTES", "gateway-max-header-bytes", Kind::Size, "64KiB",
            "largest request head (beyond: 431), from 1KiB to 16MiB",
            |s, v| { s.config.limits.connection.max_header_bytes = header_bytes(&v.text())?; Ok(()) }),
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
        S::new("gateway.limits.max_headers", "FLOODGATE_GATEWAY_MAX_HEADERS", "gateway-max-headers", Kind::Count, "100",
            "most header fields in an HTTP/1.1 request (beyond: 431)",
            |s, v| { s.config.limits.connection.max_headers = count_in(&v.text(), 1, 10_000)?; Ok(()) }),
        S::new("gateway.limits.max_connections", "FLOODGATE_GATEWAY_MAX_CONNECTIONS", "gateway-max-connections", Kind::Count, "10000",
            "open client connections at most (beyond, new ones wait in the kernel's backlog)",
            |s, v| { s.config.limits.max_connections = count_in(&v.text(), 1, 10_000_000)?; Ok(()) }),
        S::new("gateway.limits.max_concurrent_streams", "FLOODGATE_GATEWAY_MAX_CONCURRENT_STREAMS", "gateway-max-concurrent-streams", Kind::Count, "256",
            "concurrent streams per HTTP/2 connection",
            |s, v| { s.config.limits.connection.max_concurrent_streams = count_in(&v.text(), 1, 1 << 20)? as u32; Ok(()) }),
        S::new("gateway.limits.http2_idle_timeout", "FLOODGATE_GATEWAY_HTTP2_IDLE_TIMEOUT", "gateway-http2-idle-timeout", Kind::Duration, "10s",
            "an HTTP/2 connection without a stream this long is closed",
            |s, v| { s.config.limits.connection.http2_idle_timeout = positive_duration(&v.text())?; Ok(()) }),
        S::new("gateway.limits.send_timeout", "FLOODGATE_GATEWAY_SEND_TIMEOUT", "gateway-send-timeout", Kind::Duration, "60s",
            "longest a client may accept nothing sent to it (nginx's `send_timeout`): its connection is closed, or its HTTP/2 stream reset when its window stays shut",
            |s, v| { s.config.limits.connection.send_timeout = positive_duration(&v.text())?; Ok(()) }),
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
    ];
    // Every setting but the upstream needs one to apply.
    for s in t.iter_mut().filter(|s| s.key != "gateway.upstream.url") {
        s.context = UPSTREAM;
    }
    t
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
        let Some((draft, origins)) = table::read::<Draft>(flags, env, documents, &mut errors)
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

/// A path as given: relative to the directory of the file that names it.
fn relative_to_origin(path: &Path, origin: &Origin) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    match origin {
        Origin::File(at) => match Path::new(&*at.file).parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.join(path),
            _ => path.to_owned(),
        },
        _ => path.to_owned(),
    }
}

/// The TLS files resolved and checked (each problem where its setting was
/// given).
fn finish(draft: Draft, origins: &Origins, errors: &mut Errors) -> GatewayConfig {
    let Draft {
        mut config,
        tls_cert,
        tls_key,
    } = draft;
    config.tls = pair(
        (tls_cert, tls_key),
        ["gateway.tls.cert", "gateway.tls.key"],
        ["missing required key 'key'", "missing required key 'cert'"],
        |tls| load_certified_key(tls).map(drop),
        origins,
        errors,
    );
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
        [half, half],
        |_| Ok(()),
        origins,
        errors,
    );
    (up.cert, up.key) = client.map(|c| (c.cert, c.key)).unzip();
    config
}

/// A certificate and its key (settings `keys`), given both or neither
/// (else the error of `half` for the one given), resolved and read; when
/// both read, `check` tells whether they go together.
fn pair(
    files: (Option<PathBuf>, Option<PathBuf>),
    keys: [&str; 2],
    half: [&str; 2],
    check: impl Fn(&ListenerTls) -> Result<(), crate::tls::TlsError>,
    origins: &Origins,
    errors: &mut Errors,
) -> Option<ListenerTls> {
    let (co, ko) = (origins.of(keys[0]), origins.of(keys[1]));
    match files {
        (Some(cert), Some(key)) => {
            let pair = ListenerTls {
                cert: relative_to_origin(&cert, &co),
                key: relative_to_origin(&key, &ko),
            };
            if let Err(e) = certificates(&pair.cert) {
                errors.push(co.error(e.to_string()));
            } else if let Err(e) = private_key(&pair.key).map(drop).and_then(|()| check(&pair)) {
                errors.push(ko.error(e.to_string()));
            }
            Some(pair)
        }
        (Some(_), None) => {
            errors.push(co.error(half[0]));
            None
        }
        (None, Some(_)) => {
            errors.push(ko.error(half[1]));
            None
        }
        (None, None) => None,
    }
}
