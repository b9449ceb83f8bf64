//! The priority shedder's response future: the inner call, holding its slot until it completes.

use super::service::PrioritySlot;
use crate::slot_future::SlotFuture;

/// The response of [`PriorityShed`](super::PriorityShed): the inner call
/// holding its slot until it completes, or the [`Shed`](crate::Shed) error.
pub type ResponseFuture<F> = SlotFuture<F, PrioritySlot>;
