//! nginx's `limit_req` on a route: a leaky bucket per key that shapes (requests within the burst wait their turn) or polices.
//!
//! A route's `limit_req` block is nginx's `limit_req_zone` and
//! `limit_req` in one: `rate` (`10r/s`, `30r/m`), `burst`, and `delay=N`
//! or `nodelay`, keyed by the trusted client address (nginx's
//! `$binary_remote_addr`) or a header. Each key's bucket is the core's
//! [`LeakyBucket`](tollgate_core::LeakyBucket), whose excess bookkeeping
//! is nginx's (a property test replays nginx's model against it):
//!
//! * a request adds one unit of excess, which drains at `rate`; one that
//!   would take the excess above `burst` is rejected and changes nothing;
//! * an admitted request waits `(excess − N) / rate` before it goes
//!   upstream (N = 0 by default, `delay=N`, or the whole burst for
//!   `nodelay`), so requests leave at the rate;
//! * a delayed response carries `x-tollgate-delay-ms`; a rejection gets
//!   `status` (429 by default, where nginx answers 503) with `Retry-After`.
//!
//! What a route holds is bounded: `max_keys` buckets, kept in a
//! [`WordStore`](tollgate_store::WordStore), so a full table evicts as the
//! rules' stores do (the least used buckets first, the newest among equals:
//! a flood of one-off keys never frees a key with excess or a delay ahead of
//! it; see [`eviction`](tollgate_store::eviction)), and `max_waiting` requests
//! waiting at once (past it, a request that would wait is rejected and its
//! unit given back). `dry_run` decides and counts, but delays and rejects
//! nothing (nginx's `limit_req_dry_run`).

pub mod error;
pub mod layer;
pub mod metrics;
pub mod policy;
pub mod service;

pub use error::{LimitReqError, LimitReqRejected, RejectReason};
pub use layer::LimitReqLayer;
pub use metrics::LimitReqFamilies;
pub use policy::{LimitReqPolicy, LimitReqStats};
pub use service::LimitReqService;
