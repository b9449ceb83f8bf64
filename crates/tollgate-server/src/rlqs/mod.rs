//! Envoy's rate limit quota service (RLQS v3): each connected Envoy gets its share of a rule's rate per quota bucket, rebalanced from its usage reports.
//!
//! Envoy's `envoy.filters.http.rate_limit_quota` filter sorts requests into
//! buckets (a `BucketId`: a map of strings), enforces locally whatever
//! assignment the service gave each bucket, and reports each bucket's
//! usage (requests allowed and denied) on one stream per Envoy. There is no
//! call per request.
//!
//! * [`bucket`]: a bucket id is read as a descriptor — its entries in the
//!   byte order of their keys — of the stream's domain, and matched by the
//!   same rules as RLS (wildcards, several limits, `unlimited`, shadow
//!   mode). What applies becomes a [`Policy`](bucket::Policy).
//! * [`book`]: the buckets with the Envoys reporting them; each bucket's
//!   rate is split among them by [`tollgate_core::fair_share`], and the
//!   assignments that change are pushed to their streams once paid for.
//! * [`budget`] and [`payment`]: the shares are paid for from the rule's
//!   counter in the engine's store, the budget RLS callers, leased
//!   instances and other `tollgate serve` instances spend too: a new or
//!   larger share's fresh bucket before it is sent, the shares in force
//!   every [`PAY_TICK`].
//! * [`RlqsService`]: the gRPC `StreamRateLimitQuotas` method, served on
//!   the same port as RLS; [`RlqsCollector`] its metrics.
//! * [`with_book`]: the book's work runs off the runtime's workers, so a
//!   stream at its bucket bound leaves RLS calls and `/metrics` unaffected.

pub mod book;
pub mod bucket;
pub mod budget;
mod metrics;
mod off_runtime;
pub mod payment;
mod service;

pub use book::{QuotaBook, RlqsOptions};
pub use budget::{
    PAY_TICK, next_at_phase, pay_and_apply, pay_every, pay_round, round_phase, top_up,
};
pub use metrics::RlqsCollector;
pub use off_runtime::with_book;
pub use service::RlqsService;
