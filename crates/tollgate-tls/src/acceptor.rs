//! [`TlsAcceptor`]: a listener's running TLS configuration, reloadable from its files, and the handshake's time bound.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use tokio::net::TcpStream;

use crate::error::TlsError;
use crate::server::ServerTlsFiles;
use crate::stream::ServerStream;

/// How long a client may take to complete the TLS handshake by default.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener's TLS: the files, the ALPN protocols offered, the running
/// configuration and the handshake timeout; cheap to clone (shared).
///
/// [`reload`](Self::reload) reads the files again and swaps the new
/// configuration in for the handshakes that start afterwards; connections
/// already up keep theirs. A file that does not build keeps the running
/// configuration.
#[derive(Clone)]
pub struct TlsAcceptor {
    inner: Arc<Inner>,
}

/// What every clone of an acceptor shares.
struct Inner {
    files: ServerTlsFiles,
    alpn: Vec<&'static [u8]>,
    config: ArcSwap<ServerConfig>,
    handshake_timeout: Duration,
}

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("files", &self.inner.files)
            .field("handshake_timeout", &self.inner.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl TlsAcceptor {
    /// Builds the configuration from `files`, offering `alpn`; a handshake not done within `handshake_timeout` fails.
    pub fn new(
        files: ServerTlsFiles,
        alpn: &[&'static [u8]],
        handshake_timeout: Duration,
    ) -> Result<Self, TlsError> {
        let config = files.server_config(alpn)?;
        Ok(TlsAcceptor {
            inner: Arc::new(Inner {
                files,
                alpn: alpn.to_vec(),
                config: ArcSwap::new(config),
                handshake_timeout,
            }),
        })
    }

    /// The files the configuration is read from.
    pub fn files(&self) -> &ServerTlsFiles {
        &self.inner.files
    }

    /// Reads the files again and, if they build, serves new handshakes with them; otherwise keeps the running configuration.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = self.inner.files.server_config(&self.inner.alpn)?;
        self.inner.config.store(config);
        Ok(())
    }

    /// [`reload`](Self::reload), logging the outcome for the listener called `listener`.
    pub fn reload_and_log(&self, listener: &str) {
        match self.reload() {
            Ok(()) => tracing::info!(
                listener,
                cert = %self.inner.files.cert.display(),
                "TLS certificate reloaded"
            ),
            Err(error) => tracing::warn!(
                listener,
                %error,
                "cannot reload the TLS certificate; keeping the running one"
            ),
        }
    }

    /// `tcp` as a stream that completes the handshake with the running configuration when first read or written.
    pub fn stream(&self, tcp: TcpStream) -> ServerStream {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.inner.config.load_full());
        ServerStream::handshaking(acceptor.accept(tcp), self.inner.handshake_timeout)
    }
}
