//! The gRPC serve loop: the rate limit and health services on one listener, over hyper's HTTP/2 server.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tollgate_core::Clock;
use tollgate_protocol::rls::wire::{SERVICE_NAME, UPSTREAM_HEALTH_NAME};
use tollgate_runtime::{
    AbortOnDrop, AcceptOptions, ConnectionAge, ConnectionLimit, serve_connections,
};
use tollgate_tls::TlsAcceptor;
use tonic::codegen::http;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use super::authority::{AuthorityFront, InboundLimits};
use super::service::{BoxFuture, RateLimitGrpc};
use crate::engine::Engine;
use crate::rlqs::{QuotaBook, RlqsService};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;

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
/// Each connection is read through an [`AuthorityFront`], so a client that
/// sends a cluster name as `:authority` (Envoy in Istio) is served too.
pub async fn serve_with<C, F>(
    listener: TcpListener,
    service: RateLimitGrpc<C>,
    shutdown: F,
) -> io::Result<()>
where
    C: Clock + 'static,
    F: Future<Output = ()> + Send,
{
    serve_capped(listener, service, GrpcLimits::default(), shutdown).await
}

/// What the gRPC listener allows its clients.
#[derive(Clone, Debug, Default)]
pub struct GrpcLimits {
    /// The most connections open at once (`None`: no limit); past it new
    /// clients wait in the listen backlog.
    pub connection_limit: Option<Arc<ConnectionLimit>>,
    /// TLS on every connection (`None`: plain HTTP/2); the acceptor should offer ALPN `h2`.
    pub tls: Option<TlsAcceptor>,
    /// Each connection sent GOAWAY once older than this, plus jitter, and
    /// closed after its grace (`None`: connections live as long as their
    /// clients keep them). Rebalances long-lived Envoy connections after a
    /// scale-out.
    pub max_connection_age: Option<ConnectionAge>,
}

/// [`serve_with`] within `limits`: at most `connection_limit` connections
/// open (while it is reached nothing is accepted, new clients wait in the
/// listen backlog and the accept loop logs `connection limit reached`, see
/// [`serve_connections`]); with `tls`, every connection is TLS (the
/// handshake completes before HTTP/2 sees a byte); with
/// `max_connection_age`, connections are aged out.
pub async fn serve_capped<C, F>(
    listener: TcpListener,
    service: RateLimitGrpc<C>,
    grpc_limits: GrpcLimits,
    shutdown: F,
) -> io::Result<()>
where
    C: Clock + 'static,
    F: Future<Output = ()> + Send,
{
    let server = GrpcServer::start(service, grpc_limits).await;
    let acceptor = server.acceptor();
    acceptor.accept(listener, shutdown).await;
    Ok(())
}

/// A gRPC server's shared parts: the health reporter's store watch and the
/// quota payer run on the runtime that started it, until it is dropped;
/// its [`Acceptor`]s serve connections on whichever runtime runs them.
pub(super) struct GrpcServer<C: Clock> {
    acceptor: Acceptor<C>,
    /// The store's health watch and the quota payer, aborted on drop.
    _background: AbortOnDrop,
}

impl<C: Clock + 'static> GrpcServer<C> {
    /// Sets the health statuses, spawns the store watch and the quota payer
    /// on the current runtime, and builds the services.
    pub(super) async fn start(service: RateLimitGrpc<C>, grpc_limits: GrpcLimits) -> Self {
        let reporter = HealthReporter::new();
        for name in ["", UPSTREAM_HEALTH_NAME, SERVICE_NAME] {
            reporter
                .set_service_status(name, ServingStatus::Serving)
                .await;
        }
        // With a shared store, the service's health follows the replica's readiness
        // (RemoteStore::check_ready, checked every second).
        let store_reporter = reporter.clone();
        let store_watch = service.engine().remote().cloned().map(|remote| {
            tokio::spawn(async move {
                let mut serving = true;
                loop {
                    tokio::time::sleep(STORE_HEALTH_PERIOD).await;
                    let up = remote.check_ready().await.is_ok();
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
        let quota_book = Arc::clone(service.quota_book());
        // The quota service's shares are paid for from the budget RLS callers spend.
        // One clock for the rounds and the reports: the time Envoys' buckets refill in.
        let quota_clock = tollgate_core::MonotonicClock::new();
        let quota_payer = tokio::spawn(crate::rlqs::pay_every(
            Arc::clone(service.live_engine()),
            Arc::clone(&quota_book),
            crate::rlqs::PAY_TICK,
            quota_clock.clone(),
        ));
        let services = GrpcServices {
            quota: RateLimitQuotaServiceServer::new(RlqsService::new(
                Arc::clone(service.live_engine()),
                Arc::clone(&quota_book),
                quota_clock,
            )),
            rate_limit: Arc::new(service),
            health: HealthServer::new(HealthService::from_health_reporter(reporter)),
        };
        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            // gRPC reads no `date`: rendering and encoding it cost ~2 % of a call's instructions.
            .auto_date_header(false)
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .keep_alive_interval(Some(KEEP_ALIVE_INTERVAL))
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .max_frame_size(MAX_FRAME_BYTES)
            .max_header_list_size(MAX_HEADER_LIST_BYTES);
        let options = AcceptOptions {
            name: "gRPC",
            drain_timeout: None,
            connection_limit: grpc_limits.connection_limit,
            tls: grpc_limits.tls,
            max_connection_age: grpc_limits.max_connection_age,
        };
        GrpcServer {
            acceptor: Acceptor {
                services,
                quota_book,
                http2,
                options,
            },
            _background: AbortOnDrop::new(store_watch.into_iter().chain([quota_payer])),
        }
    }

    /// An accept loop's own copy of the services and settings.
    pub(super) fn acceptor(&self) -> Acceptor<C> {
        Acceptor {
            services: self.acceptor.services.for_connection(),
            quota_book: Arc::clone(&self.acceptor.quota_book),
            http2: self.acceptor.http2.clone(),
            options: self.acceptor.options.clone(),
        }
    }
}

/// What one accept loop serves its connections with; the tasks of its
/// connections run on the runtime that runs [`Acceptor::accept`].
pub(super) struct Acceptor<C: Clock> {
    services: GrpcServices<C>,
    quota_book: Arc<QuotaBook>,
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    options: AcceptOptions,
}

impl<C: Clock + 'static> Acceptor<C> {
    /// Accepts on `listener` until `shutdown` completes (every quota stream
    /// is then ended, so the drain can finish), then drains its connections.
    pub(super) async fn accept<F>(self, listener: TcpListener, shutdown: F)
    where
        F: Future<Output = ()> + Send,
    {
        let Acceptor {
            services,
            quota_book,
            http2,
            options,
        } = self;
        // Quota streams never end by themselves: at shutdown they are ended, so the drain can finish.
        let shutdown = async move {
            shutdown.await;
            crate::rlqs::with_book(&quota_book, QuotaBook::close_all).await;
        };
        let limits = InboundLimits {
            max_frame_size: MAX_FRAME_BYTES as usize,
            max_header_list_size: MAX_HEADER_LIST_BYTES as usize,
        };
        serve_connections(listener, shutdown, options, |stream, _peer| {
            http2.serve_connection(
                TokioIo::new(AuthorityFront::new(stream, limits)),
                services.for_connection(),
            )
        })
        .await;
    }
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

/// The longest frame payload a client may send (hyper's default, stated so the authority front holds clients to the same).
const MAX_FRAME_BYTES: u32 = 16 * 1024;
/// The largest request header list (hyper's default, stated so the authority front bounds its header blocks by the same).
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// The path prefix of the rate limit quota service's method.
const QUOTA_PATH_PREFIX: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/";

/// The path prefix of the standard health service's methods.
const HEALTH_PATH_PREFIX: &str = "/grpc.health.v1.Health/";

/// The two services of a gRPC connection, chosen by the request's path.
struct GrpcServices<C: Clock> {
    /// Each connection's own copy, so a call counts on its connection's
    /// `Arc` only: connections served by different threads share no count.
    rate_limit: Arc<RateLimitGrpc<C>>,
    quota: RateLimitQuotaServiceServer<RlqsService<C>>,
    health: HealthServer<HealthService>,
}

impl<C: Clock> GrpcServices<C> {
    /// The services for a new connection.
    fn for_connection(&self) -> Self {
        GrpcServices {
            rate_limit: Arc::new(RateLimitGrpc::clone(&self.rate_limit)),
            quota: self.quota.clone(),
            health: self.health.clone(),
        }
    }
}

/// Served by hyper directly (not through tower's `Service`, whose adapter
/// clones every service of the connection for each call).
impl<C: Clock + 'static> hyper::service::Service<http::Request<Incoming>> for GrpcServices<C> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        if request.uri().path().starts_with(HEALTH_PATH_PREFIX) {
            let mut health = self.health.clone();
            let request = request.map(tonic::body::Body::new);
            Box::pin(async move { tonic::codegen::Service::call(&mut health, request).await })
        } else if request.uri().path().starts_with(QUOTA_PATH_PREFIX) {
            let mut quota = self.quota.clone();
            let request = request.map(tonic::body::Body::new);
            Box::pin(async move { tonic::codegen::Service::call(&mut quota, request).await })
        } else {
            // hyper's body as it is: tonic's decoder boxes it once, no second box around it.
            RateLimitGrpc::answer_http(Arc::clone(&self.rate_limit), request)
        }
    }
}

/// How often gRPC health re-checks a shared store.
const STORE_HEALTH_PERIOD: Duration = Duration::from_secs(1);
