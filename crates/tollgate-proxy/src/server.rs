//! The listeners: HTTP/1.1 and h2c on each, routing, graceful drain, hot reload and the admin endpoints.
//!
//! [`Proxy`] holds the current [`Runtime`] in an `ArcSwap`: a request
//! loads it once when it arrives and keeps that generation until it is
//! answered, so a reload never drops or changes a request in flight.
//! [`serve`] accepts until its shutdown future completes, then stops
//! accepting, lets every connection finish its requests (up to the drain
//! timeout) and returns; [`watch_config`] reloads the proxy when its files
//! change. Both are tollgate-runtime's accept loop and config watcher.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tollgate_protocol::rls::RlsClient;
use tollgate_runtime::trace_context;
use tollgate_runtime::{
    AbortOnDrop, AcceptOptions, ConfigWatcher, ConnectionLimit, DEFAULT_DEBOUNCE, EveryEntry,
    Shutdown, serve_connections, watch_tls,
};
use tower::ServiceExt;
use tracing::Instrument;

use crate::body::ProxyBody;
use crate::build::{self, ListenerSpec, Runtime};
use crate::config::{self, ConfigError, ListenerLimits, ProxyConfig};
use crate::context::{ConnectionScope, RequestContext};
use crate::descriptors::trusted_client_address;
use crate::error::ProxyError;
use crate::header_timer::HeaderTimer;
use crate::idle::{Activity, IdleTimeout, InFlight};
use crate::local_ratelimit::SharedClock;
use crate::metrics::{Metrics, ReloadLabels, RouteCounters};
use crate::reply::{self, Dialect};

/// Where the configuration comes from.
#[derive(Clone, Debug)]
pub enum ConfigSource {
    /// The proxy's YAML file.
    File(PathBuf),
    /// A sidecar from flags: one listener, one upstream, and a local rate
    /// limit file (an Istio EnvoyFilter or a LocalRateLimit).
    Sidecar {
        /// The listener.
        listen: SocketAddr,
        /// The upstream endpoint.
        upstream: SocketAddr,
        /// The local rate limit file, if any.
        local_ratelimit: Option<PathBuf>,
        /// The admin address, if any.
        admin: Option<SocketAddr>,
    },
}

impl ConfigSource {
    /// Reads and builds a runtime; `in_process` is the rate limit service this proxy runs, if any.
    pub fn load(
        &self,
        clock: &SharedClock,
        metrics: &Metrics,
        in_process: Option<&RlsClient>,
    ) -> Result<Runtime, ConfigError> {
        match self {
            ConfigSource::File(path) => {
                let config = config::load_proxy_file(path)?;
                build::build(&config, path, clock, metrics, in_process)
            }
            ConfigSource::Sidecar {
                listen,
                upstream,
                local_ratelimit,
                admin,
            } => {
                let yaml = format!(
                    "listeners: [{{address: \"{listen}\"}}]\nclusters: [{{name: upstream, endpoints: [{{address: \"{upstream}\"}}]}}]\nroutes: [{{name: default, cluster: upstream}}]\n"
                );
                let mut config: ProxyConfig = serde_saphyr::from_str(&yaml)
                    .map_err(|e| ConfigError::new(Path::new("<flags>"), e.to_string()))?;
                config.local_ratelimit_file = local_ratelimit.clone();
                config.admin = admin.map(|address| config::AdminConfig { address });
                let anchor = PathBuf::from("./<flags>");
                build::build(&config, &anchor, clock, metrics, in_process)
            }
        }
    }
}

/// The running proxy: the current runtime, its metrics and clock.
pub struct Proxy {
    live: ArcSwap<Runtime>,
    source: ConfigSource,
    clock: SharedClock,
    /// The rate limit service in this process (`--limits`), if any.
    in_process: Option<RlsClient>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    draining: AtomicBool,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Loads the configuration once; an error here stops the start.
    pub fn load(source: ConfigSource, clock: SharedClock) -> Result<Arc<Self>, ConfigError> {
        Proxy::load_with(source, clock, None, Metrics::new())
    }

    /// [`Proxy::load`] with a rate limit service in this process, which a
    /// global rate limit with `rate_limit_service: {in_process: true}`
    /// calls, and the metrics to serve (with that service's).
    pub fn load_with(
        source: ConfigSource,
        clock: SharedClock,
        in_process: Option<RlsClient>,
        metrics: Metrics,
    ) -> Result<Arc<Self>, ConfigError> {
        let metrics = Arc::new(metrics);
        let runtime = source.load(&clock, &metrics, in_process.as_ref())?;
        Ok(Arc::new(Proxy {
            live: ArcSwap::from_pointee(runtime),
            source,
            clock,
            in_process,
            metrics,
            draining: AtomicBool::new(false),
        }))
    }

    /// The current runtime.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.live.load_full()
    }

    /// Reloads the configuration: all or nothing; on error the running one stays.
    pub fn reload(&self) -> Result<(), ConfigError> {
        match self
            .source
            .load(&self.clock, &self.metrics, self.in_process.as_ref())
        {
            Ok(runtime) => {
                let old = self.live.load();
                if runtime.listeners != old.listeners || runtime.admin != old.admin {
                    tracing::warn!(
                        "listeners changed (addresses or connection limits); they take effect at the next restart"
                    );
                }
                self.live.store(Arc::new(runtime));
                self.metrics
                    .reloads
                    .get_or_create(&ReloadLabels {
                        result: "success".into(),
                    })
                    .inc();
                tracing::info!("configuration reloaded");
                Ok(())
            }
            Err(error) => {
                self.metrics
                    .reloads
                    .get_or_create(&ReloadLabels {
                        result: "failure".into(),
                    })
                    .inc();
                tracing::error!(%error, "configuration rejected; keeping the running one");
                Err(error)
            }
        }
    }

    /// Routes and answers one request, whose head may be `max_head` bytes long at most (431 beyond).
    pub async fn handle(
        self: Arc<Self>,
        mut request: Request<Incoming>,
        connection: Arc<ConnectionScope>,
        peer: SocketAddr,
        max_head: usize,
    ) -> Response<ProxyBody> {
        #[expect(
            clippy::disallowed_methods,
            reason = "times the request for its duration metric; no decision reads it"
        )]
        let started = tokio::time::Instant::now();
        let runtime = self.live.load_full();
        let dialect = Dialect::of(request.headers());
        let size = head_size(&request);
        if size > max_head {
            let error = ProxyError::HeadersTooLarge {
                size,
                limit: max_head,
            };
            return reply::render(error, dialect, &runtime.default_contract);
        }
        let host = request
            .headers()
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()))
            .unwrap_or_default();
        let Some(route) = runtime.route_for(host, request.uri().path()) else {
            self.metrics.no_route.inc();
            return reply::render(ProxyError::NoRoute, dialect, &runtime.default_contract);
        };
        let counters = route
            .counters
            .get_or_init(|| RouteCounters::new(&self.metrics, &route.name, &route.cluster));
        counters.requests.inc();
        let client =
            trusted_client_address(peer.ip(), request.headers(), runtime.xff_num_trusted_hops);
        request.extensions_mut().insert(RequestContext {
            client,
            route: Arc::clone(&route.name),
            cluster: Arc::clone(&route.cluster),
            source_cluster: Arc::clone(&runtime.source_cluster),
            connection,
        });
        let result = route.service.clone().oneshot(request).await;
        let response = match result {
            Ok(response) => {
                counters.response(response.status().as_u16());
                response
            }
            Err(error) => {
                counters.error(&error);
                reply::render(error, dialect, &route.contract)
            }
        };
        counters.duration.observe(started.elapsed().as_secs_f64());
        response
    }
}

/// Serves `listeners` (and `admin`) until `shutdown` completes, then drains for at most `drain`.
///
/// Each listener runs tollgate-runtime's accept loop with its
/// [`ListenerLimits`]: at most `max_connections` open (the rest wait in the
/// listen backlog), the request-header timeout and size, and the idle
/// timeout and the stream idle timeout. One [`Shutdown`] stops them all and the admin server together,
/// after `/readyz` has turned 503.
pub async fn serve<F>(
    proxy: Arc<Proxy>,
    listeners: Vec<(TcpListener, ListenerSpec)>,
    admin: Option<TcpListener>,
    shutdown: F,
    drain: Duration,
) where
    F: Future<Output = ()> + Send,
{
    let stop = Shutdown::new();
    let mut servers = Vec::new();
    for (listener, spec) in listeners {
        let limit = ConnectionLimit::new(spec.limits.max_connections);
        proxy
            .metrics
            .watch_connections(&spec.name, Arc::clone(&limit));
        // A certificate that changes on disk is served from the next handshake.
        let tls_reloading = spec.tls.as_ref().map(|tls| watch_tls(tls, "proxy"));
        let options = AcceptOptions {
            name: "proxy",
            drain_timeout: Some(drain),
            connection_limit: Some(limit),
            tls: spec.tls.clone(),
            max_connection_age: None,
        };
        let proxy = Arc::clone(&proxy);
        let stopped = stop.stopped();
        let limits = spec.limits;
        servers.push(tokio::spawn(async move {
            let _tls_reloading = tls_reloading;
            let builder = connection_builder(&limits);
            serve_connections(listener, stopped, options, move |stream, peer| {
                let scope = Arc::new(ConnectionScope::new(peer.ip()));
                let activity = Activity::new();
                let io = IdleTimeout::new(
                    stream,
                    Arc::clone(&activity),
                    limits.idle_timeout,
                    limits.request_headers_timeout,
                )
                .with_stream_timeout(limits.stream_idle_timeout);
                let proxy = Arc::clone(&proxy);
                let service = service_fn(move |request| {
                    let in_flight = activity.request();
                    let proxy = Arc::clone(&proxy);
                    let scope = Arc::clone(&scope);
                    async move {
                        let max_head = limits.max_request_header_bytes;
                        let response = if trace_context::enabled() {
                            // With tracing on: one server span per request,
                            // continuing the client's trace (`traceparent`).
                            let span = tracing::info_span!(
                                target: trace_context::TARGET,
                                "proxy",
                                otel.kind = "server",
                                http.request.method = %request.method(),
                                url.path = %request.uri().path(),
                                http.response.status_code = tracing::field::Empty,
                            );
                            trace_context::continue_from(&span, request.headers());
                            let response = proxy
                                .handle(request, scope, peer, max_head)
                                .instrument(span.clone())
                                .await;
                            span.record("http.response.status_code", response.status().as_u16());
                            response
                        } else {
                            proxy.handle(request, scope, peer, max_head).await
                        };
                        Ok::<_, Infallible>(response.map(|body| InFlight::new(body, in_flight)))
                    }
                });
                // Each connection's HTTP/1 header timeout on a timer of its own, re-armed lazily.
                let mut builder = builder.clone();
                builder.http1().timer(HeaderTimer::new());
                builder
                    .serve_connection(TokioIo::new(io), service)
                    .into_owned()
            })
            .await
        }));
    }
    let admin_task = admin.map(|listener| {
        let router = admin_router(Arc::clone(&proxy));
        let stopped = stop.stopped();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stopped)
                .await;
        })
    });
    shutdown.await;
    proxy.draining.store(true, Ordering::Relaxed);
    stop.trigger();
    for server in servers {
        let _ = server.await;
    }
    if let Some(task) = admin_task {
        let _ = task.await;
    }
}

/// A request head's size as HTTP/1.1 spells it: request line and `name: value` lines.
///
/// hyper's HTTP/1 read buffer refuses a head that does not fit in it, but
/// one that arrives whole in a single read may be parsed past that bound;
/// this check makes the limit exact on both protocols.
fn head_size<B>(request: &Request<B>) -> usize {
    let uri = request.uri();
    let target = uri.scheme_str().map_or(0, |s| s.len() + 3)
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = request.method().as_str().len() + target + 12;
    request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + line
}

/// HTTP/1.1 and h2c with `limits`' header timeout and size: a longer head gets 431 on either.
///
/// On HTTP/1, hyper's header timer runs from the moment a connection waits
/// for a request's head, so it also bounds how long a keep-alive connection
/// may wait for its next request. HTTP/2 decodes a header block at once, so
/// only its size is bounded there; the idle timeout bounds the rest. Each
/// connection replaces the HTTP/1 timer with one of its own
/// ([`HeaderTimer`]) on a clone of this builder.
fn connection_builder(limits: &ListenerLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.request_headers_timeout)
        .max_buf_size(limits.max_request_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_request_header_bytes).unwrap_or(u32::MAX));
    builder
}

fn admin_router(proxy: Arc<Proxy>) -> axum::Router {
    use axum::routing::get;
    let metrics = Arc::clone(&proxy);
    let ready = Arc::clone(&proxy);
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let proxy = Arc::clone(&metrics);
                async move {
                    match proxy.metrics.render() {
                        Ok(text) => (
                            StatusCode::OK,
                            [(
                                http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        ),
                        Err(_) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [(http::header::CONTENT_TYPE, "text/plain")],
                            "metrics unavailable".to_owned(),
                        ),
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let proxy = Arc::clone(&ready);
                async move {
                    if proxy.draining.load(Ordering::Relaxed) {
                        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
                    } else {
                        (StatusCode::OK, "ready\n")
                    }
                }
            }),
        )
}

/// Starts reloading `proxy` when one of its configuration files changes (once the changes have gone quiet) or on SIGHUP, until the guard is dropped.
///
/// The watch and the SIGHUP handler are in place when this returns, so a
/// change made right after (for instance once the listeners are announced)
/// is not missed. Files that cannot be watched are logged; SIGHUP still
/// reloads them.
pub fn watch_config(proxy: &Arc<Proxy>) -> AbortOnDrop {
    let files = proxy.runtime().watched_files.clone();
    let watcher = ConfigWatcher::new_or_forced_only::<EveryEntry>(&files, DEFAULT_DEBOUNCE);
    let proxy = Arc::clone(proxy);
    watcher.spawn(move |_| {
        let _ = proxy.reload();
    })
}
