//! The connections an accept loop has open: each asked to finish on the shutdown, or once it is older than a maximum age, and a drain that waits for them.
//!
//! A long-lived client (Envoy keeps its gRPC connections to the rate limit
//! service for hours) stays on the replica it first reached: after a
//! scale-out the new replicas get nothing. A [`ConnectionAge`] asks each
//! connection to go away once it is older than `max_age` (plus a jitter of
//! up to a tenth, so connections made together do not all leave together):
//! HTTP/2 sends GOAWAY, the client opens a new connection (to whichever
//! replica the balancer picks) for its next calls, and the calls in flight
//! finish. After `grace` more, a connection still open is closed.
//!
//! hyper-util's `GracefulShutdown` can only ask every connection at once,
//! so [`OpenConnections`] keeps the stop itself: each connection's task
//! waits on the connection, the stop and its age, whichever comes first.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use rand::Rng;
use tokio::sync::watch;

use crate::connection_limit::Slot;

/// How long a connection may live: asked to go away after `max_age` (plus up to a tenth), closed `grace` later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionAge {
    /// The age after which the connection is asked to go away (HTTP/2 GOAWAY).
    pub max_age: Duration,
    /// How long its calls in flight then have to finish before it is closed.
    pub grace: Duration,
}

impl ConnectionAge {
    /// `max_age` plus a uniform jitter of up to a tenth of it.
    fn jittered(&self) -> Duration {
        let tenth = self.max_age / 10;
        self.max_age + tenth.mul_f64(rand::rng().random::<f64>())
    }
}

/// The open connections of one accept loop (see the module docs).
#[derive(Debug)]
pub struct OpenConnections {
    stop: watch::Sender<bool>,
    /// Held by every connection's task: the drain waits for the count to fall to one.
    open: Arc<()>,
    /// Woken by every task that ends.
    ended: Arc<tokio::sync::Notify>,
}

impl Default for OpenConnections {
    fn default() -> Self {
        OpenConnections::new()
    }
}

impl OpenConnections {
    /// No connection yet.
    pub fn new() -> Self {
        OpenConnections {
            stop: watch::Sender::new(false),
            open: Arc::new(()),
            ended: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The connections open now.
    pub fn count(&self) -> usize {
        Arc::strong_count(&self.open) - 1
    }

    /// The task that runs `connection` to its end: asked to finish at the
    /// stop or at its age (`None`: no age), holding `slot` of a connection
    /// limit until then. Spawn it.
    pub fn serve<C>(
        &self,
        connection: C,
        age: Option<ConnectionAge>,
        slot: Option<Slot>,
        server: &'static str,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        C: GracefulConnection + Send + 'static,
        C::Error: Display + Send,
    {
        let mut stop = self.stop.subscribe();
        let open = Arc::clone(&self.open);
        let ended = Arc::clone(&self.ended);
        async move {
            let mut connection = std::pin::pin!(connection);
            let aged = async {
                match age {
                    Some(age) => tokio::time::sleep(age.jittered()).await,
                    None => std::future::pending().await,
                }
            };
            let stopped = async {
                // An error means the sender is gone: the loop has ended, so stop too.
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = stopped => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
                () = aged => {
                    let grace = age.map_or(Duration::ZERO, |a| a.grace);
                    tracing::debug!(server, ?grace, "connection reached its maximum age; asked to go away");
                    connection.as_mut().graceful_shutdown();
                    match tokio::time::timeout(grace, connection.as_mut()).await {
                        Ok(result) => result,
                        Err(_) => {
                            tracing::debug!(server, "connection still open after its grace; closed");
                            Ok(())
                        }
                    }
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, server, "connection ended with an error");
            }
            drop(slot);
            drop(open);
            ended.notify_waiters();
        }
    }

    /// Asks every open connection to finish the requests it has begun and
    /// take no new ones, and waits until all have closed.
    pub(crate) async fn stop_and_wait(&self) {
        self.stop.send_replace(true);
        loop {
            let ended = self.ended.notified();
            if self.count() == 0 {
                return;
            }
            ended.await;
        }
    }
}
