//! Protocol upgrades (`Connection: Upgrade`, WebSocket): an HTTP/1.1
//! request asking for one is limited like any other, forwarded with its
//! `Connection: upgrade` and `Upgrade` fields, and when the upstream
//! answers `101 Switching Protocols` the two connections become one
//! bidirectional byte stream until either side closes.
//!
//! Only the protocols of `gateway.upgrades` (WebSocket by default) are
//! offered to the upstream: a tunnel carries what the limiter never
//! sees, so `h2c` (a tunnel of unlimited HTTP/2 requests) is never
//! allowed. A request asking for no allowed protocol goes on as a plain
//! request, as a server that ignores `Upgrade` answers it (RFC 9110
//! §7.8): clients that offer `h2c` opportunistically get their answer
//! over HTTP/1.1.

use std::sync::Arc;

use floodgate_runtime::listener::Slot;
use http::header::{CONNECTION, UPGRADE};
use http::{HeaderMap, HeaderValue, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

use crate::h1::Conn;

/// The `Upgrade` of a request asking for an upgrade, from what stripping
/// its hop-by-hop fields removed (see
/// [`strip_hop_by_hop`](crate::forward::strip_hop_by_hop)): over
/// HTTP/1.1 only.
pub(crate) fn requested(version: Version, removed: Option<HeaderValue>) -> Option<HeaderValue> {
    removed.filter(|_| version == Version::HTTP_11)
}

/// The protocols of `asked` (an `Upgrade` value) that `allowed` lists
/// (by name, any case; `websocket` allows `websocket/13`), in the
/// client's order: `asked` itself when they all are, none when none is.
pub(crate) fn allowed(asked: HeaderValue, allowed: &[String]) -> Option<HeaderValue> {
    let text = asked.to_str().ok()?;
    let ok = |p: &&str| {
        let name = p.split('/').next().unwrap_or(p).trim();
        allowed.iter().any(|a| name.eq_ignore_ascii_case(a))
    };
    let offered = || text.split(',').map(str::trim).filter(|p| !p.is_empty());
    if offered().all(|p| ok(&p)) {
        return offered().next().is_some().then_some(asked);
    }
    // Rare: a list some of which is refused, written anew.
    let kept: Vec<&str> = offered().filter(ok).collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join(", ")).ok()
}

/// Puts back the two fields an upgrade travels with (after the hop-by-hop
/// fields were removed).
pub(crate) fn restore(headers: &mut HeaderMap, upgrade: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, upgrade);
}

/// Joins the client's upgraded connection, once handed over, and the
/// upstream's (`upstream`, whose read buffer holds what the upstream sent
/// after its `101`), and copies bytes both ways until either side closes;
/// the client connection's place under the cap, `slot`, is held until then.
pub(crate) fn spawn_tunnel(client: OnUpgrade, upstream: Conn, slot: Option<Arc<Slot>>) {
    tokio::spawn(async move {
        let mut client = match client.await {
            Ok(c) => TokioIo::new(c),
            Err(e) => {
                tracing::debug!(error = %e, "upgrade failed");
                return;
            }
        };
        let Conn {
            mut stream, buf, ..
        } = upstream;
        let copied = match client.write_all(&buf).await {
            Ok(()) => tokio::io::copy_bidirectional(&mut client, &mut stream).await,
            Err(e) => Err(e),
        };
        match copied {
            Ok((up, down)) => tracing::debug!(up, down, "upgraded connection closed"),
            Err(e) => tracing::debug!(error = %e, "upgraded connection ended with an error"),
        }
        drop(slot);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::strip_hop_by_hop;
    use http::HeaderName;

    #[test]
    fn only_http11_with_connection_upgrade() {
        let asked = |version, fields: &[(HeaderName, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in fields {
                h.append(name, HeaderValue::from_static(value));
            }
            requested(version, strip_hop_by_hop(&mut h, None).upgrade)
        };
        let websocket = (UPGRADE, "websocket");
        assert_eq!(
            asked(Version::HTTP_11, std::slice::from_ref(&websocket)),
            None
        );
        let both = [websocket, (CONNECTION, "keep-alive, Upgrade")];
        assert_eq!(asked(Version::HTTP_11, &both).unwrap(), "websocket");
        assert_eq!(asked(Version::HTTP_2, &both), None);
        assert_eq!(asked(Version::HTTP_10, &both), None);
        assert_eq!(asked(Version::HTTP_11, &both[1..]), None);
    }

    #[test]
    fn only_allowed_protocols() {
        let list = ["websocket".to_owned()];
        let allow = |v: &'static str| allowed(HeaderValue::from_static(v), &list);
        assert_eq!(allow("websocket").unwrap(), "websocket");
        assert_eq!(allow("WebSocket/13").unwrap(), "WebSocket/13");
        assert_eq!(allow("h2c"), None);
        assert_eq!(allow("H2C, h2c"), None);
        assert_eq!(allow("h2c, websocket").unwrap(), "websocket");
        assert_eq!(allow(" , "), None);
        assert_eq!(allowed(HeaderValue::from_static("websocket"), &[]), None);
    }
}
