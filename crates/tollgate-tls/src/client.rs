//! [`ClientTlsFiles`] and [`TlsConnector`]: TLS towards a server (the CA it must chain to, an optional client certificate, the name to check).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::error::TlsError;
use crate::pem;
use crate::provider::provider;

/// A client's TLS stream over TCP.
pub type ClientTlsStream = TlsStream<TcpStream>;

/// What a client's TLS is built from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// The CA bundle the server's certificate must chain to (`None`: the system's trust store).
    pub ca: Option<PathBuf>,
    /// The client certificate chain to present (mutual TLS); needs `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub key: Option<PathBuf>,
    /// The name sent as SNI and checked against the server's certificate
    /// (`None`: the host the client connects to).
    pub server_name: Option<String>,
}

impl ClientTlsFiles {
    /// Reads the files and builds a connector offering `alpn` (in order of preference).
    pub fn connector(&self, alpn: &[&[u8]]) -> Result<TlsConnector, TlsError> {
        let config = self.client_config(alpn)?;
        let server_name = self
            .server_name
            .as_ref()
            .map(|name| {
                ServerName::try_from(name.clone())
                    .map_err(|_| TlsError::BadName { name: name.clone() })
            })
            .transpose()?;
        Ok(TlsConnector {
            inner: tokio_rustls::TlsConnector::from(config),
            server_name,
        })
    }

    /// Reads the files and builds the rustls client configuration offering
    /// `alpn`, for a client that makes its own connections (an HTTPS pool);
    /// `server_name` is then the caller's to use.
    pub fn client_config(&self, alpn: &[&[u8]]) -> Result<Arc<ClientConfig>, TlsError> {
        let roots = match &self.ca {
            Some(ca) => pem::roots(ca)?,
            None => Arc::new(system_roots()),
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_root_certificates(roots);
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(pem::certificates(cert)?, pem::private_key(key)?)
                .map_err(TlsError::Config)?,
            (None, None) => builder.with_no_client_auth(),
            (Some(_), None) => {
                return Err(TlsError::Incomplete {
                    missing: "the client certificate's key",
                });
            }
            (None, Some(_)) => {
                return Err(TlsError::Incomplete {
                    missing: "the client certificate for the key",
                });
            }
        };
        config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// The system's trust store; certificates it cannot parse are skipped (and logged).
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "cannot read part of the system's trust store");
    }
    let mut roots = RootCertStore::empty();
    let (_added, skipped) = roots.add_parsable_certificates(found.certs);
    if skipped > 0 {
        tracing::debug!(skipped, "system CA certificates rustls cannot use");
    }
    roots
}

/// Connects TLS over a TCP stream with one client configuration; cheap to clone.
#[derive(Clone)]
pub struct TlsConnector {
    inner: tokio_rustls::TlsConnector,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl TlsConnector {
    /// Connects to `host:port` over TCP (with `TCP_NODELAY`) and completes the handshake.
    pub async fn connect_to(&self, host: &str, port: u16) -> io::Result<TlsStream<TcpStream>> {
        let tcp =
            TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port)).await?;
        tcp.set_nodelay(true)?;
        self.connect(host, tcp).await
    }

    /// Completes the handshake over `tcp` with a server reached as `host` (the configured server name wins).
    pub async fn connect(&self, host: &str, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                ServerName::try_from(host.to_owned()).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{host:?} is not a valid TLS server name"),
                    )
                })?
            }
        };
        self.inner.connect(name, tcp).await
    }
}
