//! Reading the TLS settings of the `gateway:` section (`gateway.tls` for
//! the listener, `gateway.upstream.tls` for `https://` upstreams). The
//! files are loaded and checked as they are read, so `floodgate config
//! check` reports a missing file, a malformed PEM or a key that does not
//! match its certificate, at the setting's line. Relative paths are
//! relative to the directory of the file that names them.

use std::path::{Path, PathBuf};

use floodgate_policy::error::Errors;
use floodgate_policy::yaml::{Map, Node};

use crate::config::{ListenerTls, UpstreamTls};
use crate::tls::pem::{certificates, private_key};
use crate::tls::server::load_certified_key;

const LISTENER_KEYS: &[&str] = &["cert", "key"];
const UPSTREAM_KEYS: &[&str] = &["ca", "cert", "key"];

fn resolve(node: Node<'_>, text: &str) -> PathBuf {
    let p = Path::new(text);
    if p.is_absolute() {
        return p.to_owned();
    }
    let at = node.at();
    match Path::new(&*at.file).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p),
        _ => p.to_owned(),
    }
}

/// A path setting `key` of `map`, with its node (for errors).
fn path_of<'a>(map: &Map<'a>, key: &str, errors: &mut Errors) -> Option<(PathBuf, Node<'a>)> {
    let n = map.get(key)?;
    let text = errors.take(n.str())?;
    if text.trim().is_empty() {
        errors.push(n.error(format!("{key}: expected a file path")));
        return None;
    }
    Some((resolve(n, text.trim()), n))
}

/// Reads `gateway.tls`: `{cert: FILE, key: FILE}`, both required and
/// loaded.
pub fn read_listener_tls(node: Node<'_>, errors: &mut Errors) -> Option<ListenerTls> {
    let map = errors.take(node.map())?;
    let cert = path_of(&map, "cert", errors);
    let key = path_of(&map, "key", errors);
    for e in map.deny_unknown(LISTENER_KEYS) {
        errors.push(e);
    }
    let (Some((cert, cert_node)), Some((key, key_node))) = (cert, key) else {
        for k in LISTENER_KEYS {
            if !map.has(k) {
                errors.push(node.error(format!("missing required key '{k}'")));
            }
        }
        return None;
    };
    let tls = ListenerTls { cert, key };
    if let Err(e) = certificates(&tls.cert) {
        errors.push(cert_node.error(e.to_string()));
    } else if let Err(e) = private_key(&tls.key) {
        errors.push(key_node.error(e.to_string()));
    } else if let Err(e) = load_certified_key(&tls) {
        errors.push(key_node.error(e.to_string()));
    }
    Some(tls)
}

/// Reads `gateway.upstream.tls`: `{ca: FILE, cert: FILE, key: FILE}`, all
/// optional (`cert` and `key` together), each loaded.
pub fn read_upstream_tls(node: Node<'_>, errors: &mut Errors) -> UpstreamTls {
    let mut tls = UpstreamTls::default();
    let Some(map) = errors.take(node.map()) else {
        return tls;
    };
    if let Some((ca, n)) = path_of(&map, "ca", errors) {
        if let Err(e) = certificates(&ca) {
            errors.push(n.error(e.to_string()));
        }
        tls.ca = Some(ca);
    }
    let cert = path_of(&map, "cert", errors);
    let key = path_of(&map, "key", errors);
    for e in map.deny_unknown(UPSTREAM_KEYS) {
        errors.push(e);
    }
    match (cert, key) {
        (Some((cert, cn)), Some((key, kn))) => {
            if let Err(e) = certificates(&cert) {
                errors.push(cn.error(e.to_string()));
            } else if let Err(e) = private_key(&key) {
                errors.push(kn.error(e.to_string()));
            }
            tls.cert = Some(cert);
            tls.key = Some(key);
        }
        (None, None) => {}
        (Some((_, n)), None) | (None, Some((_, n))) => {
            errors.push(n.error("a client certificate needs both 'cert' and 'key'"));
        }
    }
    tls
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use floodgate_policy::error::ConfigErrors;
    use floodgate_policy::yaml::Document;

    use crate::config::GatewayConfig;

    fn read(dir: &std::path::Path, text: &str) -> Result<Option<GatewayConfig>, ConfigErrors> {
        let file = dir.join("g.yaml");
        let name: Arc<str> = Arc::from(file.to_str().unwrap());
        let doc = Document::parse(&name, text).unwrap();
        GatewayConfig::from_documents(&[doc])
    }

    fn pair(dir: &std::path::Path, name: &str) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }

    #[test]
    fn files_are_resolved_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        pair(dir.path(), "a");
        pair(dir.path(), "b");
        let c = read(
            dir.path(),
            "gateway:\n  tls: {cert: a.crt, key: a.key}\n  upstream:\n    url: https://x\n    tls: {ca: b.crt, cert: b.crt, key: b.key}\n",
        )
        .unwrap()
        .unwrap();
        let tls = c.tls.unwrap();
        assert_eq!(tls.cert, dir.path().join("a.crt"), "relative to the file");
        assert_eq!(c.upstream.tls.ca, Some(dir.path().join("b.crt")));
        assert!(c.upstream.urls[0].tls);

        let e = read(
            dir.path(),
            "gateway:\n  tls: {cert: a.crt, key: b.key, colour: red}\n  upstream:\n    url: https://x\n    tls: {ca: nowhere.pem, cert: a.crt}\n",
        )
        .unwrap_err()
        .to_string();
        for want in [
            "g.yaml:2:",
            "unknown key 'colour'",
            "a.crt with key",
            "nowhere.pem",
            "g.yaml:5:",
            "needs both 'cert' and 'key'",
        ] {
            assert!(e.contains(want), "{want} not in {e}");
        }
        let e = read(
            dir.path(),
            "gateway:\n  tls: {cert: a.crt}\n  upstream: http://x\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing required key 'key'"), "{e}");
    }
}
