//! [`ConnectionLimit`]: at most N connections of one listener open at once, and how many are open now.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most `max` connections of a listener open at once; shared between the accept loop and whoever reports it (a gauge).
///
/// The accept loop takes one permit before it accepts a connection and the
/// connection's task holds it until the connection closes, so while `max`
/// connections are open the loop accepts nothing and new clients wait in
/// the kernel's listen backlog.
#[derive(Debug)]
pub struct ConnectionLimit {
    permits: Arc<Semaphore>,
    max: usize,
}

impl ConnectionLimit {
    /// A limit of `max` open connections (at least 1; tokio's semaphore caps it at `Semaphore::MAX_PERMITS`).
    pub fn new(max: usize) -> Arc<Self> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(ConnectionLimit {
            permits: Arc::new(Semaphore::new(max)),
            max,
        })
    }

    /// The most connections open at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    /// A slot for one more connection, if one is free now.
    pub(crate) fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).try_acquire_owned().ok()
    }

    /// A slot for one more connection, once one is free (`None` only if the semaphore were closed, which nothing does).
    pub(crate) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).acquire_owned().await.ok()
    }
}
