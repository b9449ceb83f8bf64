//! The accept loop: accept TCP connections, serve each on its own task, and on shutdown stop accepting and drain.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::net::TcpListener;
use tollgate_tls::{ServerStream, TlsAcceptor};

use crate::connection_limit::{ConnectionLimit, FreeSlot};
use crate::open_connections::{ConnectionAge, OpenConnections};
use crate::shutdown::{Drained, drain};

/// The pause after a failed `accept`, so a full file table does not spin a core.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// At most one "connection limit reached" line per listener in this long.
pub const LIMIT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What an accept loop is called in its logs, how long it drains and how many connections it keeps open.
#[derive(Clone, Debug)]
pub struct AcceptOptions {
    /// The server's name in log lines (`gRPC`, `proxy`, ...).
    pub name: &'static str,
    /// How long the connections may take to finish once the shutdown starts (`None`: as long as they take).
    pub drain_timeout: Option<Duration>,
    /// The most connections open at once (`None`: no limit). While it is
    /// reached the loop accepts nothing, so new clients wait in the listen
    /// backlog until a connection closes.
    pub connection_limit: Option<Arc<ConnectionLimit>>,
    /// TLS on every accepted connection (`None`: plain TCP). The handshake
    /// runs on the connection's own task when hyper first reads or writes,
    /// bounded by the acceptor's handshake timeout.
    pub tls: Option<TlsAcceptor>,
    /// Each connection asked to go away once older than this (plus jitter) and closed after its grace (`None`: they live as long as their clients keep them).
    pub max_connection_age: Option<ConnectionAge>,
}

/// Accepts on `listener` until `shutdown` completes, serving each connection that `connect` makes; then stops accepting and drains.
///
/// Each accepted stream gets `TCP_NODELAY` and is handed to `connect` with
/// its peer's address, as a [`ServerStream`] (TLS when the options say so); the hyper connection it returns runs on its own
/// task. An error accepting a connection (such as running out of file
/// descriptors) is logged and retried after a short pause; it does not stop
/// the loop. With a [`ConnectionLimit`], the loop takes a slot before each
/// accept and the connection holds it until it closes; when none is free it
/// logs a warning (at most once per [`LIMIT_LOG_INTERVAL`]) and waits, and
/// the kernel holds new clients in the listen backlog. Once `shutdown`
/// completes the listener is closed, so new connections are refused, and
/// every connection finishes the requests it has begun (see [`drain`]).
pub async fn serve_connections<S, M, C>(
    listener: TcpListener,
    shutdown: S,
    options: AcceptOptions,
    mut connect: M,
) -> Drained
where
    S: Future<Output = ()>,
    M: FnMut(ServerStream, SocketAddr) -> C,
    C: GracefulConnection + Send + 'static,
    C::Error: Display + Send,
{
    let server = options.name;
    let connections = OpenConnections::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut last_limit_log: Option<tokio::time::Instant> = None;
    loop {
        let slot = match &options.connection_limit {
            None => None,
            Some(limit) => match limit.try_slot() {
                Some(slot) => Some(slot),
                None => {
                    log_limit_reached(server, limit, &mut last_limit_log);
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        slot = limit.slot() => slot,
                    }
                }
            },
        };
        let (stream, peer) = tokio::select! {
            // A stop that has come wins over a connection waiting to be accepted.
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, server, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, server, "cannot set TCP_NODELAY");
        }
        let stream = match &options.tls {
            Some(tls) => tls.stream(stream),
            None => ServerStream::plain(stream),
        };
        let connection = connect(stream, peer);
        let slot = slot.map(FreeSlot::opened);
        tokio::spawn(connections.serve(connection, options.max_connection_age, slot, server));
    }
    drop(listener);
    drain(&connections, options.drain_timeout).await
}

/// Warns that `limit` is reached, unless it was said less than [`LIMIT_LOG_INTERVAL`] ago.
fn log_limit_reached(
    server: &'static str,
    limit: &ConnectionLimit,
    last: &mut Option<tokio::time::Instant>,
) {
    #[expect(
        clippy::disallowed_methods,
        reason = "spaces out a log line; no decision reads it"
    )]
    let now = tokio::time::Instant::now();
    if last.is_some_and(|at| now.duration_since(at) < LIMIT_LOG_INTERVAL) {
        return;
    }
    *last = Some(now);
    tracing::warn!(
        server,
        max_connections = limit.max(),
        "connection limit reached; new connections wait in the listen backlog until one closes"
    );
}
