//! [`ServerTlsFiles`]: the files a listener's TLS is built from, and building a rustls `ServerConfig` from them.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use crate::error::TlsError;
use crate::pem;
use crate::provider::provider;
use crate::san::SanAllowList;

/// A listener's certificate and key, and for mutual TLS the CA bundle and the allowed client names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The PEM certificate chain the listener presents (leaf first).
    pub cert: PathBuf,
    /// The PEM private key of the leaf certificate.
    pub key: PathBuf,
    /// With a CA bundle, every client must present a certificate chaining
    /// to it (mutual TLS); without, no client certificate is asked for.
    pub client_ca: Option<PathBuf>,
    /// When not empty, a client certificate must also name one of these
    /// (DNS names or IP addresses among its subject alternative names).
    pub client_sans: Vec<String>,
}

impl ServerTlsFiles {
    /// Every file this configuration reads (what a watcher watches).
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.cert.clone(), self.key.clone()];
        paths.extend(self.client_ca.clone());
        paths
    }

    /// Reads the files and builds a server configuration offering `alpn` (in order of preference).
    pub fn server_config(&self, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
        let certificates = pem::certificates(&self.cert)?;
        let key = pem::private_key(&self.key)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?;
        let builder = match self.client_verifier()? {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certificates, key)
            .map_err(TlsError::Config)?;
        config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        Ok(Arc::new(config))
    }

    /// The client-certificate verifier mutual TLS asks for, if it is on.
    fn client_verifier(&self) -> Result<Option<Arc<dyn ClientCertVerifier>>, TlsError> {
        let Some(ca) = &self.client_ca else {
            if self.client_sans.is_empty() {
                return Ok(None);
            }
            return Err(TlsError::Incomplete {
                missing: "a client CA bundle for the client SAN allow-list",
            });
        };
        let chain = WebPkiClientVerifier::builder_with_provider(pem::roots(ca)?, provider())
            .build()
            .map_err(|error| TlsError::Verifier(error.to_string()))?;
        if self.client_sans.is_empty() {
            return Ok(Some(chain));
        }
        Ok(Some(Arc::new(SanAllowList::new(chain, &self.client_sans)?)))
    }
}
