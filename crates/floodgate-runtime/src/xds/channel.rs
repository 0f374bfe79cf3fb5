//! The connection to the xDS server: plaintext or TLS (mTLS with a client
//! certificate), each attempt bounded by the connect retry interval.

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::settings::XdsSettings;

/// The endpoint `settings` name, TLS configured: a bad URL or an
/// unreadable certificate is an error at startup.
pub(crate) fn endpoint(settings: &XdsSettings) -> Result<Endpoint, String> {
    let scheme = if settings.tls { "https" } else { "http" };
    let url = if settings.server.contains("://") {
        settings.server.clone()
    } else {
        format!("{scheme}://{}", settings.server)
    };
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| format!("xDS server `{url}`: {e}"))?
        .connect_timeout(settings.connect_retry_interval)
        .tcp_nodelay(true);
    if !settings.tls {
        return Ok(endpoint);
    }
    endpoint
        .tls_config(tls(settings)?)
        .map_err(|e| format!("xDS server TLS: {e}"))
}

/// The client's TLS: the CA the server is verified with (required: no
/// system roots are read), the client certificate if given (mTLS), the
/// name to verify if given.
fn tls(settings: &XdsSettings) -> Result<ClientTlsConfig, String> {
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("xDS {what} `{path}`: {e}"))
    };
    if settings.tls_ca.is_empty() {
        return Err("xDS over TLS needs the server's CA (CONFIG_GRPC_XDS_SERVER_TLS_CACERT, FLOODGATE_XDS_TLS_CA)".into());
    }
    let mut tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read("CA", &settings.tls_ca)?));
    match (settings.tls_cert.is_empty(), settings.tls_key.is_empty()) {
        (true, true) => {}
        (false, false) => {
            let cert = read("client certificate", &settings.tls_cert)?;
            let key = read("client key", &settings.tls_key)?;
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        _ => return Err("xDS mTLS needs both the client certificate and its key".into()),
    }
    if !settings.tls_san.is_empty() {
        tls = tls.domain_name(settings.tls_san.clone());
    }
    Ok(tls)
}
