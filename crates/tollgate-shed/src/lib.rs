//! Load shedding for Tollgate's proxy: tower layers that refuse work before it piles up.
//!
//! Must not know (the README's layout table): the proxy (a stack converts `Shed` into its own error type).
//!
//! * [`concurrency`]: at most N requests in flight per key (a tenant, an API
//!   key, a route), like Stripe's concurrent-requests limiter.
//! * [`priority`]: requests carry a class (critical / default / sheddable)
//!   in a header; part of the in-flight capacity is reserved so that
//!   critical traffic still gets through when the rest is shed, and with a
//!   `queue` requests over their share wait in a bounded line ordered by
//!   class and age (aging, so low priority is delayed, never starved).
//!
//! Both fail a refused request with a [`Shed`] that carries the reason and a
//! retry-after hint, converted into the inner service's own error type
//! (`S::Error: From<Shed>`): a stack keeping tower's convention gets it
//! boxed ([`BoxError`]), the proxy gets its own error enum and turns it into
//! `503 Service Unavailable` + `Retry-After` in one place.
//! A slot is taken when the request is called and given back when its
//! response future completes, fails or is dropped.

#![forbid(unsafe_code)]

pub mod concurrency;
mod error;
pub mod priority;
mod slot_future;

pub use error::{BoxError, ConfigError, Shed, ShedReason};
pub use slot_future::SlotFuture;
