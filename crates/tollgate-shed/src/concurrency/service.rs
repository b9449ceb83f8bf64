//! The per-key concurrency limit as a service: a slot per request in flight, or a `Shed` error.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tower::Service;

use super::future::ResponseFuture;
use crate::error::{Shed, ShedReason};

/// The in-flight count of every key with something in flight.
pub(crate) struct KeyedSlots<K> {
    pub(crate) max_in_flight: usize,
    in_flight: Mutex<HashMap<K, usize>>,
}

impl<K> KeyedSlots<K> {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        KeyedSlots {
            max_in_flight,
            in_flight: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> KeyedSlots<K> {
    fn try_acquire(self: &Arc<Self>, key: K) -> Option<KeySlot<K>> {
        let mut in_flight = self.in_flight.lock();
        let count = in_flight.entry(key.clone()).or_insert(0);
        if *count >= self.max_in_flight {
            return None;
        }
        *count += 1;
        Some(KeySlot {
            slots: Arc::clone(self),
            key: Some(key),
        })
    }

    fn count(&self, key: &K) -> usize {
        self.in_flight.lock().get(key).copied().unwrap_or(0)
    }
}

/// One request's slot under its key; dropping it frees the slot.
pub struct KeySlot<K: Hash + Eq> {
    slots: Arc<KeyedSlots<K>>,
    key: Option<K>,
}

impl<K: Hash + Eq> Drop for KeySlot<K> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut in_flight = self.slots.in_flight.lock();
        if let Some(count) = in_flight.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&key);
            }
        }
    }
}

impl<K: Hash + Eq> std::fmt::Debug for KeySlot<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySlot")
    }
}

/// A service that sheds requests whose key is at its concurrency limit.
pub struct ConcurrencyLimit<S, K, F> {
    inner: S,
    key_fn: Arc<F>,
    slots: Arc<KeyedSlots<K>>,
    retry_after: Duration,
}

impl<S, K, F> ConcurrencyLimit<S, K, F> {
    pub(crate) fn new(
        inner: S,
        key_fn: Arc<F>,
        slots: Arc<KeyedSlots<K>>,
        retry_after: Duration,
    ) -> Self {
        ConcurrencyLimit {
            inner,
            key_fn,
            slots,
            retry_after,
        }
    }
}

impl<S, K: Hash + Eq + Clone, F> ConcurrencyLimit<S, K, F> {
    /// Requests in flight under `key`, across every service of the layer.
    pub fn in_flight(&self, key: &K) -> usize {
        self.slots.count(key)
    }
}

impl<S: Clone, K, F> Clone for ConcurrencyLimit<S, K, F> {
    fn clone(&self) -> Self {
        ConcurrencyLimit {
            inner: self.inner.clone(),
            key_fn: Arc::clone(&self.key_fn),
            slots: Arc::clone(&self.slots),
            retry_after: self.retry_after,
        }
    }
}

impl<S, K, F, Request> Service<Request> for ConcurrencyLimit<S, K, F>
where
    S: Service<Request>,
    S::Error: From<Shed>,
    K: Hash + Eq + Clone,
    F: Fn(&Request) -> K,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let key = (self.key_fn)(&request);
        match self.slots.try_acquire(key) {
            Some(slot) => ResponseFuture::called(self.inner.call(request), slot),
            None => ResponseFuture::shed(Shed::new(
                ShedReason::ConcurrencyLimit {
                    limit: self.slots.max_in_flight,
                },
                self.retry_after,
            )),
        }
    }
}
