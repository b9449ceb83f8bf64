//! The listeners of `serve`: binding them, announcing them, and serving gRPC, HTTP and the debug port until a shutdown signal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tollgate_core::CoarseClock;
use tollgate_protocol::rls::{RequestCaps, ResponseHeaders};
use tollgate_runtime::{ConnectionAge, ConnectionLimit, Shutdown, shutdown_signal, watch_tls};
use tollgate_server::http::HttpLimits;
use tollgate_server::metrics::Metrics;
use tollgate_server::overrides::Overrides;
use tollgate_server::overrides::access::{Access, Tokens};
use tollgate_server::overrides::api as overrides_api;
use tollgate_server::reload;
use tollgate_server::rlqs::QuotaBook;
use tollgate_server::statsd::StatsdFlusher;
use tollgate_server::{LiveEngine, grpc, http};
use tollgate_tls::TlsAcceptor;

use crate::CommandError;

use super::combine::{PrometheusSetting, StatsdSetting};

/// Where `serve` listens and sends statistics.
#[derive(Clone, Debug)]
pub(super) struct Listen {
    pub(super) grpc: SocketAddr,
    pub(super) http: SocketAddr,
    /// Upstream's debug port: the HTTP API again (`/rlconfig`, `/metrics`, …).
    pub(super) debug: Option<SocketAddr>,
    pub(super) statsd: Option<StatsdSetting>,
    /// Upstream's `USE_PROMETHEUS` listener: the exposition alone, at its path.
    pub(super) prometheus: Option<PrometheusSetting>,
}

/// Binds `addr`, returning the listener and the address bound.
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), CommandError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|error| CommandError::Failed(format!("cannot listen on {addr}: {error}")))?;
    let bound = listener
        .local_addr()
        .map_err(|error| CommandError::Failed(format!("cannot read the bound address: {error}")))?;
    Ok((listener, bound))
}

/// What each listener allows its clients, and how long both keep serving after a shutdown signal.
pub(super) struct Listeners {
    /// The gRPC listener's connection limit.
    pub(super) grpc: Arc<ConnectionLimit>,
    /// The HTTP listener's connection limit and request-head timeout.
    pub(super) http: HttpLimits,
    /// The same for the debug port (upstream's), which serves the HTTP API again.
    pub(super) debug: HttpLimits,
    /// TLS on the gRPC listener, if any (the HTTP listener's is in `http`).
    pub(super) grpc_tls: Option<TlsAcceptor>,
    /// The gRPC connections' maximum age and grace (`None`: not aged).
    pub(super) grpc_max_connection_age: Option<ConnectionAge>,
    /// Threads of their own serving the gRPC listener, each with a
    /// current-thread runtime (`None`: served on the runtime that runs `serve`).
    pub(super) grpc_workers: Option<std::num::NonZeroUsize>,
    /// Whether the HTTP API gives units back (`--http-refunds`).
    pub(super) http_refunds: http::Refunds,
    /// How long `/readyz` fails while both listeners still serve, after a signal.
    pub(super) drain_delay: Duration,
}

impl Listeners {
    /// The connection limits by listener name, for the gauges.
    pub(super) fn gauged(&self) -> Vec<(&'static str, Arc<ConnectionLimit>)> {
        let mut gauged = vec![("grpc", Arc::clone(&self.grpc))];
        if let Some(http) = &self.http.connection_limit {
            gauged.push(("http", Arc::clone(http)));
        }
        if let Some(debug) = &self.debug.connection_limit {
            gauged.push(("debug", Arc::clone(debug)));
        }
        gauged
    }
}

/// The overrides API's parts: the overrides, the tokens it accepts, and how often a fleet polls.
pub(super) struct OverridesSetup(
    pub(super) Arc<Overrides<CoarseClock>>,
    pub(super) Option<Tokens>,
    pub(super) Duration,
);

/// Binds every address, announces them and serves gRPC and HTTP until a shutdown signal.
#[expect(
    clippy::too_many_arguments,
    reason = "each part of the service, built by run"
)]
pub(super) async fn serve(
    listen: Listen,
    live: Arc<LiveEngine<CoarseClock>>,
    headers: Arc<ResponseHeaders>,
    metrics: Arc<Metrics>,
    caps: RequestCaps,
    limits: Listeners,
    quota_book: Arc<QuotaBook>,
    OverridesSetup(overrides, tokens, poll_interval): OverridesSetup,
) -> Result<(), CommandError> {
    // Watch (and hear SIGHUP) before announcing, so no change after the announcement is missed.
    let _reloading = reload::watch(&live);
    let _tls_reloading = [("gRPC", &limits.grpc_tls), ("HTTP", &limits.http.tls)]
        .into_iter()
        .filter_map(|(name, tls)| tls.as_ref().map(|tls| watch_tls(tls, name)))
        .collect::<Vec<_>>();
    let (listener, bound) = bind(listen.grpc).await?;
    let options = headers.options();
    tracing::info!(
        addr = %bound,
        shadow_mode = live.load().options().global_shadow_mode,
        limit_headers = options.limit_headers,
        ietf_headers = options.ietf_headers,
        retry_after = options.retry_after,
        retry_after_jitter = ?options.retry_after_jitter,
        raw_body = options.raw_body,
        max_descriptors = caps.max_descriptors,
        max_descriptor_entries = caps.max_descriptor_entries,
        max_request_bytes = caps.max_message_bytes,
        max_connections = limits.grpc.max(),
        max_connection_age = ?limits.grpc_max_connection_age.map(|a| a.max_age),
        max_connection_age_grace = ?limits.grpc_max_connection_age.map(|a| a.grace),
        drain_delay = ?limits.drain_delay,
        tls = limits.grpc_tls.is_some(),
        mutual_tls = limits
            .grpc_tls
            .as_ref()
            .is_some_and(|tls| tls.files().client_ca.is_some()),
        "gRPC rate limit service listening"
    );
    let (http_listener, http_bound) = bind(listen.http).await?;
    tracing::info!(
        addr = %http_bound,
        request_headers_timeout = ?limits.http.request_headers_timeout,
        tls = limits.http.tls.is_some(),
        "HTTP API listening"
    );
    let access = Access::decide(
        http_bound,
        tokens,
        limits
            .http
            .tls
            .as_ref()
            .is_some_and(|tls| tls.files().client_ca.is_some()),
    );
    if let Access::Disabled(reason) = &access {
        tracing::warn!("{reason}");
    } else {
        tracing::info!(
            access = %access.describe(),
            kept_in = %overrides.backing_name(),
            max_overrides = overrides.bounds().max_overrides,
            max_override_bytes = overrides.bounds().max_bytes,
            "overrides API (/v1/overrides, /v1/usage) on the HTTP listener"
        );
    }
    // A fleet's overrides are in service before the addresses are announced, when Redis answers.
    overrides.sync().await;
    let _polling = overrides.poll(poll_interval);
    let debug = match listen.debug {
        Some(addr) => {
            let (debug_listener, debug_bound) = bind(addr).await?;
            tracing::info!(addr = %debug_bound, "debug port (the HTTP API) listening");
            Some((debug_listener, debug_bound))
        }
        None => None,
    };
    warn_if_anyone_can_spend(
        "HTTP API",
        http_bound,
        limits.http.tls.as_ref(),
        limits.http_refunds,
    );
    if let Some((_, debug_bound)) = &debug {
        warn_if_anyone_can_spend(
            "debug port",
            *debug_bound,
            limits.debug.tls.as_ref(),
            limits.http_refunds,
        );
    }
    let prometheus = match &listen.prometheus {
        Some(setting) => {
            let (prometheus_listener, prometheus_bound) = bind(setting.addr).await?;
            tracing::info!(addr = %prometheus_bound, path = %setting.path, "Prometheus metrics listening");
            Some((prometheus_listener, prometheus_bound, setting.path.clone()))
        }
        None => None,
    };
    let mut announced = vec![
        format!("listening on {bound}"),
        format!("http listening on {http_bound}"),
    ];
    if let Some((_, debug_bound)) = &debug {
        announced.push(format!("debug listening on {debug_bound}"));
    }
    if let Some((_, prometheus_bound, _)) = &prometheus {
        announced.push(format!("prometheus listening on {prometheus_bound}"));
    }
    // One signal stops both servers: /readyz turns 503 as soon as it
    // arrives, and the listeners close once the drain delay has passed. Its
    // handlers are in place before the addresses are announced.
    let signal = shutdown_signal();
    crate::logging::announce(&announced);
    let ready = Arc::new(AtomicBool::new(true));
    let shutdown = Shutdown::new();
    let _signal = {
        let ready = Arc::clone(&ready);
        shutdown.trigger_after(
            signal,
            move || ready.store(false, Ordering::Release),
            limits.drain_delay,
        )
    };

    let router = http::router(
        http::HttpState::new(Arc::clone(&live), Arc::clone(&headers), ready)
            .with_metrics(Arc::clone(&metrics))
            .with_caps(caps)
            .with_build_info(crate::version::build_info())
            .with_refunds(limits.http_refunds),
    );
    let statsd = match &listen.statsd {
        Some(setting) => {
            let target = &setting.options.target;
            let flusher = StatsdFlusher::connect(Arc::clone(&metrics), setting.options.clone())
                .await
                .map_err(|error| {
                    CommandError::Failed(format!("cannot send statsd to {target}: {error}"))
                })?;
            tracing::info!(
                %target,
                interval = ?setting.interval,
                transport = ?setting.options.transport,
                dialect = ?setting.options.dialect,
                "statsd output on"
            );
            Some(tokio::spawn(
                flusher.run(setting.interval, shutdown.stopped()),
            ))
        }
        None => None,
    };
    let prometheus_server = {
        let metrics = Arc::clone(&metrics);
        let limits = limits.debug.clone();
        let stopped = shutdown.stopped();
        async move {
            match prometheus {
                Some((listener, _, path)) => http::serve_capped(
                    listener,
                    http::prometheus_router(metrics, &path),
                    HttpLimits {
                        // Plain HTTP, as upstream's: scrapers seldom present certificates.
                        tls: None,
                        ..limits
                    },
                    stopped,
                )
                .await
                .map_err(|error| {
                    CommandError::Failed(format!("the Prometheus listener failed: {error}"))
                }),
                None => Ok(()),
            }
        }
    };
    let service = grpc::RateLimitGrpc::live(Arc::clone(&live), headers)
        .with_metrics(metrics)
        .with_caps(caps)
        .with_quota_book(quota_book);
    let grpc_server = async {
        let grpc_limits = grpc::GrpcLimits {
            connection_limit: Some(limits.grpc),
            tls: limits.grpc_tls,
            max_connection_age: limits.grpc_max_connection_age,
        };
        let served = match limits.grpc_workers {
            Some(workers) => match listener.into_std() {
                Ok(listener) => {
                    grpc::serve_on_workers(
                        listener,
                        service,
                        grpc_limits,
                        workers,
                        shutdown.clone(),
                    )
                    .await
                }
                Err(error) => Err(error),
            },
            None => grpc::serve_capped(listener, service, grpc_limits, shutdown.stopped()).await,
        };
        served.map_err(|error| CommandError::Failed(format!("the gRPC server failed: {error}")))
    };
    let debug_router = router.clone();
    let router = router.merge(overrides_api::routes(overrides, access));
    let debug_server = async {
        match debug {
            Some((debug_listener, _)) => http::serve_capped(
                debug_listener,
                debug_router,
                limits.debug,
                shutdown.stopped(),
            )
            .await
            .map_err(|error| CommandError::Failed(format!("the debug server failed: {error}"))),
            None => Ok(()),
        }
    };
    let http_server = async {
        http::serve_capped(http_listener, router, limits.http, shutdown.stopped())
            .await
            .map_err(|error| CommandError::Failed(format!("the HTTP server failed: {error}")))
    };
    tokio::try_join!(grpc_server, http_server, debug_server, prometheus_server)?;
    live.give_back_at_shutdown().await;
    if let Some(statsd) = statsd {
        // The last flush after the stop; a panic in it is not worth failing the exit.
        let _ = statsd.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Warns once, at start, that `listener` (the HTTP API) answers anyone who
/// reaches `bound`: beyond loopback and without client certificates, any
/// caller can spend a tenant's quota through `/json` and, unless refunds
/// are refused, give it back.
fn warn_if_anyone_can_spend(
    listener: &'static str,
    bound: SocketAddr,
    tls: Option<&TlsAcceptor>,
    refunds: http::Refunds,
) {
    let authenticated = tls.is_some_and(|tls| tls.files().client_ca.is_some());
    if bound.ip().is_loopback() || authenticated {
        return;
    }
    tracing::warn!(
        listener,
        addr = %bound,
        refunds = ?refunds,
        "the HTTP API answers anyone who reaches it: any caller can spend quota through /json{}; \
         require client certificates (--http-tls with --tls-client-ca) or listen on loopback",
        if refunds == http::Refunds::Allowed {
            " and give it back (isNegativeHits; --http-refunds refuse turns that off)"
        } else {
            ""
        }
    );
}
