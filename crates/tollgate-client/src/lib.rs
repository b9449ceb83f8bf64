//! The other side of the 429: an HTTP client that backs off as the server asks, and throttles itself.
//!
//! Must not know (the README's layout table): servers, stores, the proxy.
//!
//! [`BackoffLayer`] is a tower layer for any client service
//! `tower::Service<http::Request<B>>` (hyper-util's legacy client, an axum
//! router in a test, …) whose request bodies can be cloned. It
//!
//! * reads what each answer says ([`ServerHints`]): `Retry-After` in
//!   seconds or as an HTTP-date, the IETF `RateLimit` / `RateLimit-Policy`
//!   structured fields, and `RateLimit-*` / `X-RateLimit-*`;
//! * never sends sooner than the server said, and as `remaining` nears 0
//!   spreads what is left over the time to the reset ([`Pacer`]);
//! * retries a 429 (slow down) or a 503 (back off, and break after several)
//!   after the server's wait `T` spread in proportion to it, over `[T, 2T]`
//!   ([`RetryJitter`]; the additive `T + U(0, 100 ms · 2ⁿ)` of
//!   [`ExponentialBackoff`] is an option), inside a retry budget (tower's `TpsBudget`);
//! * opens a circuit breaker (`tollgate_core::breaker`) on consecutive 503s;
//! * rejects requests locally, before sending them, with the adaptive
//!   throttling probability of Google's SRE book ([`AdaptiveThrottle`]:
//!   `max(0, (requests − K·accepts) / (requests + 1))`, the math is in its docs).
//!
//! Every decision is a state machine over an injected [`Clock`](tollgate_core::Clock);
//! the default [`TokioClock`] is the one the sleeps run on, so tests run on
//! tokio's paused time.
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tollgate_client::{BackoffLayer, ClientPolicy};
//! use tower::{Layer, ServiceExt};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let client = BackoffLayer::new(ClientPolicy::default()).layer(http);
//! let request = http::Request::get("http://127.0.0.1:8080/").body(Full::default())?;
//! let response = client.oneshot(request).await?;
//! println!("{}", response.status());
//! # Ok(()) }
//! ```
//!
//! `examples/backoff.rs` runs one against a local server that answers 429.
//!
//! The same retries plug into tower's own retry layer as a
//! `tower::retry::Policy`: [`RetryPolicy`] (without the breaker and the
//! adaptive throttle, which need to refuse a request before it is sent).
//!
//! With the `reqwest` feature, `BackoffMiddleware` is the whole of
//! [`Backoff`] (the same loop: pacing, retries, breaker, throttle) as
//! `reqwest-middleware` middleware for a reqwest client.

#![forbid(unsafe_code)]

mod adaptive;
mod backoff;
mod clock;
mod delay;
mod hints;
mod jitter;
mod pacer;
#[cfg(feature = "reqwest")]
mod reqwest_backoff;
mod retry_policy;

pub use adaptive::AdaptiveThrottle;
pub use backoff::{Backoff, BackoffLayer, ClientError, ClientPolicy, ResponseFuture};
pub use clock::TokioClock;
pub use delay::ExponentialBackoff;
pub use hints::ServerHints;
pub use jitter::RetryJitter;
pub use pacer::Pacer;
#[cfg(feature = "reqwest")]
pub use reqwest_backoff::BackoffMiddleware;
pub use retry_policy::RetryPolicy;
