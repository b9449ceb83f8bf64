//! [`IdleTimeout`]: ends a client connection once it has had no request in flight for a while (Envoy's `idle_timeout`), or a request in flight has moved no byte for a while (Envoy's `stream_idle_timeout`).
//!
//! A connection counts as busy from the moment a request reaches the
//! proxy until its response body has been sent ([`InFlight`] holds a
//! [`RequestGuard`] until then). Bytes the client sends while nothing is in
//! flight (a head dribbled one byte at a time, HTTP/2 pings, the start of an
//! HTTP/2 preface) do not make it busy, so a client that never completes a
//! request is cut off after the idle timeout whatever it sends. Before its
//! first request a connection gets the (usually shorter) first-request
//! timeout instead: the request-header timeout, on HTTP/2 as on HTTP/1,
//! so a client that connects and sends nothing is gone soon. The cut is
//! an end of input on the read side: hyper closes the connection as a
//! client would have.
//!
//! While a request is in flight, the stream idle timeout runs instead: it
//! starts again each time a byte is read from or written to the client, so
//! a client that reads its response (or sends its body) one byte every few
//! seconds, or not at all, is cut off once nothing has moved for that long.
//! The cut is an error on both sides of the IO, so hyper drops the
//! connection and its request at once. On HTTP/2 the streams of one
//! connection share it: any of them moving keeps them all.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::lazy_deadline::{LazyDeadline, deadline_after};

/// What one connection has in flight, shared by its IO and its requests.
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    started: AtomicUsize,
    reader: Mutex<Option<Waker>>,
}

impl Activity {
    /// A connection with nothing in flight.
    pub fn new() -> Arc<Self> {
        Arc::new(Activity::default())
    }

    /// Marks a request in flight until the guard is dropped.
    pub fn request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.fetch_add(1, Ordering::AcqRel);
        RequestGuard(Arc::clone(self))
    }

    /// Remembers the reader's waker, for the end of the last request in flight.
    fn park(&self, waker: &Waker) {
        let mut reader = self.reader.lock();
        if !reader.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *reader = Some(waker.clone());
        }
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }
}

/// One request in flight on a connection; dropping it may start the connection's idle time.
#[derive(Debug)]
pub struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(waker) = self.0.reader.lock().take()
        {
            // The reader may be parked with no timer running: let it start one.
            waker.wake();
        }
    }
}

pin_project! {
    /// A response body that keeps its request in flight until it has been sent (or dropped).
    pub struct InFlight<B> {
        #[pin]
        body: B,
        guard: RequestGuard,
    }
}

impl<B> InFlight<B> {
    /// `body`, keeping `guard` alive as long as it.
    pub fn new(body: B, guard: RequestGuard) -> Self {
        InFlight { body, guard }
    }
}

impl<B: Body<Data = Bytes>> Body for InFlight<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

pin_project! {
    /// A client connection's IO whose input ends once it has been idle for `timeout` (`first` before its first request).
    pub struct IdleTimeout<T> {
        #[pin]
        io: T,
        activity: Arc<Activity>,
        timeout: Option<Duration>,
        first: Option<Duration>,
        stream_timeout: Option<Duration>,
        idle: LazyDeadline,
        stalled: LazyDeadline,
        seen: usize,
        expired: bool,
        stream_expired: bool,
    }
}

impl<T> IdleTimeout<T> {
    /// `io`, whose input ends after `timeout` (`None`: never) with nothing in flight in `activity`, or after `first` (`None`: `timeout`) if no request has come yet.
    pub fn new(
        io: T,
        activity: Arc<Activity>,
        timeout: Option<Duration>,
        first: Option<Duration>,
    ) -> Self {
        IdleTimeout {
            io,
            activity,
            timeout,
            first,
            stream_timeout: None,
            idle: LazyDeadline::new(),
            stalled: LazyDeadline::new(),
            seen: 0,
            expired: false,
            stream_expired: false,
        }
    }

    /// This IO, also cut off once a request in flight has moved no byte for `timeout` (`None`: never).
    #[must_use]
    pub fn with_stream_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stream_timeout = timeout;
        self
    }
}

/// The error a connection's IO answers once a request in flight stalled past the stream idle timeout.
fn stream_timed_out(timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no byte moved for the stream idle timeout ({timeout:?})"),
    )
}

/// Whether a request in flight has moved no byte for the stream idle timeout:
/// polls (and starts) the timeout in `stalled`, registering `cx` to be woken
/// when it ends. False when there is no timeout or nothing is in flight.
fn stream_stalled(
    timeout: Option<Duration>,
    activity: &Activity,
    stalled: &mut LazyDeadline,
    cx: &mut Context<'_>,
) -> bool {
    let Some(timeout) = timeout else {
        return false;
    };
    if !activity.busy() {
        stalled.stop();
        return false;
    }
    if !stalled.is_running() {
        stalled.start(deadline_after(timeout));
    }
    if stalled.poll_expired(cx).is_ready() {
        tracing::debug!(
            ?timeout,
            "closing a client connection whose request stalled"
        );
        return true;
    }
    false
}

impl<T: AsyncRead> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        if *this.stream_expired {
            return Poll::Ready(Err(stream_timed_out(
                this.stream_timeout.unwrap_or_default(),
            )));
        }
        if *this.expired {
            return Poll::Ready(Ok(()));
        }
        if this.activity.busy() && this.stream_timeout.is_some() {
            let before = buf.filled().len();
            let read = this.io.poll_read(cx, buf);
            match &read {
                // A byte moved: the stream's idle time starts again.
                Poll::Ready(Ok(())) if buf.filled().len() > before => this.stalled.stop(),
                Poll::Ready(_) => {}
                Poll::Pending => {
                    if stream_stalled(*this.stream_timeout, this.activity, this.stalled, cx) {
                        *this.stream_expired = true;
                        return Poll::Ready(Err(stream_timed_out(
                            this.stream_timeout.unwrap_or_default(),
                        )));
                    }
                    this.activity.park(cx.waker());
                    if !this.activity.busy() {
                        cx.waker().wake_by_ref();
                    }
                }
            }
            return read;
        }
        this.stalled.stop();
        let started = this.activity.started.load(Ordering::Acquire);
        let limit = if started == 0 {
            this.first.or(*this.timeout)
        } else {
            *this.timeout
        };
        let Some(timeout) = limit else {
            return this.io.poll_read(cx, buf);
        };
        if started != *this.seen {
            // A request came (and maybe went) since the timer started: idle time starts again.
            *this.seen = started;
            this.idle.stop();
        }
        if this.activity.busy() {
            this.idle.stop();
            let read = this.io.poll_read(cx, buf);
            if read.is_pending() {
                // The last request's end wakes this read, to start the idle time.
                this.activity.park(cx.waker());
                if !this.activity.busy() {
                    // It ended before the waker was parked: look again at once.
                    cx.waker().wake_by_ref();
                }
            }
            return read;
        }
        if !this.idle.is_running() {
            this.idle.start(deadline_after(timeout));
        }
        match this.io.poll_read(cx, buf) {
            Poll::Ready(read) => Poll::Ready(read),
            Poll::Pending => {
                // A request may have begun since the check above; it keeps the connection.
                if this.idle.poll_expired(cx).is_ready() && !this.activity.busy() {
                    tracing::debug!(?timeout, "closing an idle client connection");
                    *this.expired = true;
                    return Poll::Ready(Ok(()));
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncWrite> IdleTimeout<T> {
    /// One write by `write`, as the stream idle timeout sees it: bytes
    /// written start its time again; a write that waits once the timer has
    /// run out cuts the connection, and so does any write after that.
    fn write_watched(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let timeout = *this.stream_timeout;
        if *this.stream_expired {
            return Poll::Ready(Err(stream_timed_out(timeout.unwrap_or_default())));
        }
        let written = write(this.io, cx);
        match &written {
            Poll::Ready(Ok(n)) if *n > 0 => this.stalled.stop(),
            Poll::Ready(_) => {}
            Poll::Pending => {
                if stream_stalled(timeout, this.activity, this.stalled, cx) {
                    *this.stream_expired = true;
                    return Poll::Ready(Err(stream_timed_out(timeout.unwrap_or_default())));
                }
            }
        }
        written
    }
}

impl<T: AsyncWrite> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_watched(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write_watched(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
