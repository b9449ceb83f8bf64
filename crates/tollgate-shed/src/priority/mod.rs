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
//! once with a [`Shed`](crate::Shed) error — or, with a `queue`, waits in line.
//! So with N = 100, c = 20, d = 20: sheddable requests stop at 60 in flight,
//! default ones at 80, and the last 20 slots only ever go to critical
//! requests. Nothing already admitted is cancelled.
//!
//! # The waiting line (`queue`)
//!
//! With `queue: {max_queued: Q, max_wait: W, aging: A}`, a request whose
//! class has no slot waits instead. Its rank is its class (sheddable 0,
//! default 1, critical 2) plus the time it has waited divided by A; the line
//! is ordered by rank, ties by arrival (see `queue.rs` for why this order is
//! fixed). When a slot frees, it goes to the first waiter in that order whose
//! class, raised one step per A waited (up to critical), may use it. So a
//! sheddable request that has waited 2·A goes before every request that
//! arrives after that, of any class: low priority is delayed, never starved.
//! At most Q wait (all classes together); when the line is full, whoever would
//! go last is shed (the newcomer, unless it goes before someone), and a
//! request still waiting after W is shed. Both get the 503 + Retry-After of
//! any shed request. A request that gives up (its future is dropped) leaves
//! the line; a slot granted to it is freed again.

mod config;
mod future;
mod layer;
mod queue;
mod service;
mod slots;

pub use config::{Priority, PriorityConfig, PriorityConfigError, QueueConfig};
pub use future::{ResponseFuture, Waiting};
pub use layer::PriorityLayer;
pub use service::PriorityShed;
pub use slots::{PrioritySlot, SharedClock};
