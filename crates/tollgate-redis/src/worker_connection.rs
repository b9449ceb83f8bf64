//! A connection to a single Redis node for each worker thread: a worker's calls go out and come back on its own thread.
//!
//! `tollgate serve` with several workers runs one current-thread runtime per
//! worker. A `ConnectionManager` is driven by a task on the runtime that
//! opened it, so a check made on another worker's runtime would cross to
//! that task's thread and back (two wake-ups across threads a check). With
//! [`RedisStore::with_connection_per_worker`](crate::RedisStore::with_connection_per_worker),
//! a call made on a current-thread runtime other than the one the store
//! connected on uses a connection of that runtime's own, opened on its
//! first call (lazily, with the store's reconnect and backoff settings) and
//! kept for the life of the thread. Connections to Redis per instance: one,
//! plus one per worker that has made a call.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use redis::Client;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::runtime::{Handle, Id, RuntimeFlavor};

/// What a worker needs to open its own connection to the store's node.
pub(crate) struct WorkerConnections {
    client: Client,
    config: ConnectionManagerConfig,
    /// The runtime the store connected on: its calls use the store's own connection.
    home: Option<Id>,
    /// Connections opened for workers so far.
    opened: AtomicUsize,
}

thread_local! {
    /// This thread's connections: the store they belong to, the runtime that drives them.
    static OPEN: RefCell<Vec<(Weak<WorkerConnections>, Id, ConnectionManager)>> =
        const { RefCell::new(Vec::new()) };
}

impl WorkerConnections {
    /// For a store connected to `client`'s node on the current runtime.
    pub(crate) fn new(client: Client, config: ConnectionManagerConfig) -> Self {
        WorkerConnections {
            client,
            config,
            home: Handle::try_current().ok().map(|h| h.id()),
            opened: AtomicUsize::new(0),
        }
    }

    /// The connection of the current-thread runtime this call runs on, if
    /// that is not the store's own runtime (opened now on its first call);
    /// `None` on the store's runtime, on a multi-thread one or outside any.
    pub(crate) fn here(self: &Arc<Self>) -> Option<ConnectionManager> {
        let handle = Handle::try_current().ok()?;
        if handle.runtime_flavor() != RuntimeFlavor::CurrentThread {
            return None;
        }
        let runtime = handle.id();
        if Some(runtime) == self.home {
            return None;
        }
        OPEN.with_borrow_mut(|open| {
            let mine = Arc::as_ptr(self);
            if let Some((_, _, connection)) = open
                .iter()
                .find(|(store, r, _)| *r == runtime && std::ptr::eq(store.as_ptr(), mine))
            {
                return Some(connection.clone());
            }
            // Forget the connections of stores dropped or of a runtime this thread no longer runs.
            open.retain(|(store, r, _)| store.strong_count() > 0 && *r == runtime);
            let connection =
                ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
                    .ok()?;
            let n = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(
                worker_connections = n,
                "a worker opened its own connection to Redis"
            );
            open.push((Arc::downgrade(self), runtime, connection.clone()));
            Some(connection)
        })
    }

    /// Connections opened for workers so far.
    pub(crate) fn opened(&self) -> usize {
        self.opened.load(Ordering::Relaxed)
    }
}
