//! The gRPC front end: Envoy's `RateLimitService` and the standard health service over an [`Engine`].
//!
//! [`RateLimitGrpc`] maps `envoy.service.ratelimit.v3.RateLimitRequest` onto
//! the engine's [`RateLimitRequest`] and its answer back onto the wire:
//!
//! * `overall_code` is OK or OVER_LIMIT, never UNKNOWN (Envoy reads UNKNOWN as OK).
//! * One status per descriptor, in request order, with `current_limit` only
//!   when a limit applied.
//! * `duration_until_reset` is rounded **up** to whole seconds, like
//!   upstream reports it, so it is never earlier than the real reset.
//! * A malformed request is `INVALID_ARGUMENT` with the engine's message.
//! * With [`HeaderOptions`](crate::headers::HeaderOptions) switched on, the
//!   headers go in `response_headers_to_add` and the 429 body in `raw_body`
//!   (only on OVER_LIMIT); Envoy adds both to its reply. Off by default.
//!
//! The messages are declared in [`wire`] rather than taken from
//! `envoy-types`, whose generated code (0.7.7) predates the newer
//! `unit_multiplier` fields (`RateLimitOverride` field 3, `RateLimit` field
//! 4) and would drop them; they are wire-compatible with it otherwise, so
//! `envoy-types` clients and Envoy itself talk to this service unchanged.
//!
//! [`serve`] runs both services on a listener until a shutdown future
//! completes, then drains the calls in flight; [`should_rate_limit`] is a
//! minimal client for the same messages.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use futures_util::future::Either;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate_core::{Clock, Timestamp, Unit};
use tonic::codec::{BufferSettings, Codec};
use tonic::codegen::http;
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_prost::{ProstDecoder, ProstEncoder};

use crate::engine::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, Engine, EngineError, LimitOverride,
    RateLimitRequest, RateLimitResponse,
};
use crate::headers::ResponseHeaders;
use crate::metrics::Metrics;
use crate::reload::LiveEngine;

/// The RLS v3 messages this service reads and writes, field for field with Envoy 1.40's protos.
///
/// Enumerations are kept as their `i32` wire numbers; the `CODE_*` and
/// `UNIT_*` constants name them. Response fields the service never sets
/// (`request_headers_to_add`, `dynamic_metadata`, `quota`) are left out,
/// which on the wire is the same as leaving them empty.
pub mod wire {
    use envoy_types::pb::google::protobuf::{Duration, UInt32Value, UInt64Value};

    /// The UNKNOWN code (`RateLimitResponse.Code`), never sent by this service.
    pub const CODE_UNKNOWN: i32 = 0;
    /// The OK code.
    pub const CODE_OK: i32 = 1;
    /// The OVER_LIMIT code.
    pub const CODE_OVER_LIMIT: i32 = 2;

    /// The UNKNOWN unit (`RateLimitUnit` and `RateLimit.Unit`).
    pub const UNIT_UNKNOWN: i32 = 0;
    /// The SECOND unit.
    pub const UNIT_SECOND: i32 = 1;
    /// The MINUTE unit.
    pub const UNIT_MINUTE: i32 = 2;
    /// The HOUR unit.
    pub const UNIT_HOUR: i32 = 3;
    /// The DAY unit.
    pub const UNIT_DAY: i32 = 4;
    /// The MONTH unit.
    pub const UNIT_MONTH: i32 = 5;
    /// The YEAR unit.
    pub const UNIT_YEAR: i32 = 6;
    /// The WEEK unit, only in `RateLimit.Unit` and numbered after YEAR.
    pub const UNIT_WEEK: i32 = 7;

    /// The request (`envoy.service.ratelimit.v3.RateLimitRequest`).
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RateLimitRequest {
        /// The domain.
        #[prost(string, tag = "1")]
        pub domain: String,
        /// The descriptors.
        #[prost(message, repeated, tag = "2")]
        pub descriptors: Vec<RateLimitDescriptor>,
        /// Hits for every descriptor; 0 means 1.
        #[prost(uint32, tag = "3")]
        pub hits_addend: u32,
    }

    /// One descriptor (`envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`).
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RateLimitDescriptor {
        /// The ordered entries.
        #[prost(message, repeated, tag = "1")]
        pub entries: Vec<Entry>,
        /// A limit replacing the configured one.
        #[prost(message, optional, tag = "2")]
        pub limit: Option<RateLimitOverride>,
        /// Hits for this descriptor, overriding the request's.
        #[prost(message, optional, tag = "3")]
        pub hits_addend: Option<UInt64Value>,
        /// Give the hits back instead of consuming them.
        #[prost(bool, tag = "4")]
        pub is_negative_hits: bool,
    }

    /// One key and value of a descriptor (`RateLimitDescriptor.Entry`).
    #[derive(Clone, PartialEq, Eq, ::prost::Message)]
    pub struct Entry {
        /// The key.
        #[prost(string, tag = "1")]
        pub key: String,
        /// The value.
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// A limit sent with a descriptor (`RateLimitDescriptor.RateLimitOverride`).
    #[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
    pub struct RateLimitOverride {
        /// Requests per window.
        #[prost(uint32, tag = "1")]
        pub requests_per_unit: u32,
        /// The unit, an `envoy.type.v3.RateLimitUnit` number (SECOND 1 … YEAR 6).
        #[prost(int32, tag = "2")]
        pub unit: i32,
        /// Units per window; absent or 0 means 1.
        #[prost(message, optional, tag = "3")]
        pub unit_multiplier: Option<UInt32Value>,
    }

    /// The response, with the fields this service sets (`envoy.service.ratelimit.v3.RateLimitResponse`).
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RateLimitResponse {
        /// OK or OVER_LIMIT.
        #[prost(int32, tag = "1")]
        pub overall_code: i32,
        /// One status per request descriptor, in order.
        #[prost(message, repeated, tag = "2")]
        pub statuses: Vec<DescriptorStatus>,
        /// Headers Envoy adds to its reply to the client.
        #[prost(message, repeated, tag = "3")]
        pub response_headers_to_add: Vec<HeaderValue>,
        /// The body of Envoy's OVER_LIMIT reply; empty for Envoy's own.
        #[prost(bytes = "vec", tag = "5")]
        pub raw_body: Vec<u8>,
    }

    /// One header (`envoy.config.core.v3.HeaderValue`, without the `raw_value` bytes form).
    #[derive(Clone, PartialEq, Eq, ::prost::Message)]
    pub struct HeaderValue {
        /// The header's name.
        #[prost(string, tag = "1")]
        pub key: String,
        /// Its value.
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// The answer for one descriptor, without the unimplemented `quota` (`RateLimitResponse.DescriptorStatus`).
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct DescriptorStatus {
        /// OK or OVER_LIMIT.
        #[prost(int32, tag = "1")]
        pub code: i32,
        /// The limit that applied, if any.
        #[prost(message, optional, tag = "2")]
        pub current_limit: Option<RateLimit>,
        /// Units left in the window.
        #[prost(uint32, tag = "3")]
        pub limit_remaining: u32,
        /// Time until the limit resets, in whole seconds.
        #[prost(message, optional, tag = "4")]
        pub duration_until_reset: Option<Duration>,
    }

    /// The limit a status reports (`RateLimitResponse.RateLimit`).
    #[derive(Clone, PartialEq, Eq, ::prost::Message)]
    pub struct RateLimit {
        /// The limit's name, empty when unnamed.
        #[prost(string, tag = "3")]
        pub name: String,
        /// Requests per window.
        #[prost(uint32, tag = "1")]
        pub requests_per_unit: u32,
        /// The unit, a `RateLimit.Unit` number (SECOND 1 … YEAR 6, WEEK 7).
        #[prost(int32, tag = "2")]
        pub unit: i32,
        /// Units per window.
        #[prost(message, optional, tag = "4")]
        pub unit_multiplier: Option<UInt32Value>,
    }
}

/// The gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// The HTTP/2 path of the one method.
pub const SHOULD_RATE_LIMIT_PATH: &str =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The service name upstream envoyproxy/ratelimit registers with the health service.
pub const UPSTREAM_HEALTH_NAME: &str = "ratelimit";

/// Envoy's `envoy.service.ratelimit.v3.RateLimitService`, answered by an [`Engine`]; cheap to clone.
///
/// It answers from a [`LiveEngine`], loading the engine in service once per
/// call, so a reload takes effect on the next call without a lock.
pub struct RateLimitGrpc<C: Clock> {
    engine: Arc<LiveEngine<C>>,
    headers: Arc<ResponseHeaders>,
    metrics: Option<Arc<Metrics>>,
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
        }
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

    /// Answers one decoded call.
    pub fn decide(
        &self,
        request: wire::RateLimitRequest,
    ) -> Result<wire::RateLimitResponse, Status> {
        let start = self.metrics.as_ref().map(|m| m.start());
        let request = engine_request(request);
        let engine = self.engine.load();
        let answer = engine.should_rate_limit(&request);
        self.respond(&engine, &request, answer, start)
    }

    /// Answers one decoded call through the engine's shared store (Redis).
    pub async fn decide_shared(
        &self,
        request: wire::RateLimitRequest,
    ) -> Result<wire::RateLimitResponse, Status> {
        let start = self.metrics.as_ref().map(|m| m.start());
        let request = engine_request(request);
        let engine = self.engine.load();
        let answer = engine.decide(&request).await;
        self.respond(&engine, &request, answer, start)
    }

    /// The wire answer for an engine answer, counted in the metrics.
    fn respond(
        &self,
        engine: &Engine<C>,
        request: &RateLimitRequest,
        answer: Result<RateLimitResponse, EngineError>,
        start: Option<Timestamp>,
    ) -> Result<wire::RateLimitResponse, Status> {
        if let (Some(metrics), Some(start)) = (&self.metrics, start) {
            if let Ok(response) = &answer {
                metrics.observe(engine.rules(), request, response);
            }
            metrics.observe_duration("grpc", start);
        }
        match answer {
            Ok(response) => {
                let mut wire = wire_response(&response);
                let rendered = self.headers.render(&request.descriptors, &response);
                wire.response_headers_to_add = rendered
                    .headers
                    .into_iter()
                    .map(|(key, value)| wire::HeaderValue { key, value })
                    .collect();
                wire.raw_body = rendered.raw_body.unwrap_or_default();
                Ok(wire)
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

/// A boxed, sendable future.
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<C: Clock + 'static> UnaryService<wire::RateLimitRequest> for RateLimitGrpc<C> {
    type Response = wire::RateLimitResponse;
    /// Ready at once in memory; a boxed future only when the counters live in Redis.
    type Future = Either<
        std::future::Ready<Result<Response<wire::RateLimitResponse>, Status>>,
        BoxFuture<Result<Response<wire::RateLimitResponse>, Status>>,
    >;

    fn call(&mut self, request: Request<wire::RateLimitRequest>) -> Self::Future {
        if self.engine.load().remote().is_none() {
            return Either::Left(std::future::ready(
                self.decide(request.into_inner()).map(Response::new),
            ));
        }
        let service = self.clone();
        Either::Right(Box::pin(async move {
            service
                .decide_shared(request.into_inner())
                .await
                .map(Response::new)
        }))
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
        if request.uri().path() != SHOULD_RATE_LIMIT_PATH {
            let path = request.uri().path().to_owned();
            return Box::pin(async move {
                Ok(Status::unimplemented(format!("no method {path}")).into_http())
            });
        }
        let service = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RlsCodec::<
                wire::RateLimitResponse,
                wire::RateLimitRequest,
            >::default());
            Ok(grpc.unary(service, request).await)
        })
    }
}

/// The protobuf codec of `ShouldRateLimit`, with buffers sized for its messages.
///
/// tonic allocates the codec's buffer for every call; its default of 8 KiB
/// is far more than an RLS request or answer needs (a few hundred bytes),
/// and that much per call costs the allocator more than the call's own
/// work. Larger messages still fit: the buffer grows in steps of this size.
/// `E` is the message sent, `D` the one received: the server encodes
/// responses, a client encodes requests.
struct RlsCodec<E, D>(PhantomData<fn(E) -> D>);

impl<E, D> Default for RlsCodec<E, D> {
    fn default() -> Self {
        RlsCodec(PhantomData)
    }
}

/// The codec buffer's size and growth step, in bytes.
const CODEC_BUFFER_BYTES: usize = 512;

impl<E, D> Codec for RlsCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProstEncoder<E>;
    type Decoder = ProstDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(codec_buffer())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(codec_buffer())
    }
}

/// tonic's own yield threshold (32 KiB), which only streams ever reach.
const CODEC_YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

fn codec_buffer() -> BufferSettings {
    BufferSettings::new(CODEC_BUFFER_BYTES, CODEC_YIELD_THRESHOLD_BYTES)
}

/// The engine's form of a wire request.
pub fn engine_request(request: wire::RateLimitRequest) -> RateLimitRequest {
    RateLimitRequest {
        domain: request.domain,
        descriptors: request
            .descriptors
            .into_iter()
            .map(engine_descriptor)
            .collect(),
        hits_addend: request.hits_addend,
    }
}

/// The engine's form of one wire descriptor.
fn engine_descriptor(descriptor: wire::RateLimitDescriptor) -> Descriptor {
    Descriptor {
        entries: descriptor
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect(),
        limit: descriptor.limit.map(|limit| LimitOverride {
            requests_per_unit: limit.requests_per_unit,
            unit: override_unit(limit.unit),
            unit_multiplier: limit.unit_multiplier.map(|m| m.value),
        }),
        hits_addend: descriptor.hits_addend.map(|h| h.value),
        is_negative_hits: descriptor.is_negative_hits,
    }
}

/// The unit of a `RateLimitOverride` (`envoy.type.v3.RateLimitUnit`, which
/// has no WEEK); `None` for UNKNOWN or any other number, which the engine
/// rejects with a message.
fn override_unit(unit: i32) -> Option<Unit> {
    match unit {
        wire::UNIT_SECOND => Some(Unit::Second),
        wire::UNIT_MINUTE => Some(Unit::Minute),
        wire::UNIT_HOUR => Some(Unit::Hour),
        wire::UNIT_DAY => Some(Unit::Day),
        wire::UNIT_MONTH => Some(Unit::Month),
        wire::UNIT_YEAR => Some(Unit::Year),
        _ => None,
    }
}

/// The wire form of the engine's answer.
pub fn wire_response(response: &RateLimitResponse) -> wire::RateLimitResponse {
    wire::RateLimitResponse {
        overall_code: wire_code(response.overall),
        statuses: response.statuses.iter().map(wire_status).collect(),
        response_headers_to_add: Vec::new(),
        raw_body: Vec::new(),
    }
}

fn wire_code(code: Code) -> i32 {
    match code {
        Code::Ok => wire::CODE_OK,
        Code::OverLimit => wire::CODE_OVER_LIMIT,
    }
}

fn wire_status(status: &DescriptorStatus) -> wire::DescriptorStatus {
    wire::DescriptorStatus {
        code: wire_code(status.code),
        current_limit: status.current_limit.as_ref().map(wire_limit),
        limit_remaining: status.limit_remaining,
        duration_until_reset: status.duration_until_reset.map(whole_seconds_up),
    }
}

fn wire_limit(limit: &CurrentLimit) -> wire::RateLimit {
    wire::RateLimit {
        name: limit.name.clone(),
        requests_per_unit: limit.requests_per_unit,
        unit: wire_unit(limit.unit),
        unit_multiplier: Some(UInt32Value {
            value: limit.unit_multiplier.max(1),
        }),
    }
}

/// The `RateLimit.Unit` number of `unit`.
pub fn wire_unit(unit: Unit) -> i32 {
    match unit {
        Unit::Second => wire::UNIT_SECOND,
        Unit::Minute => wire::UNIT_MINUTE,
        Unit::Hour => wire::UNIT_HOUR,
        Unit::Day => wire::UNIT_DAY,
        Unit::Week => wire::UNIT_WEEK,
        Unit::Month => wire::UNIT_MONTH,
        Unit::Year => wire::UNIT_YEAR,
    }
}

/// The lower-case name of a `RateLimit.Unit` number (`minute`), or `unit#N` for an unknown one.
pub fn unit_name(unit: i32) -> String {
    match unit {
        wire::UNIT_SECOND => "second".to_owned(),
        wire::UNIT_MINUTE => "minute".to_owned(),
        wire::UNIT_HOUR => "hour".to_owned(),
        wire::UNIT_DAY => "day".to_owned(),
        wire::UNIT_WEEK => "week".to_owned(),
        wire::UNIT_MONTH => "month".to_owned(),
        wire::UNIT_YEAR => "year".to_owned(),
        other => format!("unit#{other}"),
    }
}

/// The name of a `Code` number: `OK`, `OVER_LIMIT` or `UNKNOWN`.
pub fn code_name(code: i32) -> &'static str {
    match code {
        wire::CODE_OK => "OK",
        wire::CODE_OVER_LIMIT => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// Rounds `d` up to whole seconds, as a protobuf duration.
pub fn whole_seconds_up(d: Duration) -> PbDuration {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    PbDuration {
        seconds: i64::try_from(secs).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// Serves the rate limit and health services on `listener` until `shutdown`
/// completes, then stops accepting and waits for the calls in flight.
///
/// The health service reports SERVING for the whole server (`""`), for
/// upstream's name (`ratelimit`) and for [`SERVICE_NAME`]. No response
/// headers are added; [`serve_with`] takes a service that adds them.
pub async fn serve<C, F>(
    listener: TcpListener,
    engine: Arc<Engine<C>>,
    shutdown: F,
) -> io::Result<()>
where
    C: Clock + 'static,
    F: Future<Output = ()> + Send,
{
    serve_with(listener, RateLimitGrpc::new(engine), shutdown).await
}

/// [`serve`] with a configured service (for instance one built by [`RateLimitGrpc::with_headers`]).
///
/// Connections are served by hyper's HTTP/2 server directly, with the two
/// tonic services behind a match on the path: a server with two fixed
/// services needs none of the routing and layers of tonic's own transport,
/// and skipping them is a good part of the CPU a call costs. An error
/// accepting a connection (such as running out of file descriptors) is
/// logged and retried after a short pause; it does not stop the server.
pub async fn serve_with<C, F>(
    listener: TcpListener,
    service: RateLimitGrpc<C>,
    shutdown: F,
) -> io::Result<()>
where
    C: Clock + 'static,
    F: Future<Output = ()> + Send,
{
    let reporter = HealthReporter::new();
    for name in ["", UPSTREAM_HEALTH_NAME, SERVICE_NAME] {
        reporter
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    // With a shared store, the service's health follows the store (checked every second).
    let store_reporter = reporter.clone();
    let store_watch = service.engine().remote().cloned().map(|remote| {
        tokio::spawn(async move {
            let mut serving = true;
            loop {
                tokio::time::sleep(STORE_HEALTH_PERIOD).await;
                let up = remote.redis().ping().await.is_ok();
                if up != serving {
                    serving = up;
                    let status = if up {
                        ServingStatus::Serving
                    } else {
                        ServingStatus::NotServing
                    };
                    for name in [UPSTREAM_HEALTH_NAME, SERVICE_NAME] {
                        store_reporter.set_service_status(name, status).await;
                    }
                }
            }
        })
    });
    let services = GrpcServices {
        rate_limit: service,
        health: HealthServer::new(HealthService::from_health_reporter(reporter)),
    };
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .keep_alive_interval(Some(KEEP_ALIVE_INTERVAL))
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a gRPC connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let connection = http2.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(services.clone()),
        );
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "gRPC connection ended with an error");
            }
        });
    }
    drop(listener);
    if let Some(task) = store_watch {
        task.abort();
    }
    connections.shutdown().await;
    Ok(())
}

/// Streams a client may open at once on one connection (Envoy opens up to 100 per connection by default, then more connections).
const MAX_CONCURRENT_STREAMS: u32 = 1024;
/// The HTTP/2 flow-control window of each call, in bytes.
const STREAM_WINDOW_BYTES: u32 = 1024 * 1024;
/// The HTTP/2 flow-control window of a connection, in bytes.
const CONNECTION_WINDOW_BYTES: u32 = 8 * 1024 * 1024;
/// How often an idle connection is pinged.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// The pause after a failed `accept`, so a full file table does not spin a core.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The path prefix of the standard health service's methods.
const HEALTH_PATH_PREFIX: &str = "/grpc.health.v1.Health/";

/// The two services of a gRPC connection, chosen by the request's path.
struct GrpcServices<C: Clock> {
    rate_limit: RateLimitGrpc<C>,
    health: HealthServer<HealthService>,
}

impl<C: Clock> Clone for GrpcServices<C> {
    fn clone(&self) -> Self {
        GrpcServices {
            rate_limit: self.rate_limit.clone(),
            health: self.health.clone(),
        }
    }
}

impl<C: Clock + 'static> tonic::codegen::Service<http::Request<Incoming>> for GrpcServices<C> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        let request = request.map(tonic::body::Body::new);
        if request.uri().path().starts_with(HEALTH_PATH_PREFIX) {
            let mut health = self.health.clone();
            Box::pin(async move { health.call(request).await })
        } else {
            tonic::codegen::Service::call(&mut self.rate_limit, request)
        }
    }
}

/// How often gRPC health re-checks a shared store.
const STORE_HEALTH_PERIOD: Duration = Duration::from_secs(1);

/// Sends one `ShouldRateLimit` call on `channel` (a minimal client for [`wire`]'s messages).
pub async fn should_rate_limit(
    channel: tonic::transport::Channel,
    request: wire::RateLimitRequest,
) -> Result<wire::RateLimitResponse, Status> {
    let mut client = tonic::client::Grpc::new(channel);
    client
        .ready()
        .await
        .map_err(|error| Status::unavailable(format!("the service is not ready: {error}")))?;
    let codec = RlsCodec::<wire::RateLimitRequest, wire::RateLimitResponse>::default();
    client
        .unary(
            Request::new(request),
            http::uri::PathAndQuery::from_static(SHOULD_RATE_LIMIT_PATH),
            codec,
        )
        .await
        .map(Response::into_inner)
}
