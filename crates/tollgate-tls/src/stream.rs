//! [`ServerStream`]: an accepted connection, plain or TLS, that completes its TLS handshake on first use.
//!
//! The accept loop hands a stream to hyper as soon as the TCP connection is
//! accepted; the handshake then runs on the connection's own task, the
//! first time hyper reads or writes, so a slow client never holds up the
//! loop. A handshake that fails or takes longer than its timeout ends the
//! connection with an I/O error (logged at debug by the accept loop).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Timeout;
use tokio_rustls::Accept;
use tokio_rustls::server::TlsStream;

/// An accepted connection: plain TCP, or TLS (handshaking, then up).
pub struct ServerStream {
    state: State,
    peer: PeerNames,
}

/// The DNS names among the subject alternative names of the client
/// certificate a connection presented, known once its TLS handshake is
/// done: what a request handler names the caller by (for a log). Empty for
/// a plain connection or one without a client certificate.
#[derive(Clone, Debug, Default)]
pub struct PeerNames(Arc<OnceLock<Vec<String>>>);

impl PeerNames {
    /// The names, once the handshake is done (`None` before, or on a plain connection).
    pub fn get(&self) -> Option<&[String]> {
        self.0.get().map(Vec::as_slice)
    }
}

/// The DNS names of the end-entity certificate `der`.
fn dns_names(der: &CertificateDer<'_>) -> Vec<String> {
    webpki::EndEntityCert::try_from(der)
        .map(|cert| cert.valid_dns_names().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Where a stream is.
enum State {
    /// No TLS on this listener.
    Plain(TcpStream),
    /// The TLS handshake is under way.
    Handshaking(Pin<Box<Timeout<Accept<TcpStream>>>>),
    /// The handshake is done.
    Tls(Box<TlsStream<TcpStream>>),
    /// The handshake failed; every read or write fails.
    Failed,
}

impl ServerStream {
    /// A plain TCP stream.
    pub fn plain(tcp: TcpStream) -> Self {
        ServerStream {
            state: State::Plain(tcp),
            peer: PeerNames::default(),
        }
    }

    /// A stream whose TLS handshake `accept` completes within `timeout` when first used.
    pub(crate) fn handshaking(accept: Accept<TcpStream>, timeout: Duration) -> Self {
        ServerStream {
            state: State::Handshaking(Box::pin(tokio::time::timeout(timeout, accept))),
            peer: PeerNames::default(),
        }
    }

    /// The names of the client certificate, filled in when the handshake completes.
    pub fn peer_names(&self) -> PeerNames {
        self.peer.clone()
    }

    /// Whether the stream is TLS.
    pub fn is_tls(&self) -> bool {
        !matches!(self.state, State::Plain(_))
    }

    /// `Ready(Ok)` once the stream can carry data: at once on a plain or
    /// established stream (every read and write asks, so this part is
    /// inlined), else [`ServerStream::drive_handshake`].
    #[inline]
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.state {
            State::Plain(_) | State::Tls(_) => Poll::Ready(Ok(())),
            State::Handshaking(_) | State::Failed => self.drive_handshake(cx),
        }
    }

    /// Drives the handshake, if one is under way; `Ready(Ok)` once the stream can carry data.
    fn drive_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let State::Handshaking(handshake) = &mut self.state {
            let outcome = ready!(handshake.as_mut().poll(cx));
            match outcome {
                Ok(Ok(tls)) => {
                    let names = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(<[_]>::first)
                        .map(dns_names)
                        .unwrap_or_default();
                    let _ = self.peer.0.set(names);
                    self.state = State::Tls(Box::new(tls));
                }
                Ok(Err(error)) => {
                    self.state = State::Failed;
                    return Poll::Ready(Err(io::Error::new(
                        error.kind(),
                        format!("TLS handshake failed: {error}"),
                    )));
                }
                Err(_elapsed) => {
                    self.state = State::Failed;
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "TLS handshake timed out",
                    )));
                }
            }
        }
        match self.state {
            State::Failed => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the TLS handshake failed",
            ))),
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_handshake(cx))?;
        match &mut this.state {
            State::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            State::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
            State::Handshaking(_) | State::Failed => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_handshake(cx))?;
        match &mut this.state {
            State::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            State::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
            State::Handshaking(_) | State::Failed => Poll::Ready(Ok(0)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_handshake(cx))?;
        match &mut this.state {
            State::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            State::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
            State::Handshaking(_) | State::Failed => Poll::Ready(Ok(0)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.state {
            State::Plain(tcp) => tcp.is_write_vectored(),
            State::Tls(tls) => tls.is_write_vectored(),
            State::Handshaking(_) | State::Failed => true,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match &mut this.state {
            State::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            State::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
            State::Handshaking(_) | State::Failed => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match &mut this.state {
            State::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            State::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
            State::Handshaking(_) | State::Failed => Poll::Ready(Ok(())),
        }
    }
}
