//! The per-key concurrency limit as a service: a slot per request in flight, or a `Shed` error.

use std::hash::Hash;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::Service;

use super::future::ResponseFuture;
use super::slots::KeyedSlots;
use crate::error::{Shed, ShedReason};

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
