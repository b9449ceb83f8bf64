//! Mutual TLS for the test kit's xDS server: a rustls server configuration from PEM files, and the TLS connections tonic serves.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

/// A server configuration with `cert` and `key`, offering `h2`, that requires a client certificate `client_ca` signed.
pub fn server_config(cert: &Path, key: &Path, client_ca: &Path) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(client_ca).expect("the client CA is read") {
        roots
            .add(ca.expect("a CA certificate"))
            .expect("the client CA is usable");
    }
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
            .build()
            .expect("a client certificate verifier");
    let chain = CertificateDer::pem_file_iter(cert)
        .expect("the certificate is read")
        .collect::<Result<Vec<_>, _>>()
        .expect("PEM certificates");
    let key = PrivateKeyDer::from_pem_file(key).expect("the key is read");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("the certificate and key match");
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// The connections of `listener` that complete a TLS handshake with
/// `config`, for tonic; the task that accepts them (abort it to close the port).
pub fn incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> (ReceiverStream<io::Result<TlsConnection>>, JoinHandle<()>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let (connections, incoming) = mpsc::channel(16);
    let accepting = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                // A failed handshake is the client's problem: it sees it.
                if let Ok(stream) = acceptor.accept(tcp).await {
                    let _ = connections.send(Ok(TlsConnection(stream))).await;
                }
            });
        }
    });
    (ReceiverStream::new(incoming), accepting)
}

/// One TLS connection, as tonic serves it.
pub struct TlsConnection(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for TlsConnection {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
