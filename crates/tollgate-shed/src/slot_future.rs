//! The response future both layers share: the inner call holding its slot, or the shed error.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::error::Shed;

pin_project! {
    /// The response of a shedding layer: the inner call holding its slot, or the shed error.
    pub struct SlotFuture<F, Slot> {
        #[pin]
        kind: Kind<F>,
        slot: Option<Slot>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Called { #[pin] future: F },
        Shed { shed: Option<Shed> },
    }
}

impl<F, Slot> SlotFuture<F, Slot> {
    pub(crate) fn called(future: F, slot: Slot) -> Self {
        SlotFuture {
            kind: Kind::Called { future },
            slot: Some(slot),
        }
    }

    pub(crate) fn shed(shed: Shed) -> Self {
        SlotFuture {
            kind: Kind::Shed { shed: Some(shed) },
            slot: None,
        }
    }
}

impl<F, T, E, Slot> Future for SlotFuture<F, Slot>
where
    F: Future<Output = Result<T, E>>,
    E: From<Shed>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Called { future } => {
                let result = ready!(future.poll(cx));
                // The slot is free as soon as the inner call is done.
                this.slot.take();
                Poll::Ready(result)
            }
            KindProj::Shed { shed } => Poll::Ready(Err(E::from(
                shed.take()
                    .expect("a shed response future is polled once after it completed"),
            ))),
        }
    }
}

impl<F, Slot> std::fmt::Debug for SlotFuture<F, Slot> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotFuture")
            .field("holds_slot", &self.slot.is_some())
            .finish()
    }
}
