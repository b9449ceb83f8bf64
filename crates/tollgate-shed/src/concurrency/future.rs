//! The concurrency limit's response future: the inner call, holding its key's slot until it completes.

use super::slots::KeySlot;
use crate::slot_future::SlotFuture;

/// The response of [`ConcurrencyLimit`](super::ConcurrencyLimit): the inner
/// call holding its key's slot until it completes, or the [`Shed`](crate::Shed) error.
pub type ResponseFuture<F, K> = SlotFuture<F, KeySlot<K>>;
