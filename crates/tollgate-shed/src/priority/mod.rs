//! Priority shedding: part of the in-flight capacity is reserved for critical traffic.
//!
//! Each request names its class in a header (`x-priority` by default):
//! `critical`, `default` or `sheddable`, compared without regard to case.
//! A missing or unknown value counts as `default` — a client cannot buy a
//! better class with a typo, and no request is refused for its header.
//!
//! # The admission rule
//!
//! With `max_in_flight` = N, `critical_reserved_percent` = c and
//! `default_reserved_percent` = d, the layer computes three limits
//! (reserved slots are rounded up):
//!
//! * critical: N
//! * default: N − ⌈N·c/100⌉
//! * sheddable: N − ⌈N·c/100⌉ − ⌈N·d/100⌉
//!
//! A request is admitted when the number of requests of **all** classes in
//! flight is below its class's limit; it then counts as in flight until its
//! response future completes, fails or is dropped. Otherwise it fails at
//! once with a [`Shed`](crate::Shed) error. So with N = 100, c = 20, d = 20:
//! sheddable requests stop at 60 in flight, default ones at 80, and the last
//! 20 slots only ever go to critical requests. Nothing is queued and nothing
//! already admitted is cancelled.

mod config;
mod future;
mod layer;
mod service;

pub use config::{Priority, PriorityConfig, PriorityConfigError};
pub use future::ResponseFuture;
pub use layer::PriorityLayer;
pub use service::{PriorityShed, PrioritySlot};
