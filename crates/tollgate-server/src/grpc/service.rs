//! [`RateLimitGrpc`]: Envoy's `RateLimitService` over the engine in service.
//!
//! It maps `envoy.service.ratelimit.v3.RateLimitRequest` onto the model
//! request, decides, and maps the answer back onto the wire:
//!
//! * `overall_code` is OK or OVER_LIMIT, never UNKNOWN (Envoy reads UNKNOWN as OK).
//! * One status per descriptor, in request order, with `current_limit` only
//!   when a limit applied; `duration_until_reset` rounded up to whole seconds.
//! * A malformed request is `INVALID_ARGUMENT` with the engine's message;
//!   so are bytes that are not a `RateLimitRequest` (the decoder's reason)
//!   and a request over one of the [`RequestCaps`] (naming the cap), which
//!   is refused before its decoded form is built. A message larger than
//!   `max_message_bytes` is refused by its length prefix, before it is
//!   buffered (`OUT_OF_RANGE`, tonic's status for it).
//! * With [`HeaderOptions`](tollgate_protocol::rls::HeaderOptions) switched
//!   on, the headers go in `response_headers_to_add` and the 429 body in
//!   `raw_body` (only on OVER_LIMIT); Envoy adds both to its reply. Off by default.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures_util::future::Either;
use tollgate_core::{Clock, Timestamp};
use tollgate_protocol::rls::convert::engine_request;
use tollgate_protocol::rls::headers::ResponseHeaders;
use tollgate_protocol::rls::model::{RateLimitRequest, RateLimitResponse};
use tollgate_protocol::rls::wire::{self, SERVICE_NAME, SHOULD_RATE_LIMIT_PATH};
use tollgate_protocol::rls::{RequestCaps, RlsCodec};
use tonic::codegen::http;
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};

use tollgate_runtime::trace_context;
use tracing::Instrument;

use super::unary::answer_unary;
use crate::engine::{Decided, Engine, EngineError};
use crate::metrics::Metrics;
use crate::reload::LiveEngine;
use crate::rlqs::{QuotaBook, RlqsOptions};

/// A decided call: the wire answer, and how long to hold it before sending
/// (a leaky-bucket shaper's wait; zero otherwise).
#[derive(Clone, Debug)]
pub struct Answer {
    /// The answer.
    pub response: wire::RateLimitResponse,
    /// How long the service holds it: the request waits its turn.
    pub hold: std::time::Duration,
}

impl Answer {
    /// The answer once its hold has passed.
    pub async fn delivered(self) -> wire::RateLimitResponse {
        if !self.hold.is_zero() {
            tokio::time::sleep(self.hold).await;
        }
        self.response
    }
}

/// Envoy's `envoy.service.ratelimit.v3.RateLimitService`, answered by an [`Engine`]; cheap to clone.
///
/// It answers from a [`LiveEngine`], loading the engine in service once per
/// call, so a reload takes effect on the next call without a lock.
pub struct RateLimitGrpc<C: Clock> {
    engine: Arc<LiveEngine<C>>,
    headers: Arc<ResponseHeaders>,
    metrics: Option<Arc<Metrics>>,
    caps: RequestCaps,
    quota: Arc<QuotaBook>,
}

impl<C: Clock> RateLimitGrpc<C> {
    /// A service answering from `engine`, with no response headers.
    pub fn new(engine: Arc<Engine<C>>) -> Self {
        RateLimitGrpc::with_headers(engine, Arc::new(ResponseHeaders::default()))
    }

    /// A service answering from `engine` and adding what `headers` renders.
    pub fn with_headers(engine: Arc<Engine<C>>, headers: Arc<ResponseHeaders>) -> Self {
        RateLimitGrpc::live(Arc::new(LiveEngine::fixed(engine)), headers)
    }

    /// A service answering from whatever engine `engine` has in service, adding what `headers` renders.
    pub fn live(engine: Arc<LiveEngine<C>>, headers: Arc<ResponseHeaders>) -> Self {
        RateLimitGrpc {
            engine,
            headers,
            metrics: None,
            caps: RequestCaps::default(),
            quota: Arc::new(QuotaBook::new(RlqsOptions::default())),
        }
    }

    /// This service, with the rate limit quota service (served beside it) keeping its buckets in `book`.
    #[must_use]
    pub fn with_quota_book(mut self, book: Arc<QuotaBook>) -> Self {
        self.quota = book;
        self
    }

    /// The rate limit quota service's book.
    pub fn quota_book(&self) -> &Arc<QuotaBook> {
        &self.quota
    }

    /// This service, refusing requests over `caps` (the defaults otherwise).
    #[must_use]
    pub fn with_caps(mut self, caps: RequestCaps) -> Self {
        self.caps = caps;
        self
    }

    /// The bounds each request is checked against.
    pub fn caps(&self) -> &RequestCaps {
        &self.caps
    }

    /// This service, counting its answers in `metrics` (api `grpc`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The response headers it adds.
    pub fn headers(&self) -> &Arc<ResponseHeaders> {
        &self.headers
    }

    /// The engine it answers from now.
    pub fn engine(&self) -> Arc<Engine<C>> {
        self.engine.engine()
    }

    /// The live handle whose engine it answers from.
    pub fn live_engine(&self) -> &Arc<LiveEngine<C>> {
        &self.engine
    }

    /// Answers one decoded call on `engine` (the engine in service when it arrived).
    fn answer_call<'a>(
        &'a self,
        engine: &'a Engine<C>,
        request: wire::RateLimitRequest,
    ) -> Either<
        std::future::Ready<Result<Answer, Status>>,
        impl Future<Output = Result<Answer, Status>> + Send + 'a,
    > {
        let start = self.metrics.as_ref().map(|m| m.start());
        self.answer(engine, engine_request(request), start)
    }

    /// Answers one model request on `engine`, counted in the metrics from
    /// `start`: ready at once when the engine needs no store call, else
    /// once the store has answered.
    fn answer<'a>(
        &'a self,
        engine: &'a Engine<C>,
        request: RateLimitRequest,
        start: Option<Timestamp>,
    ) -> Either<
        std::future::Ready<Result<Answer, Status>>,
        impl Future<Output = Result<Answer, Status>> + Send + 'a,
    > {
        let answer = match engine.check(&request) {
            Ok(Decided::NeedsStore(call)) => {
                return Either::Right(async move {
                    let response = call.call().await.response();
                    self.respond(engine, &request, Ok(response), start)
                });
            }
            Ok(Decided::Ready(response)) => Ok(response),
            Err(error) => Err(error),
        };
        Either::Left(std::future::ready(
            self.respond(engine, &request, answer, start),
        ))
    }

    /// The wire answer for an engine answer, counted in the metrics.
    fn respond(
        &self,
        engine: &Engine<C>,
        request: &RateLimitRequest,
        answer: Result<RateLimitResponse, EngineError>,
        start: Option<Timestamp>,
    ) -> Result<Answer, Status> {
        if let (Some(metrics), Some(start)) = (&self.metrics, start) {
            match &answer {
                Ok(response) => metrics.observe(engine.rules(), request, response),
                Err(_) => metrics.observe_service_error(),
            }
            metrics.observe_duration(crate::metrics::Api::Grpc, start);
        }
        match answer {
            Ok(response) => {
                let wire = self.headers.wire_answer(&request.descriptors, &response);
                if !response.delay.is_zero()
                    && let Some(metrics) = &self.metrics
                {
                    metrics.observe_shaped(response.delay);
                }
                Ok(Answer {
                    response: wire,
                    hold: response.delay,
                })
            }
            Err(EngineError::InvalidArgument(message)) => {
                tracing::debug!(domain = %request.domain, %message, "invalid ShouldRateLimit request");
                Err(Status::invalid_argument(message))
            }
        }
    }
}

impl<C: Clock> Clone for RateLimitGrpc<C> {
    fn clone(&self) -> Self {
        RateLimitGrpc {
            engine: Arc::clone(&self.engine),
            headers: Arc::clone(&self.headers),
            metrics: self.metrics.clone(),
            caps: self.caps,
            quota: Arc::clone(&self.quota),
        }
    }
}

impl<C: Clock> std::fmt::Debug for RateLimitGrpc<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitGrpc")
            .field("engine", &self.engine)
            .field("headers", self.headers.options())
            .finish()
    }
}

impl<C: Clock> NamedService for RateLimitGrpc<C> {
    const NAME: &'static str = SERVICE_NAME;
}

impl<C: Clock + 'static> RateLimitGrpc<C> {
    /// Answers one call inside a `ShouldRateLimit` span that continues the
    /// caller's trace (its `traceparent` metadata) and records the answer.
    async fn traced(
        &self,
        engine: &Engine<C>,
        request: Request<wire::RateLimitRequest>,
    ) -> Result<Response<wire::RateLimitResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        let span = tracing::info_span!(
            target: trace_context::TARGET,
            "ShouldRateLimit",
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = SERVICE_NAME,
            ratelimit.domain = %request.domain,
            ratelimit.descriptors = request.descriptors.len(),
            ratelimit.overall = tracing::field::Empty,
        );
        trace_context::continue_from(&span, &metadata.into_headers());
        let answer = span
            .in_scope(|| self.answer_call(engine, request))
            .instrument(span.clone())
            .await;
        let answer = match answer {
            Ok(answer) => Ok(answer.delivered().await),
            Err(status) => Err(status),
        };
        match &answer {
            Ok(response) => span.record(
                "ratelimit.overall",
                if response.overall_code == wire::CODE_OVER_LIMIT {
                    "OVER_LIMIT"
                } else {
                    "OK"
                },
            ),
            Err(status) => span.record("ratelimit.overall", status.code().description()),
        };
        answer.map(Response::new)
    }
}

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The engine a call answers from, loaded when its request has been decoded
/// and kept until the answer is sent.
type EngineSlot<C> = OnceLock<arc_swap::Guard<Arc<Engine<C>>>>;

/// One `ShouldRateLimit` call, answered by [`answer_unary`].
struct OneCall<'a, C: Clock> {
    service: &'a RateLimitGrpc<C>,
    engine: &'a EngineSlot<C>,
}

impl<'a, C: Clock + 'static> UnaryService<wire::RateLimitRequest> for OneCall<'a, C> {
    type Response = wire::RateLimitResponse;
    /// Ready at once when the engine needs no store call and no shaper
    /// holds the answer; a boxed future otherwise.
    type Future = Either<
        std::future::Ready<Result<Response<wire::RateLimitResponse>, Status>>,
        Pin<
            Box<dyn Future<Output = Result<Response<wire::RateLimitResponse>, Status>> + Send + 'a>,
        >,
    >;

    fn call(&mut self, request: Request<wire::RateLimitRequest>) -> Self::Future {
        let service = self.service;
        let slot: &'a EngineSlot<C> = self.engine;
        let engine: &'a Engine<C> = slot.get_or_init(|| service.engine.load());
        if trace_context::enabled() {
            return Either::Right(Box::pin(service.traced(engine, request)));
        }
        match service.answer_call(engine, request.into_inner()) {
            Either::Left(ready) => match ready.into_inner() {
                Ok(answer) if !answer.hold.is_zero() => Either::Right(Box::pin(async move {
                    Ok(Response::new(answer.delivered().await))
                })),
                answered => Either::Left(std::future::ready(
                    answered.map(|answer| Response::new(answer.response)),
                )),
            },
            Either::Right(from_store) => Either::Right(Box::pin(async move {
                let answer = from_store.await?;
                Ok(Response::new(answer.delivered().await))
            })),
        }
    }
}

impl<C: Clock + 'static> tonic::codegen::Service<http::Request<tonic::body::Body>>
    for RateLimitGrpc<C>
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        RateLimitGrpc::answer_http(Arc::new(self.clone()), request)
    }
}

impl<C: Clock + 'static> RateLimitGrpc<C> {
    /// Answers one HTTP/2 request as tonic's unary handler does (see [`answer_unary`]), from a
    /// shared `service` (the connection's: a call costs one count on its
    /// `Arc`, not one on each of the service's parts).
    pub(crate) fn answer_http<B>(
        service: Arc<Self>,
        request: http::Request<B>,
    ) -> BoxFuture<Result<http::Response<tonic::body::Body>, Infallible>>
    where
        B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send,
    {
        if request.uri().path() != SHOULD_RATE_LIMIT_PATH {
            let path = request.uri().path().to_owned();
            return Box::pin(async move {
                Ok(Status::unimplemented(format!("no method {path}")).into_http())
            });
        }
        Box::pin(async move {
            let caps = service.caps;
            let codec =
                RlsCodec::<wire::RateLimitResponse, wire::RateLimitRequest>::with_caps(caps);
            let engine = EngineSlot::new();
            let call = OneCall {
                service: &service,
                engine: &engine,
            };
            Ok(framing_errors_are_invalid_argument(
                answer_unary(codec, caps.max_message_bytes, call, request).await,
            ))
        })
    }
}

/// `response` with a status tonic answered in its headers (a trailers-only
/// response) changed from INTERNAL to INVALID_ARGUMENT.
///
/// tonic answers INTERNAL when it cannot read the request's gRPC frame (a
/// compressed flag without `grpc-encoding`, a length prefix longer than the
/// body). That happens before the call reaches this service, which never
/// answers INTERNAL itself, and the fault is the client's: INVALID_ARGUMENT,
/// with tonic's message naming the problem, is what it can act on. A status
/// in the trailers (an error while sending the response) is left alone.
fn framing_errors_are_invalid_argument(
    mut response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
    let headers = response.headers_mut();
    if let Some(status) = headers.get_mut(GRPC_STATUS)
        && status.as_bytes() == b"13"
    {
        *status = http::HeaderValue::from_static("3");
    }
    response
}

/// The proxy's in-process global rate limit: the same answer as over gRPC, without the hop or a conversion.
impl<C: Clock + 'static> tollgate_protocol::rls::InProcessService for RateLimitGrpc<C> {
    fn should_rate_limit(
        &self,
        request: RateLimitRequest,
        metadata: http::HeaderMap,
    ) -> tollgate_protocol::rls::InProcessAnswer {
        let service = self.clone();
        let span = trace_context::enabled().then(|| {
            let span = tracing::info_span!(
                target: trace_context::TARGET,
                "ShouldRateLimit",
                otel.kind = "internal",
                ratelimit.domain = %request.domain,
                ratelimit.descriptors = request.descriptors.len(),
            );
            trace_context::continue_from(&span, &metadata);
            span
        });
        let answered = async move {
            let start = service.metrics.as_ref().map(|m| m.start());
            let engine = service.engine.load();
            let answer = service.answer(&engine, request, start).await?;
            Ok(answer.delivered().await)
        };
        match span {
            Some(span) => Box::pin(answered.instrument(span)),
            None => Box::pin(answered),
        }
    }
}
