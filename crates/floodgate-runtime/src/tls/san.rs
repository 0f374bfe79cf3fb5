//! A client certificate's subject alternative name, required on top of
//! its authority (envoyproxy/ratelimit's `GRPC_CLIENT_TLS_SAN`): the
//! certificate must be valid for that name as a server's is for its host
//! name — a DNS name (a wildcard certificate matching it included, any
//! case) or an IP address, the common name ignored (Go's
//! `x509.VerifyOptions.DNSName`, which envoyproxy/ratelimit checks).

use std::sync::Arc;

use rustls::client::verify_server_name;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The name `text`, as a client certificate's SAN is checked against (a
/// DNS name or an IP address).
pub fn client_san(text: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(text.trim().to_owned())
        .map_err(|_| format!("`{text}` is neither a DNS name nor an IP address"))
}

/// A client verifier that requires, besides `inner`'s checks, a client
/// certificate valid for `san`.
#[derive(Debug)]
pub(super) struct RequireSan {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub san: ServerName<'static>,
}

impl ClientCertVerifier for RequireSan {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        verify_server_name(&ParsedCertificate::try_from(end_entity)?, &self.san)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_for(names: &[&str]) -> CertificateDer<'static> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(names).unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    fn valid(cert: &CertificateDer<'_>, san: &str) -> bool {
        let parsed = ParsedCertificate::try_from(cert).unwrap();
        verify_server_name(&parsed, &client_san(san).unwrap()).is_ok()
    }

    /// As Go's host name check: exact DNS names in any case, wildcards,
    /// IP addresses against IP SANs only.
    #[test]
    fn the_san_is_checked_as_a_host_name() {
        let cert = cert_for(&["client.example.com", "*.pods.example.com", "10.0.0.7"]);
        assert!(valid(&cert, "client.example.com"));
        assert!(valid(&cert, "CLIENT.example.com"));
        assert!(valid(&cert, "a.pods.example.com"));
        assert!(valid(&cert, "10.0.0.7"));
        assert!(!valid(&cert, "other.example.com"));
        assert!(!valid(&cert, "a.b.pods.example.com"));
        assert!(!valid(&cert, "10.0.0.8"));
        assert!(client_san("not a name").is_err());
    }
}
