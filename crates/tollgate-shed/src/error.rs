//! The error a shedding layer fails a request with.

use std::fmt;
use std::time::Duration;

use crate::priority::Priority;

/// A boxed error: the error type of a stack that keeps tower's convention (it converts from a [`Shed`]).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a request was shed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShedReason {
    /// Its key already had `limit` requests in flight.
    ConcurrencyLimit {
        /// The per-key limit.
        limit: usize,
    },
    /// Its priority class had used all the in-flight slots open to it.
    PriorityCapacity {
        /// The request's class.
        priority: Priority,
        /// The slots open to that class.
        limit: usize,
    },
    /// Its class had no slot and the waiting line was full of requests that go first.
    QueueFull {
        /// The request's class.
        priority: Priority,
        /// The line's bound.
        max_queued: usize,
    },
    /// It waited in line for `max_wait` without a slot.
    QueueTimeout {
        /// The request's class.
        priority: Priority,
        /// How long it waited.
        max_wait: Duration,
    },
}

/// A request refused to protect the service; answer it with 503 and `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shed {
    reason: ShedReason,
    retry_after: Duration,
}

impl Shed {
    pub(crate) fn new(reason: ShedReason, retry_after: Duration) -> Self {
        Shed {
            reason,
            retry_after,
        }
    }

    /// How long the caller should wait before retrying (the layer's configured hint).
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// Why the request was shed.
    pub fn reason(&self) -> &ShedReason {
        &self.reason
    }

    /// Finds a [`Shed`] in a boxed error returned by a stack of layers.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Shed> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(shed) = e.downcast_ref::<Shed>() {
                return Some(shed);
            }
            current = e.source();
        }
        None
    }
}

impl fmt::Display for Shed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            ShedReason::ConcurrencyLimit { limit } => write!(
                f,
                "load shed: {limit} requests with the same key already in flight"
            ),
            ShedReason::PriorityCapacity { priority, limit } => write!(
                f,
                "load shed: the {limit} in-flight slots open to {priority} requests are taken"
            ),
            ShedReason::QueueFull {
                priority,
                max_queued,
            } => write!(
                f,
                "load shed: no slot for a {priority} request and the {max_queued} places in line are taken"
            ),
            ShedReason::QueueTimeout { priority, max_wait } => write!(
                f,
                "load shed: a {priority} request waited {max_wait:?} in line without a slot"
            ),
        }
    }
}

impl std::error::Error for Shed {}

/// A layer configuration that cannot be used, with the field that is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}
