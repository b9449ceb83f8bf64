//! Envoy's `ratelimit` filter: one `ShouldRateLimit` call to an RLS v3 service per request.
//!
//! [`GlobalRateLimit`] ([`policy`]) is the compiled filter config and its
//! [`RlsClient`](tollgate_protocol::rls::RlsClient); [`answer`] renders what
//! the RLS answered. Envoy's behaviour, which the service in [`service`]
//! follows:
//!
//! * no descriptors → no call, the request continues untouched;
//! * the call's deadline is `timeout` (20 ms by default); an error or a
//!   timeout allows the request unless `failure_mode_deny`, which answers
//!   `status_on_error` (500 by default: Envoy's field, and the one place a
//!   5xx other than 503 can come from the proxy's configuration);
//! * OVER_LIMIT → `rate_limited_status` (429) with the RLS's `raw_body`,
//!   its `response_headers_to_add`, `x-envoy-ratelimited: true` and the
//!   X-RateLimit headers; anything else (OK, UNKNOWN) → allowed, the RLS's
//!   `request_headers_to_add` go upstream and its `response_headers_to_add`
//!   and the X-RateLimit headers come back on the upstream response.

pub mod answer;
pub mod error;
pub mod layer;
pub mod policy;
pub mod service;

pub use error::{GlobalRateLimitError, GlobalRateLimited, RateLimitServiceFailed};
pub use layer::GlobalRateLimitLayer;
pub use policy::{DEFAULT_TIMEOUT, GlobalRateLimit};
pub use service::GlobalRateLimitService;
