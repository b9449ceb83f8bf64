//! The priority shedder as a service: reserved slots per class, a bounded waiting line with aging, or a `Shed` error.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower::Service;

use super::config::Priority;
use super::future::ResponseFuture;
use super::slots::{Entry, SharedSlots};
use crate::error::Shed;

/// A service that sheds (or queues) requests whose class has no slot left.
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
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: From<Shed>,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let priority = Priority::from_header(request.headers().get(&self.slots.header));
        match self.slots.enter(priority) {
            Ok(Entry::Admitted(slot)) => ResponseFuture::called(self.inner.call(request), slot),
            Ok(Entry::Waiting(waiting)) => {
                // The ready service goes with the request; this one keeps a fresh clone.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let slots = Arc::clone(&self.slots);
                ResponseFuture::waiting(Box::pin(async move {
                    let slot = slots.wait(waiting).await.map_err(S::Error::from)?;
                    let response = inner.call(request).await;
                    drop(slot);
                    response
                }))
            }
            Err(shed) => ResponseFuture::shed(shed),
        }
    }
}
