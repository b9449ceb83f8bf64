//! One Envoy's stream in the book: its buckets, indexed by the shared counter each one is on, and where its responses go.

use std::collections::{HashMap, HashSet};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaResponse};
use tokio::sync::mpsc;
use tollgate_core::Timestamp;
use tonic::Status;

use super::changes::BucketKey;

/// A stream's number in the book.
pub type StreamId = u64;

/// Where a stream's responses go.
pub type Outbox = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// What the book tells one Envoy about one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Assignment {
    Allow,
    Deny,
    /// A share of the bucket's rate, per window.
    Share(u64),
}

/// One bucket of one stream.
#[derive(Debug)]
pub(super) struct StreamBucket {
    pub(super) id: BucketId,
    /// The shared bucket's counter, when the bucket is shared.
    pub(super) counter: Option<Vec<u8>>,
    pub(super) policy: Assignment,
    /// When the service last read a report of it (its own clock: Envoy's
    /// `time_elapsed` is truncated to whole seconds).
    pub(super) reported: Option<Timestamp>,
}

/// One Envoy's stream.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) domain: Option<String>,
    pub(super) outbox: Outbox,
    /// By the bucket id's sorted entries.
    pub(super) buckets: HashMap<BucketKey, StreamBucket>,
    /// The keys of the buckets on each shared counter, kept with `buckets`.
    pub(super) by_counter: HashMap<Vec<u8>, HashSet<BucketKey>>,
    /// When assignments were last sent to it (an answer or a push): each
    /// renews the time to live of what it carries.
    pub(super) sent: Option<Timestamp>,
}

impl Stream {
    pub(super) fn new(outbox: Outbox) -> Self {
        Stream {
            domain: None,
            outbox,
            buckets: HashMap::new(),
            by_counter: HashMap::new(),
            sent: None,
        }
    }

    /// Sets the bucket `key` (indexed by its counter); whether it is new.
    pub(super) fn put(&mut self, key: BucketKey, bucket: StreamBucket) -> bool {
        let counter = bucket.counter.clone();
        let old = self.buckets.insert(key.clone(), bucket);
        let old_counter = old.as_ref().and_then(|b| b.counter.as_ref());
        if old_counter != counter.as_ref() {
            if let Some(old_counter) = old_counter
                && let Some(keys) = self.by_counter.get_mut(old_counter)
            {
                keys.remove(&key);
                if keys.is_empty() {
                    self.by_counter.remove(old_counter);
                }
            }
            if let Some(counter) = counter {
                self.by_counter.entry(counter).or_default().insert(key);
            }
        }
        old.is_none()
    }

    /// The keys of the buckets on `counter`.
    pub(super) fn on_counter(&self, counter: &[u8]) -> Option<&HashSet<BucketKey>> {
        self.by_counter.get(counter)
    }
}
