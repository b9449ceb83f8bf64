//! The authority front as an IO type: hyper reads the client's bytes through it, and writes go straight to the socket.
//!
//! While the [`Inbound`] direction is deciding or rewriting, reads go
//! through a small input buffer (whole frames only) and an output buffer
//! that hyper drains. Once it passes through and those buffers are empty,
//! the front drops them and every read is the socket's own read: a
//! connection that needs no rewrite pays one branch per read after its
//! first header block. Writes (server to client) are never touched,
//! vectored writes included.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::inbound::{Inbound, InboundLimits, Mode};

/// How many bytes one read from the socket takes while the front is deciding or rewriting.
const READ_CHUNK: usize = 8 * 1024;

/// The buffers of a connection the front still looks into.
struct Framed {
    /// The client-to-server direction's state.
    inbound: Inbound,
    /// Bytes read but not yet a whole frame.
    input: BytesMut,
    /// Bytes ready for hyper.
    output: BytesMut,
    /// Whether the socket has reached its end.
    eof: bool,
}

/// An HTTP/2 server connection's socket, with `:authority` values that h2 would refuse made acceptable (see the [module](super)).
pub struct AuthorityFront<T> {
    /// The socket.
    inner: T,
    /// `None` once the connection passes through and nothing is buffered.
    framed: Option<Box<Framed>>,
}

impl<T> AuthorityFront<T> {
    /// Wraps a newly accepted connection, held to `limits`.
    pub fn new(inner: T, limits: InboundLimits) -> AuthorityFront<T> {
        AuthorityFront {
            inner,
            framed: Some(Box::new(Framed {
                inbound: Inbound::new(limits),
                input: BytesMut::new(),
                output: BytesMut::new(),
                eof: false,
            })),
        }
    }

    /// What the front does with this connection now.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.framed
            .as_ref()
            .map_or(Mode::PassingThrough, |framed| framed.inbound.mode())
    }

    /// Whether reads go straight to the socket (nothing is decided, held or buffered any more).
    #[must_use]
    pub fn is_direct(&self) -> bool {
        self.framed.is_none()
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityFront<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(framed) = this.framed.as_mut() else {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        };
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if !framed.output.is_empty() {
                let n = framed.output.len().min(buf.remaining());
                buf.put_slice(&framed.output[..n]);
                framed.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            if framed.inbound.mode() == Mode::PassingThrough {
                this.framed = None;
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if framed.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                framed.eof = true;
                framed.inbound.finish(&mut framed.input, &mut framed.output);
                continue;
            }
            framed.input.extend_from_slice(read.filled());
            framed
                .inbound
                .process(&mut framed.input, &mut framed.output)?;
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityFront<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
