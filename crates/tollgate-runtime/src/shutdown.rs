//! Graceful shutdown: one stop shared by every server of a process, and the drain that waits for connections in flight.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::open_connections::OpenConnections;
use crate::task::AbortOnDrop;

/// A stop that several servers share: [`trigger`](Self::trigger) once and every [`stopped`](Self::stopped) completes.
#[derive(Clone, Debug)]
pub struct Shutdown {
    sender: Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A shutdown not yet triggered.
    pub fn new() -> Self {
        let (sender, _) = watch::channel(false);
        Shutdown {
            sender: Arc::new(sender),
        }
    }

    /// Starts the shutdown; later calls change nothing.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    /// Whether the shutdown has started.
    pub fn is_triggered(&self) -> bool {
        *self.sender.borrow()
    }

    /// Completes once the shutdown has started (at once if it already has).
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut receiver = self.sender.subscribe();
        async move {
            let _ = receiver.wait_for(|stopped| *stopped).await;
        }
    }

    /// Triggers this shutdown when `signal` completes (for instance [`crate::shutdown_signal`]), calling `then` first; until the guard is dropped.
    ///
    /// `then` runs before any server sees the stop: a readiness flag it
    /// clears turns 503 before the listeners close.
    pub fn trigger_on<S, F>(&self, signal: S, then: F) -> AbortOnDrop
    where
        S: Future<Output = ()> + Send + 'static,
        F: FnOnce() + Send + 'static,
    {
        self.trigger_after(signal, then, Duration::ZERO)
    }

    /// Like [`trigger_on`](Self::trigger_on), but the servers see the stop
    /// `delay` after `then` ran: the drain delay of a server behind a load
    /// balancer.
    ///
    /// `then` (which fails readiness) runs as soon as `signal` completes;
    /// until `delay` has passed the listeners keep accepting, so clients that
    /// have not yet heard of the failed readiness (Kubernetes updating its
    /// endpoints) are still served. Then every [`stopped`](Self::stopped)
    /// completes and the servers stop accepting and drain.
    pub fn trigger_after<S, F>(&self, signal: S, then: F, delay: Duration) -> AbortOnDrop
    where
        S: Future<Output = ()> + Send + 'static,
        F: FnOnce() + Send + 'static,
    {
        let shutdown = self.clone();
        AbortOnDrop::new([tokio::spawn(async move {
            signal.await;
            then();
            if !delay.is_zero() {
                tracing::info!(
                    ?delay,
                    "readiness failed; closing the listeners after the drain delay"
                );
                tokio::time::sleep(delay).await;
            }
            shutdown.trigger();
        })])
    }
}

/// How a [`drain`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished its work and closed.
    Complete,
    /// The timeout passed with connections still open; they are left to the runtime's end.
    TimedOut,
}

/// Asks every connection of `connections` to finish and waits for them, for at most `timeout` (`None`: as long as they take).
///
/// A connection finishes the requests it has begun and takes no new ones.
pub async fn drain(connections: &OpenConnections, timeout: Option<Duration>) -> Drained {
    let open = connections.count();
    let finished = connections.stop_and_wait();
    match timeout {
        None => {
            finished.await;
            Drained::Complete
        }
        Some(timeout) => match tokio::time::timeout(timeout, finished).await {
            Ok(()) => Drained::Complete,
            Err(_) => {
                tracing::warn!(
                    ?timeout,
                    open,
                    "connections still open after the drain timeout"
                );
                Drained::TimedOut
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Lets every spawned task run until it waits again (paused time does not move).
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_fails_at_the_signal_and_the_stop_comes_after_the_delay() {
        let (send, receive) = tokio::sync::oneshot::channel::<()>();
        let ready = Arc::new(AtomicBool::new(true));
        let shutdown = Shutdown::new();
        let _guard = {
            let ready = Arc::clone(&ready);
            shutdown.trigger_after(
                async move {
                    let _ = receive.await;
                },
                move || ready.store(false, Ordering::Release),
                Duration::from_secs(5),
            )
        };
        settle().await;
        assert!(ready.load(Ordering::Acquire) && !shutdown.is_triggered());

        send.send(()).expect("the task waits for the signal");
        settle().await;
        assert!(
            !ready.load(Ordering::Acquire),
            "readiness fails at the signal"
        );
        assert!(!shutdown.is_triggered(), "the listeners stay open");

        tokio::time::advance(Duration::from_millis(4_999)).await;
        settle().await;
        assert!(!shutdown.is_triggered(), "still within the drain delay");
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert!(
            shutdown.is_triggered(),
            "the stop comes once the delay has passed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_delay_the_stop_comes_with_the_signal() {
        let shutdown = Shutdown::new();
        let _guard = shutdown.trigger_on(std::future::ready(()), || {});
        settle().await;
        assert!(shutdown.is_triggered());
    }
}
