//! The accept loop: accept TCP connections, serve each on its own task, and on shutdown stop accepting and drain.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown};
use tokio::net::{TcpListener, TcpStream};

use crate::shutdown::{Drained, drain};

/// The pause after a failed `accept`, so a full file table does not spin a core.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What an accept loop is called in its logs and how long it drains.
#[derive(Clone, Copy, Debug)]
pub struct AcceptOptions {
    /// The server's name in log lines (`gRPC`, `proxy`, ...).
    pub name: &'static str,
    /// How long the connections may take to finish once the shutdown starts (`None`: as long as they take).
    pub drain_timeout: Option<Duration>,
}

/// Accepts on `listener` until `shutdown` completes, serving each connection that `connect` makes; then stops accepting and drains.
///
/// Each accepted stream gets `TCP_NODELAY` and is handed to `connect` with
/// its peer's address; the hyper connection it returns runs on its own
/// task. An error accepting a connection (such as running out of file
/// descriptors) is logged and retried after a short pause; it does not stop
/// the loop. Once `shutdown` completes the listener is closed, so new
/// connections are refused, and every connection finishes the requests it
/// has begun (see [`drain`]).
pub async fn serve_connections<S, M, C>(
    listener: TcpListener,
    shutdown: S,
    options: AcceptOptions,
    mut connect: M,
) -> Drained
where
    S: Future<Output = ()>,
    M: FnMut(TcpStream, SocketAddr) -> C,
    C: GracefulConnection + Send + 'static,
    C::Error: Display,
{
    let server = options.name;
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
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
        let connection = connections.watch(connect(stream, peer));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, server, "connection ended with an error");
            }
        });
    }
    drop(listener);
    drain(connections, options.drain_timeout).await
}
