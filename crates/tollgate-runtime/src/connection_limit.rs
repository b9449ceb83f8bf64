//! [`ConnectionLimit`]: at most N connections of one listener open at once, and how many are open now.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most `max` connections of a listener open at once; shared between the accept loops of the listener and whoever reports it (a gauge).
///
/// An accept loop takes one slot before it accepts a connection and the
/// connection's task holds it until the connection closes, so while `max`
/// connections are open no loop accepts anything and new clients wait in
/// the kernel's listen backlog. Several loops (one per worker runtime) may
/// share one limit: the bound holds over all of them, and tokio's
/// semaphore works across runtimes.
#[derive(Debug)]
pub struct ConnectionLimit {
    permits: Arc<Semaphore>,
    max: usize,
    /// Connections accepted and not yet closed (a slot an accept loop holds
    /// while it waits for a client does not count).
    open: Arc<AtomicUsize>,
}

/// A slot an accept loop holds for the next connection it accepts.
#[derive(Debug)]
pub(crate) struct FreeSlot {
    permit: OwnedSemaphorePermit,
    open: Arc<AtomicUsize>,
}

impl FreeSlot {
    /// The slot of a connection just accepted: counted open until dropped.
    pub(crate) fn opened(self) -> Slot {
        self.open.fetch_add(1, Ordering::Relaxed);
        Slot {
            _permit: self.permit,
            open: self.open,
        }
    }
}

/// The slot of an open connection, held by its task: the connection counts in [`ConnectionLimit::open`] until it is dropped.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    open: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionLimit {
    /// A limit of `max` open connections (at least 1; tokio's semaphore caps it at `Semaphore::MAX_PERMITS`).
    pub fn new(max: usize) -> Arc<Self> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(ConnectionLimit {
            permits: Arc::new(Semaphore::new(max)),
            max,
            open: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The most connections open at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The connections open now (accepted and not yet closed).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A slot for one more connection, if one is free now.
    pub(crate) fn try_slot(&self) -> Option<FreeSlot> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        Some(self.free(permit))
    }

    /// A slot for one more connection, once one is free (`None` only if the semaphore were closed, which nothing does).
    pub(crate) async fn slot(&self) -> Option<FreeSlot> {
        let permit = Arc::clone(&self.permits).acquire_owned().await.ok()?;
        Some(self.free(permit))
    }

    fn free(&self, permit: OwnedSemaphorePermit) -> FreeSlot {
        FreeSlot {
            permit,
            open: Arc::clone(&self.open),
        }
    }
}
