//! The priority shedder's response future: the inner call holding its slot, a request waiting in line for one, or the shed error.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::slots::PrioritySlot;
use crate::error::Shed;
use crate::slot_future::SlotFuture;

/// A request waiting in line, then its inner call.
pub type Waiting<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    /// The response of [`PriorityShed`](super::PriorityShed): the inner call
    /// holding its slot until it completes, a request waiting in line for a
    /// slot (then its inner call), or the [`Shed`] error.
    pub struct ResponseFuture<F: Future> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F: Future> {
        Now { #[pin] future: SlotFuture<F, PrioritySlot> },
        Waiting { future: Waiting<F::Output> },
    }
}

impl<F: Future> ResponseFuture<F> {
    pub(crate) fn called(future: F, slot: PrioritySlot) -> Self {
        ResponseFuture {
            kind: Kind::Now {
                future: SlotFuture::called(future, slot),
            },
        }
    }

    pub(crate) fn shed(shed: Shed) -> Self {
        ResponseFuture {
            kind: Kind::Now {
                future: SlotFuture::shed(shed),
            },
        }
    }

    pub(crate) fn waiting(future: Waiting<F::Output>) -> Self {
        ResponseFuture {
            kind: Kind::Waiting { future },
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: From<Shed>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Now { future } => future.poll(cx),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F: Future> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("priority::ResponseFuture")
    }
}
