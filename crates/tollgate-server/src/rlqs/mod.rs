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
//!   assignments that change are pushed to their streams.
//! * [`RlqsService`]: the gRPC `StreamRateLimitQuotas` method, served on
//!   the same port as RLS; [`RlqsCollector`] its metrics.

pub mod book;
pub mod bucket;
mod metrics;
mod service;

pub use book::{QuotaBook, RlqsOptions};
pub use metrics::RlqsCollector;
pub use service::RlqsService;
