//! What the quota service takes from a rule's counter: a [`Payment`] per counter, and a round's [`Dues`].

use std::sync::{Arc, Weak};
use std::time::Duration;

use tollgate_core::Timestamp;

use super::counter::Shared;

/// Units of one rule's budget to take: a tick of the shares in force, or the fresh buckets of changed assignments.
#[derive(Clone, Debug)]
pub struct Payment {
    /// The rule counter.
    pub(super) counter: Vec<u8>,
    /// Alive while the counter is in the book (see [`Payment::is_owed`]).
    pub(super) owed: Weak<()>,
    /// The domain of the bucket to check.
    pub domain: String,
    /// A bucket on that counter, as a descriptor.
    pub entries: Vec<(String, String)>,
    /// The units to take; 0 when nothing is owed.
    pub units: u64,
    /// For a tick, the span the refills are paid for (empty for changes).
    pub(super) span: (Timestamp, Timestamp),
}

impl Payment {
    pub(super) fn new(counter: &[u8], shared: &Shared, units: u64) -> Self {
        Payment {
            counter: counter.to_vec(),
            owed: Arc::downgrade(&shared.owed),
            domain: shared.domain.clone(),
            entries: shared.entries.clone(),
            units,
            span: (Timestamp::EPOCH, Timestamp::EPOCH),
        }
    }

    /// For a tick, the time it pays the refills of the shares in force for.
    pub fn interval(&self) -> Duration {
        self.span.1.saturating_since(self.span.0)
    }

    /// The rule counter it pays.
    pub(super) fn counter(&self) -> &[u8] {
        &self.counter
    }

    /// Whether its counter is still in the book: once the last stream
    /// sharing it closed, nothing more is owed and nothing is taken.
    pub fn is_owed(&self) -> bool {
        self.owed.strong_count() > 0
    }
}

/// One round's payments for the shares in force ([`QuotaBook::dues`](super::QuotaBook::dues)).
#[derive(Debug)]
pub struct Dues {
    /// One per shared counter with shares in force.
    pub payments: Vec<Payment>,
    /// The round's instant.
    pub(super) now: Timestamp,
    /// The time to the next round.
    pub(super) tick: Duration,
}

impl Dues {
    pub(super) fn new(payments: Vec<Payment>, now: Timestamp, tick: Duration) -> Self {
        Dues {
            payments,
            now,
            tick,
        }
    }
}
