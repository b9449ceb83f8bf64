//! Envoy's `local_ratelimit` filter: token buckets in this process, with Envoy 1.40's semantics.
//!
//! * [`policy`]: [`LocalRateLimitPolicy`], the compiled `LocalRateLimit`
//!   config (bucket specs, fractions, descriptors, headers to add); each
//!   bucket is a [`BucketSpec`] ([`bucket_spec`]).
//! * [`limiter`]: [`LocalLimiter`], the policy's buckets: one default bucket
//!   and one per configured descriptor (a wildcard descriptor keeps an LRU of
//!   `max_dynamic_descriptors` buckets, one per value seen), shared by all
//!   worker threads; with `local_rate_limit_per_downstream_connection` each
//!   connection gets its own limiter instead. [`LocalLimiter::check`]
//!   follows Envoy's order of consuming them.
//! * [`headers`]: headers to add and the `x-ratelimit-*` report of a bucket.
//! * [`layer`] / [`service`] / [`future`] / [`error`]: the tower layer that
//!   applies it to requests, and its denial.

pub mod bucket_spec;
pub mod error;
pub mod future;
pub mod headers;
pub mod layer;
pub mod limiter;
pub mod policy;
pub mod service;

pub use bucket_spec::{BucketSpec, MIN_FILL_INTERVAL};
pub use error::{LOCAL_RATE_LIMITED_BODY, LocalRateLimitError, LocalRateLimited};
pub use headers::{BucketReport, HeaderToAdd, x_ratelimit_headers};
pub use layer::LocalRateLimitLayer;
pub use limiter::{LocalLimiter, LocalVerdict, SharedClock};
pub use policy::{DEFAULT_MAX_DYNAMIC_DESCRIPTORS, DescriptorSpec, Fraction, LocalRateLimitPolicy};
pub use service::LocalRateLimitService;
