//! Protocol upgrades (`Connection: Upgrade`, WebSocket): an HTTP/1.1
//! request asking for one is limited like any other, forwarded with its
//! `Connection: upgrade` and `Upgrade` fields, and when the upstream
//! answers `101 Switching Protocols` the two connections become one
//! bidirectional byte stream until either side closes.

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
pub fn requested(version: Version, removed: Option<HeaderValue>) -> Option<HeaderValue> {
    removed.filter(|_| version == Version::HTTP_11)
}

/// Puts back the two fields an upgrade travels with (after the hop-by-hop
/// fields were removed).
pub fn restore(headers: &mut HeaderMap, upgrade: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, upgrade);
}

/// Joins the client's upgraded connection, once handed over, and the
/// upstream's (`upstream`, whose read buffer holds what the upstream sent
/// after its `101`), and copies bytes both ways until either side closes;
/// the client connection's place under the cap, `slot`, is held until then.
pub fn spawn_tunnel(client: OnUpgrade, upstream: Conn, slot: Option<Arc<Slot>>) {
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
            requested(version, strip_hop_by_hop(&mut h, None))
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
}
