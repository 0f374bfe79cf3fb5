//! The settings every listener has, declared once and instantiated per
//! listener: its TLS ([`declare_tls`]: certificate, key, client CA) and
//! the protections of its connections ([`declare_protections`]: header
//! timeout and limits, HTTP/2 limits, send timeout; and
//! [`declare_max_connections`]: connections at once, where a listener
//! group has its own cap).
//!
//! An instance names where its settings are (file key, variable and flag
//! prefixes) and where they go in the structure read ([`TlsAt`],
//! [`ProtectionsAt`], [`ConnectionsAt`]); a setting added here is a setting
//! of every listener.

use std::path::{Path, PathBuf};

use floodgate_policy::error::Errors;

use super::parse::{count_in, header_bytes, positive_duration};
use super::table::{Envoy, Kind, Origin, Origins, Setting, Value};
use crate::listener::ConnectionLimits;
use crate::tls::pem::authorities;
use crate::tls::{ListenerTls, load_certified_key};

/// One listener's TLS as its settings give it, the files not yet checked
/// (`Default`: none, cleartext).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain (with `key`).
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// PEM bundle of the authorities a client certificate must come from
    /// (mTLS).
    pub client_ca: Option<PathBuf>,
    /// A name the client certificate must be valid for, besides its
    /// authority (where the listener declares it:
    /// [`declare_client_san`]).
    pub client_san: Option<String>,
}

impl TlsSettings {
    /// The listener's TLS files once checked ([`finish_tls`]); none:
    /// cleartext.
    pub fn files(&self) -> Option<ListenerTls> {
        Some(ListenerTls {
            cert: self.cert.clone()?,
            key: self.key.clone()?,
            client_ca: self.client_ca.clone(),
            client_san: self.client_san.clone(),
        })
    }
}

/// Where a settings structure `T` keeps one listener's TLS.
pub trait TlsAt<T>: 'static {
    /// The listener's TLS settings in `settings`.
    fn tls(settings: &mut T) -> &mut TlsSettings;
}

/// Where a settings structure `T` keeps one listener group's protections.
pub trait ProtectionsAt<T>: 'static {
    /// The protections of each connection.
    fn limits(settings: &mut T) -> &mut ConnectionLimits;
}

/// Where a settings structure `T` keeps the cap on one listener group's
/// connections.
pub trait ConnectionsAt<T>: 'static {
    /// Connections of each listener at once (`None`: as many as the open
    /// files limit leaves room for, up to
    /// [`DEFAULT_MAX_CONNECTIONS`](crate::listener::descriptors::DEFAULT_MAX_CONNECTIONS)).
    fn max_connections(settings: &mut T) -> &mut Option<usize>;
}

/// One listener's TLS settings: `{key}.cert`, `{env}_CERT`,
/// `--{flag}-cert`, and so on.
#[derive(Clone, Copy, Debug)]
pub struct TlsInstance {
    /// The file key of the group (`gateway.tls`).
    pub key: &'static str,
    /// The prefix of the variables (`FLOODGATE_GATEWAY_TLS`).
    pub env: &'static str,
    /// The prefix of the flags (`tls`).
    pub flag: &'static str,
    /// The listener, for the docs (`the gateway's listener`).
    pub listener: &'static str,
    /// envoyproxy/ratelimit's variables of the certificate, the key and
    /// the client CA, if it has them.
    pub envoy: Option<[Envoy; 3]>,
}

/// One listener group's protections: `{key}.header_read_timeout`,
/// `{env}HEADER_READ_TIMEOUT`, `--{flag}header-read-timeout`, ...
#[derive(Clone, Copy, Debug)]
pub struct ProtectionsInstance {
    /// The file key of the group (`server.limits`).
    pub key: &'static str,
    /// The prefix of the variables (`FLOODGATE_`).
    pub env: &'static str,
    /// The prefix of the flags (empty or `gateway-`).
    pub flag: &'static str,
    /// The default of `max_concurrent_streams`.
    pub max_concurrent_streams: &'static str,
    /// The default of `http2_idle_timeout`.
    pub http2_idle_timeout: &'static str,
}

/// Names and docs are made once per process (the tables are static).
fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

fn path(v: &Value) -> Result<PathBuf, String> {
    let t = v.text();
    if t.trim().is_empty() {
        return Err("expected a file path".into());
    }
    Ok(PathBuf::from(t.trim()))
}

type Set<T> = fn(&mut T, &Value) -> Result<(), String>;

/// Declares the TLS settings of the listener `at` into `t`.
pub fn declare_tls<T, A: TlsAt<T>>(t: &mut Vec<Setting<T>>, at: &TlsInstance) {
    let cert: Set<T> = |s, v| {
        A::tls(s).cert = Some(path(v)?);
        Ok(())
    };
    let key: Set<T> = |s, v| {
        A::tls(s).key = Some(path(v)?);
        Ok(())
    };
    let client_ca: Set<T> = |s, v| {
        A::tls(s).client_ca = Some(path(v)?);
        Ok(())
    };
    let l = at.listener;
    let docs = [
        format!("TLS on {l}: PEM certificate chain (with `key`)"),
        format!("TLS on {l}: its PEM private key"),
        format!(
            "TLS on {l}: PEM bundle of the authorities a client certificate must come from (mTLS: clients without one are refused)"
        ),
    ];
    let names = ["cert", "key", "client_ca"];
    for (i, (set, doc)) in [cert, key, client_ca].into_iter().zip(docs).enumerate() {
        let name = names[i];
        let key = leak(format!("{}.{name}", at.key));
        let env = leak(format!("{}_{}", at.env, name.to_ascii_uppercase()));
        let flag = leak(format!("{}-{}", at.flag, name.replace('_', "-")));
        let mut s = Setting::new(key, env, flag, Kind::Text, "", leak(doc), set);
        if let Some(envoy) = at.envoy {
            s = s.envoy(envoy[i]);
        }
        t.push(s);
    }
}

/// Declares the client certificate's required name on the listener
/// `at` (`{key}.client_san`, read from `envoy` too if given), for the
/// listeners that have it.
pub fn declare_client_san<T, A: TlsAt<T>>(
    t: &mut Vec<Setting<T>>,
    at: &TlsInstance,
    envoy: Option<Envoy>,
) {
    let set: Set<T> = |s, v| {
        crate::tls::san::client_san(&v.text())?;
        A::tls(s).client_san = Some(v.text().trim().to_owned());
        Ok(())
    };
    let doc = format!(
        "TLS on {}: a name (DNS name or IP address) the client certificate must be valid for, as a server's certificate is for its host name (a wildcard matches), besides coming from `client_ca` (which it needs)",
        at.listener
    );
    let key = leak(format!("{}.client_san", at.key));
    let env = leak(format!("{}_CLIENT_SAN", at.env));
    let flag = leak(format!("{}-client-san", at.flag));
    let mut s = Setting::new(key, env, flag, Kind::Text, "", leak(doc), set)
        .samples("client.example.com", "10.0.0.7");
    if let Some(envoy) = envoy {
        s = s.envoy(envoy);
    }
    t.push(s);
}

/// One protection: its name in the group, kind, default, doc and parser.
type Protection<T> = (&'static str, Kind, &'static str, &'static str, Set<T>);

/// Declares the connection protections of the listener group `at` into
/// `t`.
// One setting in a few lines each: a table, laid out by hand.
#[rustfmt::skip]
pub fn declare_protections<T, A: ProtectionsAt<T>>(
    t: &mut Vec<Setting<T>>,
    at: &ProtectionsInstance,
) {
    let group: [Protection<T>; 6] = [
        ("header_read_timeout", Kind::Duration, "10s",
            "time a client has for a request head or the HTTP/2 preface (and the TLS handshake); an idle keep-alive connection closes after it",
            |s, v| { A::limits(s).header_read_timeout = positive_duration(&v.text())?; Ok(()) }),
        ("max_header_bytes", Kind::Size, "64KiB",
            "largest request head (HTTP/1.1: 431 beyond; HTTP/2: the header list)",
            |s, v| { A::limits(s).max_header_bytes = header_bytes(&v.text())?; Ok(()) }),
        ("max_headers", Kind::Count, "100",
            "most header fields of an HTTP/1.1 request (431 beyond)",
            |s, v| { A::limits(s).max_headers = count_in(&v.text(), 1, 10_000)?; Ok(()) }),
        ("max_concurrent_streams", Kind::Count, at.max_concurrent_streams,
            "concurrent streams (calls) per HTTP/2 connection",
            |s, v| { A::limits(s).max_concurrent_streams = count_in(&v.text(), 1, 1 << 20)? as u32; Ok(()) }),
        ("http2_idle_timeout", Kind::Duration, at.http2_idle_timeout,
            "an HTTP/2 connection without a stream this long is closed",
            |s, v| { A::limits(s).http2_idle_timeout = positive_duration(&v.text())?; Ok(()) }),
        ("send_timeout", Kind::Duration, "60s",
            "longest a client may accept nothing sent to it (nginx's `send_timeout`): its connection is closed, or its HTTP/2 stream reset when its window stays shut",
            |s, v| { A::limits(s).send_timeout = positive_duration(&v.text())?; Ok(()) }),
    ];
    for (name, kind, default, doc, set) in group {
        t.push(protection(at, name, kind, default, doc, set));
    }
}

/// Declares the cap on the connections of each listener of the group `at`
/// into `t`.
// One setting in a few lines: laid out as the others.
#[rustfmt::skip]
pub fn declare_max_connections<T, A: ConnectionsAt<T>>(
    t: &mut Vec<Setting<T>>,
    at: &ProtectionsInstance,
) {
    t.push(protection(at, "max_connections", Kind::Count, "",
        "connections at once (beyond, those waiting longest for nothing are closed, else new ones wait in the backlog); empty: 10000, or what the open files limit (`ulimit -n`, raised to its hard limit) leaves room for; a value given beyond that room is lowered, with a warning",
        |s, v| { *A::max_connections(s) = Some(count_in(&v.text(), 1, 10_000_000)?); Ok(()) }));
}

/// The protection `name` of the group `at`.
fn protection<T>(
    at: &ProtectionsInstance,
    name: &'static str,
    kind: Kind,
    default: &'static str,
    doc: &'static str,
    set: Set<T>,
) -> Setting<T> {
    let key = leak(format!("{}.{name}", at.key));
    let env = leak(format!("{}{}", at.env, name.to_ascii_uppercase()));
    let flag = leak(format!("{}{}", at.flag, name.replace('_', "-")));
    Setting::new(key, env, flag, kind, default, doc, set)
}

/// A path as given: relative to the directory of the file that names it.
pub fn relative_to_origin(path: &Path, origin: &Origin) -> PathBuf {
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

/// Checks the TLS settings `tls` of the listener at `at.key`: the
/// certificate and key given both or neither, the files resolved (relative
/// to the file naming them), read and matched, the client CA read; each
/// problem added to `errors` where its setting was given. A half-given
/// pair is cleared.
pub fn finish_tls(tls: &mut TlsSettings, at: &TlsInstance, origins: &Origins, errors: &mut Errors) {
    let origin = |name: &str| origins.of(&format!("{}.{name}", at.key));
    let (co, ko, ao) = (origin("cert"), origin("key"), origin("client_ca"));
    if tls.client_san.is_some() && tls.client_ca.is_none() {
        let so = origin("client_san");
        errors.push(so.error("a client SAN needs the listener's 'client_ca' (mTLS)"));
    }
    for (file, o) in [
        (&mut tls.cert, &co),
        (&mut tls.key, &ko),
        (&mut tls.client_ca, &ao),
    ] {
        *file = file.as_deref().map(|f| relative_to_origin(f, o));
    }
    match (&tls.cert, &tls.key) {
        (Some(_), None) => errors.push(co.error("missing required key 'key'")),
        (None, Some(_)) => errors.push(ko.error("missing required key 'cert'")),
        _ => {}
    }
    if tls.cert.is_none() || tls.key.is_none() {
        if tls.client_ca.is_some() {
            errors.push(ao.error("a client CA needs the listener's 'cert' and 'key'"));
        }
        *tls = TlsSettings::default();
        return;
    }
    if let Some(files) = tls.files() {
        check_files(&files, [&co, &ko, &ao], errors);
    }
}

/// Reads the files of `files`, each problem where its setting was given.
fn check_files(files: &ListenerTls, origins: [&Origin; 3], errors: &mut Errors) {
    let [co, ko, ao] = origins;
    if let Err(e) = crate::tls::pem::certificates(&files.cert) {
        errors.push(co.error(e.to_string()));
    } else if let Err(e) = load_certified_key(files) {
        errors.push(ko.error(e.to_string()));
    }
    if let Some(Err(e)) = files.client_ca.as_deref().map(authorities) {
        errors.push(ao.error(e.to_string()));
    }
}
