//! The priority shedder as a service: reserved slots per class, or a `Shed` error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderName, Request};
use tower::Service;

use super::config::{ClassLimits, Priority, PriorityConfig, PriorityConfigError};
use super::future::ResponseFuture;
use crate::error::{Shed, ShedReason};

/// The capacity all services of one layer share.
#[derive(Debug)]
pub(crate) struct SharedSlots {
    header: HeaderName,
    limits: ClassLimits,
    retry_after: Duration,
    in_flight: AtomicUsize,
}

impl SharedSlots {
    pub(crate) fn new(config: &PriorityConfig) -> Result<Self, PriorityConfigError> {
        Ok(SharedSlots {
            header: config.header_name()?,
            limits: config.limits()?,
            retry_after: config.retry_after,
            in_flight: AtomicUsize::new(0),
        })
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Takes a slot if fewer than the class's limit are in flight.
    fn try_acquire(self: &Arc<Self>, priority: Priority) -> Result<PrioritySlot, Shed> {
        let limit = self.limits.of(priority);
        let admitted = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            });
        match admitted {
            Ok(_) => Ok(PrioritySlot {
                slots: Arc::clone(self),
            }),
            Err(_) => Err(Shed::new(
                ShedReason::PriorityCapacity { priority, limit },
                self.retry_after,
            )),
        }
    }
}

/// One admitted request's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct PrioritySlot {
    slots: Arc<SharedSlots>,
}

impl Drop for PrioritySlot {
    fn drop(&mut self) {
        self.slots.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A service that sheds requests whose class has no slot left.
#[derive(Debug)]
pub struct PriorityShed<S> {
    inner: S,
    slots: Arc<SharedSlots>,
}

impl<S> PriorityShed<S> {
    pub(crate) fn new(inner: S, slots: Arc<SharedSlots>) -> Self {
        PriorityShed { inner, slots }
    }

    /// Requests of all classes in flight now.
    pub fn in_flight(&self) -> usize {
        self.slots.in_flight()
    }
}

impl<S: Clone> Clone for PriorityShed<S> {
    fn clone(&self) -> Self {
        PriorityShed {
            inner: self.inner.clone(),
            slots: Arc::clone(&self.slots),
        }
    }
}

impl<S, B> Service<Request<B>> for PriorityShed<S>
where
    S: Service<Request<B>>,
    S::Error: From<Shed>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let priority = Priority::from_header(request.headers().get(&self.slots.header));
        match self.slots.try_acquire(priority) {
            Ok(slot) => ResponseFuture::called(self.inner.call(request), slot),
            Err(shed) => ResponseFuture::shed(shed),
        }
    }
}
