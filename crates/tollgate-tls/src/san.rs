//! [`SanAllowList`]: a client-certificate verifier that also requires one of a list of names in the certificate.

use std::sync::Arc;

use rustls::client::verify_server_name;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

use crate::error::TlsError;

/// Verifies a client certificate with an inner verifier (the chain to the
/// CA bundle), then requires that it is valid for at least one of the
/// allowed names: a DNS name (a certificate's wildcard covers it, as for a
/// server name) or an IP address among its subject alternative names.
/// Like upstream's `GRPC_CLIENT_TLS_SAN`, but with a list.
#[derive(Debug)]
pub struct SanAllowList {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<ServerName<'static>>,
}

impl SanAllowList {
    /// `inner` plus the requirement that the certificate names one of `allowed`.
    pub fn new(inner: Arc<dyn ClientCertVerifier>, allowed: &[String]) -> Result<Self, TlsError> {
        let allowed = allowed
            .iter()
            .map(|name| {
                ServerName::try_from(name.clone())
                    .map_err(|_| TlsError::BadName { name: name.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SanAllowList { inner, allowed })
    }
}

impl ClientCertVerifier for SanAllowList {
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
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let parsed = ParsedCertificate::try_from(end_entity)?;
        if self
            .allowed
            .iter()
            .any(|name| verify_server_name(&parsed, name).is_ok())
        {
            Ok(verified)
        } else {
            Err(Error::General(
                "the client certificate names no subject alternative name of the allow-list".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
