//! At most N requests in flight per key.
//!
//! A caller-given function extracts the key from each request (a tenant
//! header, the client address, the route). A request whose key already has
//! `max_in_flight` requests in flight fails at once with a [`Shed`](crate::Shed)
//! error; otherwise it takes a slot until its response future completes,
//! fails or is dropped. Keys with nothing in flight take no memory.
//!
//! All services made by one [`ConcurrencyLimitLayer`] (and their clones)
//! share the counts, so one layer applied per connection still limits
//! across connections.

mod config;
mod future;
mod layer;
mod service;
mod slots;

pub use config::ConcurrencyConfig;

pub use future::ResponseFuture;
pub use layer::ConcurrencyLimitLayer;
pub use service::ConcurrencyLimit;
pub use slots::KeySlot;
