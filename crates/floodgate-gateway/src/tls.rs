//! The rustls configuration towards `https://` upstreams: trusted roots
//! (a CA file, or the system's), an optional client certificate. ALPN is
//! set by the connector from the upstream protocol (`h2` for `http2`).
//! The listener's TLS is every listener's
//! ([`floodgate_runtime::tls`]).

use floodgate_runtime::tls::{ClientFiles, client_config as files_config};
use rustls::ClientConfig;

pub use floodgate_runtime::tls::TlsError;

use crate::config::UpstreamTls;

/// The client configuration for `tls` (TLS 1.2 and 1.3, no ALPN yet).
pub(crate) fn client_config(tls: &UpstreamTls) -> Result<ClientConfig, TlsError> {
    let files = ClientFiles {
        ca: tls.ca.as_deref(),
        cert: tls.cert.as_deref(),
        key: tls.key.as_deref(),
    };
    files_config(files, "gateway.upstream.tls.ca")
}
