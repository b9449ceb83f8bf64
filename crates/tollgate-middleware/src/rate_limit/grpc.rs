//! [`GrpcRateLimitLayer`]: the same limits, keys and store for a tonic server, refusing with gRPC statuses.
//!
//! Build a [`RateLimitLayer`] as for HTTP, then take its
//! [`grpc`](RateLimitLayer::grpc) twin and mount it with
//! `tonic::transport::Server::builder().layer(..)`. Each call is decided
//! exactly as an HTTP request (same key extractors, costs, limits, store,
//! shadow mode and metrics; the twin shares the counters), and a refusal
//! is a trailers-only gRPC answer made by [`Rejection::grpc_status`]
//! (or the app's [`GrpcRejectionHandler`]):
//!
//! * over a limit: **`RESOURCE_EXHAUSTED`** with a `google.rpc.RetryInfo`
//!   whose `retry_delay` is the exact wait, and the rate limit fields
//!   (`retry-after`, `ratelimit-*`) as metadata;
//! * the store failed: **`UNAVAILABLE`** with a one-second `RetryInfo`
//!   (or the call passes with [`OnStoreError::Allow`](crate::OnStoreError::Allow));
//! * keyed by client address without one: **`INTERNAL`**.
//!
//! An admitted call's answer carries the `ratelimit-*` fields in its
//! initial metadata. Keys for gRPC: [`KeyExtractor::client_address`]
//! reads tonic's peer address (`TcpConnectInfo`, what
//! `tonic::Request::remote_addr` reads); a metadata value is a header
//! ([`KeyExtractor::Header`]); `RouteAnd` keys per method
//! (`/pkg.Service/Method`); [`KeyExtractor::custom`] reads anything else.
//!
//! [`KeyExtractor::client_address`]: crate::KeyExtractor::client_address
//! [`KeyExtractor::Header`]: crate::KeyExtractor::Header
//! [`KeyExtractor::custom`]: crate::KeyExtractor::custom

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tollgate_store::CounterStore;
use tonic::Status;
use tower::{Layer, Service};

use super::error::Rejection;
use super::future::ResponseFuture;
use super::layer::RateLimitLayer;
use super::policy::Policy;
use super::service::start;

/// Turns a [`Rejection`] into the app's own gRPC status; the default is
/// [`Rejection::grpc_status`]. Any `Fn(&Rejection) -> tonic::Status` closure is one.
pub trait GrpcRejectionHandler: Send + Sync + 'static {
    /// The status a rejected call ends with.
    fn status(&self, rejection: &Rejection) -> Status;
}

impl<F> GrpcRejectionHandler for F
where
    F: Fn(&Rejection) -> Status + Send + Sync + 'static,
{
    fn status(&self, rejection: &Rejection) -> Status {
        self(rejection)
    }
}

/// Wraps a tonic server's routes in [`GrpcRateLimit`] (module docs); clones share the counters.
///
/// ```
/// use std::time::Duration;
/// use http::HeaderName;
/// use tollgate_middleware::{KeyExtractor, Limit, RateLimitLayer};
/// use tollgate_store::StoreConfig;
///
/// // 100 calls a minute per caller, named by the `x-caller` metadata.
/// let limits = RateLimitLayer::builder(KeyExtractor::Header(HeaderName::from_static("x-caller")))
///     .limit(Limit::sliding_window("per-minute", 100, Duration::from_secs(60)).unwrap())
///     .in_memory(StoreConfig::with_max_keys(10_000))
///     .grpc();
/// let server = tonic::transport::Server::builder().layer(limits);
/// # drop(server);
/// ```
pub struct GrpcRateLimitLayer<St> {
    policy: Arc<Policy<St>>,
    handler: Arc<dyn GrpcRejectionHandler>,
}

impl<St> Clone for GrpcRateLimitLayer<St> {
    fn clone(&self) -> Self {
        GrpcRateLimitLayer {
            policy: Arc::clone(&self.policy),
            handler: Arc::clone(&self.handler),
        }
    }
}

impl<St> RateLimitLayer<St> {
    /// The same limits, key and store (shared counters) for a tonic
    /// server: refusals become gRPC statuses ([`Rejection::grpc_status`]);
    /// the HTTP rejection handler is not used.
    pub fn grpc(&self) -> GrpcRateLimitLayer<St> {
        GrpcRateLimitLayer {
            policy: Arc::clone(&self.policy),
            handler: Arc::new(|rejection: &Rejection| rejection.grpc_status()),
        }
    }
}

impl<St> GrpcRateLimitLayer<St> {
    /// Ends rejected calls with `handler`'s status instead of [`Rejection::grpc_status`].
    pub fn on_rejection(mut self, handler: impl GrpcRejectionHandler) -> Self {
        self.handler = Arc::new(handler);
        self
    }
}

impl<St, S> Layer<S> for GrpcRateLimitLayer<St> {
    type Service = GrpcRateLimit<S, St>;

    fn layer(&self, inner: S) -> GrpcRateLimit<S, St> {
        GrpcRateLimit {
            inner,
            layer: self.clone(),
        }
    }
}

/// The gRPC rate limit middleware: the service a [`GrpcRateLimitLayer`] wraps a tonic server's routes in.
pub struct GrpcRateLimit<S, St> {
    inner: S,
    layer: GrpcRateLimitLayer<St>,
}

impl<S: Clone, St> Clone for GrpcRateLimit<S, St> {
    fn clone(&self) -> Self {
        GrpcRateLimit {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, St, ReqB, ResB> Service<Request<ReqB>> for GrpcRateLimit<S, St>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    St: CounterStore + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let handler = Arc::clone(&self.layer.handler);
        start(
            &mut self.inner,
            &self.layer.policy,
            request,
            move |_: &Policy<St>, rejection: &Rejection| handler.status(rejection).into_http(),
        )
    }
}
