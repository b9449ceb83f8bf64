//! [`RateLimitLayer`] and its [`RateLimitBuilder`].

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tollgate_core::{AnyAlgorithm, Clock, CoarseClock};
use tollgate_protocol::rls::headers::{HeaderOptions, Jitter, ResponseHeaders};
use tollgate_store::{CounterStore, MemoryCounters, StoreConfig};
use tower::Layer;

use super::error::{RejectionHandler, SharedHandler, default_handler};
use super::pass_headers::PassHeaders;
use super::policy::{LimitEntry, OnStoreError, Policy};
use super::service::RateLimit;
use crate::key::KeyExtractor;
use crate::limit::Limit;
use crate::metrics::Metrics;

/// Wraps an app's service in [`RateLimit`]; clones share the counters.
pub struct RateLimitLayer<St> {
    pub(super) policy: Arc<Policy<St>>,
}

impl<St> Clone for RateLimitLayer<St> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            policy: Arc::clone(&self.policy),
        }
    }
}

impl RateLimitLayer<MemoryCounters> {
    /// A builder keyed by `key`.
    pub fn builder(key: KeyExtractor) -> RateLimitBuilder {
        RateLimitBuilder {
            key,
            limits: Vec::new(),
            clock: None,
            shadow: false,
            admitted_headers: true,
            on_store_error: OnStoreError::default(),
            metrics: Metrics::new(),
            retry_after_jitter: Duration::ZERO,
            on_rejection: default_handler(),
        }
    }
}

impl<St, S> Layer<S> for RateLimitLayer<St> {
    type Service = RateLimit<S, St>;

    fn layer(&self, inner: S) -> RateLimit<S, St> {
        RateLimit::new(inner, Arc::clone(&self.policy))
    }
}

/// Sets up a [`RateLimitLayer`]: its limits, then its store.
pub struct RateLimitBuilder {
    key: KeyExtractor,
    limits: Vec<Limit>,
    clock: Option<Arc<dyn Clock>>,
    shadow: bool,
    admitted_headers: bool,
    on_store_error: OnStoreError,
    metrics: Metrics,
    retry_after_jitter: Duration,
    on_rejection: SharedHandler,
}

impl RateLimitBuilder {
    /// Holds every key to `limit` too.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Counts what would be refused, refuses nothing and adds no header.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Whether an admitted request's answer carries the `RateLimit-Limit` /
    /// `-Remaining` / `-Reset`, `RateLimit-Policy` and `RateLimit` headers
    /// (default: it does). Off, the layer adds nothing to an admitted answer
    /// (as `tower_governor` by default), which saves about half of what the
    /// layer costs per admitted request; a refusal still carries every
    /// header and `Retry-After`, and the decision is the same.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_middleware::{KeyExtractor, Limit, RateLimitLayer};
    /// use tollgate_store::StoreConfig;
    ///
    /// let limits = RateLimitLayer::builder(KeyExtractor::client_address())
    ///     .limit(Limit::gcra("per-second", 100, Duration::from_secs(1), 10).unwrap())
    ///     .admitted_headers(false)
    ///     .in_memory(StoreConfig::with_max_keys(100_000));
    /// ```
    pub fn admitted_headers(mut self, admitted_headers: bool) -> Self {
        self.admitted_headers = admitted_headers;
        self
    }

    /// What to do when the store fails (default: 503).
    pub fn on_store_error(mut self, on_store_error: OnStoreError) -> Self {
        self.on_store_error = on_store_error;
        self
    }

    /// Counts decisions in `metrics` (register them in the app's registry;
    /// the `metrics` feature).
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, metrics: &Metrics) -> Self {
        self.metrics = metrics.clone();
        self
    }

    /// Decides at this clock's time (default: a `CoarseClock`, as `tollgate serve`).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Adds up to this much random time to `Retry-After`, so refused clients
    /// do not all come back in the same second (default none).
    pub fn retry_after_jitter(mut self, jitter: Duration) -> Self {
        self.retry_after_jitter = jitter;
        self
    }

    /// Answers rejected requests with `handler` instead of the default
    /// [`Rejection::problem_response`](crate::Rejection::problem_response):
    /// the app's own error body, keeping [`Rejection::headers`](crate::Rejection::headers).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::Response;
    /// use tollgate_middleware::{KeyExtractor, RateLimitLayer, Rejection};
    ///
    /// let builder = RateLimitLayer::builder(KeyExtractor::client_address())
    ///     .on_rejection(|rejection: &Rejection| {
    ///         let mut response = Response::new(Bytes::from(format!("{{\"error\":\"{}\"}}", rejection.status().as_u16())));
    ///         *response.status_mut() = rejection.status();
    ///         response.headers_mut().extend(rejection.headers());
    ///         response
    ///     });
    /// ```
    pub fn on_rejection(mut self, handler: impl RejectionHandler) -> Self {
        self.on_rejection = Arc::new(handler);
        self
    }

    /// The layer over in-memory counters, bounded by `config` (each limit's
    /// algorithm gets one store of at most `config.max_keys` keys).
    pub fn in_memory(self, config: StoreConfig) -> RateLimitLayer<MemoryCounters> {
        let algorithms: Vec<AnyAlgorithm> = self.limits.iter().map(|l| l.algorithm).collect();
        let store = MemoryCounters::new(algorithms, config, config, 0);
        self.store(Arc::new(store))
    }

    /// The layer over `store` (a `tollgate_redis::RedisStore` for a fleet).
    pub fn store<St: CounterStore>(self, store: Arc<St>) -> RateLimitLayer<St> {
        let headers = ResponseHeaders::new(
            HeaderOptions {
                limit_headers: true,
                ietf_headers: true,
                retry_after: true,
                retry_after_jitter: self.retry_after_jitter,
                ..HeaderOptions::default()
            },
            Jitter::random(),
        );
        let pass_headers = PassHeaders::new(&self.limits);
        let limits = self
            .limits
            .into_iter()
            .map(|limit| LimitEntry::new(limit, &self.metrics))
            .collect();
        RateLimitLayer {
            policy: Arc::new(Policy {
                key: self.key,
                limits,
                store,
                clock: self.clock.unwrap_or_else(|| Arc::new(CoarseClock::new())),
                headers,
                pass_headers,
                shadow: self.shadow,
                admitted_headers: self.admitted_headers,
                on_store_error: self.on_store_error,
                on_rejection: self.on_rejection,
                reported_no_address: AtomicBool::new(false),
            }),
        }
    }
}
