//! `tollgate serve`: answers Envoy's rate limit service (RLS v3) over gRPC from a limits file or directory.
//!
//! [`args`] holds the flags, [`combine`] combines them with
//! envoyproxy/ratelimit's environment variables, and [`run`] loads the
//! limits, builds the engine and serves gRPC and HTTP until a signal.

mod args;
mod combine;
#[cfg(test)]
mod tests;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tollgate_core::CoarseClock;
use tollgate_protocol::rls::{Jitter, RequestCaps, ResponseHeaders};
use tollgate_redis::RedisStore;
use tollgate_rules::LoadOptions;
use tollgate_runtime::{ConnectionLimit, Shutdown, shutdown_signal, watch_tls};
use tollgate_server::bounds::{BoundsCollector, BoundsSource};
use tollgate_server::http::HttpLimits;
use tollgate_server::metric_key::MetricKeys;
use tollgate_server::metrics::{ConfigStats, Metrics};
use tollgate_server::reload;
use tollgate_server::rlqs::{QuotaBook, RlqsCollector, RlqsOptions};
use tollgate_server::statsd::StatsdFlusher;
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, LiveEngine, grpc, http};
use tollgate_tls::TlsAcceptor;

use crate::CommandError;
use crate::upstream_env::UpstreamEnv;
use crate::upstream_redis::UpstreamStore;

pub use args::{LogFormat, ServeArgs};
use combine::*;

/// Loads the limits, then serves gRPC until SIGTERM or Ctrl-C and drains the calls in flight.
///
/// A configuration with any error never starts: every diagnostic is
/// printed as `file:line:col: …` on stderr and the command fails. While
/// serving, a change under the config path or SIGHUP reloads it all or
/// nothing (see [`tollgate_server::reload`]).
pub fn run(args: &ServeArgs) -> Result<(), CommandError> {
    let settings = settings(args, &UpstreamEnv::from_process())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tollgate-worker")
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    // The exporter's client runs on the runtime; it flushes when `_traces` drops.
    let (trace_layer, _traces) = {
        let _entered = runtime.enter();
        crate::telemetry::start(&settings.tracing)?.unzip()
    };
    // A second initialisation (only possible in tests) keeps the first subscriber.
    crate::logging::init_with(settings.log_level, settings.log_format, trace_layer);
    for note in &settings.notes {
        tracing::info!("{note}");
    }
    let config_path = &settings.config;

    // Reloads keep refusing an empty configuration unless it is allowed,
    // whatever the start accepted.
    let options = LoadOptions {
        merge_domains: settings.merge_domains,
        ..args.limits.load_options()
    };
    let start_options = LoadOptions {
        allow_empty: options.allow_empty || settings.force_start_without_initial_config,
        ..options
    };
    let crate::limits_file::StartRules {
        rules,
        hash: config_hash,
    } = crate::limits_file::read_at_start(config_path, start_options)?;
    if rules.rule_count() == 0 && !args.limits.allow_empty_config {
        tracing::warn!(
            config = %config_path.display(),
            "started without a rate limit (--force-start-without-initial-config): every request is unlimited until a reload brings rules; a reload back to no rule is refused"
        );
    }

    let engine_options = args.engine_options(&settings);
    // Follows the system wall clock (re-read every millisecond, never going
    // back): the in-memory counters and the Redis store's `local` fallback
    // both decide on it. See tollgate_core::clock for steps of the wall.
    let clock = CoarseClock::shifted(args.clock_offset);
    let engine = match &settings.store {
        None => Engine::new(Arc::new(rules), engine_options, clock.clone()),
        Some(store) => {
            let redis = runtime
                .block_on(connect_store(store, settings.store_timeout))
                .map_err(|error| CommandError::Failed(error.to_string()))?;
            let redis = match &settings.key_prefix {
                Some(prefix) => redis.with_key_prefix(prefix.as_bytes()),
                None => redis,
            };
            let redis = redis.with_encoding(args.redis_encoding.into());
            tracing::info!(
                store = ?redis.target(),
                timeout = ?settings.store_timeout,
                encoding = redis.encoding().name(),
                "counters in Redis"
            );
            let remote = RemoteStore::new(
                redis,
                RemoteOptions {
                    expected_instances: args.expected_instances.max(1),
                    quick_deny_keys: args.quick_deny_keys,
                    lease_period: args.lease_period,
                    lease_max_keys: args.lease_max_keys,
                    ..RemoteOptions::default()
                },
            );
            Engine::with_remote(Arc::new(rules), engine_options, clock.clone(), remote)
        }
    };
    let engine = Arc::new(engine);
    let live = Arc::new(LiveEngine::new(
        engine,
        config_path.clone(),
        options,
        config_hash,
    ));

    let headers = Arc::new(ResponseHeaders::new(settings.headers, Jitter::random()));
    let caps = args.request_caps();
    let (grpc_tls, http_tls) = args.tls.acceptors(settings.tls.as_ref())?;
    let limits = Listeners {
        grpc: ConnectionLimit::new(args.max_connections),
        http: HttpLimits {
            connection_limit: Some(ConnectionLimit::new(args.max_connections)),
            request_headers_timeout: args.request_headers_timeout,
            tls: http_tls.clone(),
        },
        debug: HttpLimits {
            connection_limit: Some(ConnectionLimit::new(args.max_connections)),
            request_headers_timeout: args.request_headers_timeout,
            tls: http_tls.clone(),
        },
        grpc_tls,
        drain_delay: args.drain_delay,
    };
    let quota_book = Arc::new(QuotaBook::new(RlqsOptions {
        max_streams: args.rlqs_max_streams,
        max_buckets: args.rlqs_max_buckets,
        max_stream_buckets: args.rlqs_max_stream_buckets,
        max_entries: caps.max_descriptor_entries,
        assignment_ttl: args.rlqs_assignment_ttl,
    }));
    let mut metrics = Metrics::new(
        Arc::clone(&live) as Arc<dyn ConfigStats>,
        settings.near_limit_ratio,
    )
    .with_request_caps(&caps)
    .with_metric_keys(MetricKeys::new(
        args.max_metric_keys,
        args.max_metric_label_bytes,
    ))
    .with_bounds(BoundsCollector::new(
        Arc::clone(&live) as Arc<dyn BoundsSource>,
        limits.gauged(),
    ))
    .with_quota(RlqsCollector::new(Arc::clone(&quota_book)));
    if let Some(remote) = live.load().remote() {
        metrics = metrics.with_store(Arc::clone(remote));
    }
    if settings.statsd.is_some() {
        metrics = metrics.with_statsd_timings();
    }
    let metrics = Arc::new(metrics.with_build_info(&crate::version::build_info()));
    let listen = Listen {
        grpc: settings.grpc_addr,
        http: settings.http_addr,
        debug: settings.debug_addr,
        statsd: settings.statsd.clone(),
    };
    runtime.block_on(serve(
        listen, live, headers, metrics, caps, limits, quota_book,
    ))
}

/// Opens the Redis store `store` names, with calls limited to `timeout`.
async fn connect_store(
    store: &UpstreamStore,
    timeout: Duration,
) -> Result<RedisStore, tollgate_redis::ConnectError> {
    let target = tollgate_redis::RedisTarget::parse(&store.url)
        .map_err(tollgate_redis::ConnectError::Target)?;
    let tls = store
        .tls
        .as_ref()
        .map(crate::upstream_redis::TlsFiles::certificates);
    RedisStore::connect_with_tls(target, timeout, tls).await
}

/// Where `serve` listens and sends statistics.
#[derive(Clone, Debug)]
struct Listen {
    grpc: SocketAddr,
    http: SocketAddr,
    /// Upstream's debug port: the HTTP API again (`/rlconfig`, `/metrics`, …).
    debug: Option<SocketAddr>,
    statsd: Option<StatsdSetting>,
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
struct Listeners {
    /// The gRPC listener's connection limit.
    grpc: Arc<ConnectionLimit>,
    /// The HTTP listener's connection limit and request-head timeout.
    http: HttpLimits,
    /// The same for the debug port (upstream's), which serves the HTTP API again.
    debug: HttpLimits,
    /// TLS on the gRPC listener, if any (the HTTP listener's is in `http`).
    grpc_tls: Option<TlsAcceptor>,
    /// How long `/readyz` fails while both listeners still serve, after a signal.
    drain_delay: Duration,
}

impl Listeners {
    /// The connection limits by listener name, for the gauges.
    fn gauged(&self) -> Vec<(&'static str, Arc<ConnectionLimit>)> {
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

/// Binds every address, announces them and serves gRPC and HTTP until a shutdown signal.
async fn serve(
    listen: Listen,
    live: Arc<LiveEngine<CoarseClock>>,
    headers: Arc<ResponseHeaders>,
    metrics: Arc<Metrics>,
    caps: RequestCaps,
    limits: Listeners,
    quota_book: Arc<QuotaBook>,
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
    let debug = match listen.debug {
        Some(addr) => {
            let (debug_listener, debug_bound) = bind(addr).await?;
            tracing::info!(addr = %debug_bound, "debug port (the HTTP API) listening");
            Some((debug_listener, debug_bound))
        }
        None => None,
    };
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not stop the server; the log lines above say the same.
    let _ = writeln!(stdout, "listening on {bound}")
        .and_then(|()| writeln!(stdout, "http listening on {http_bound}"))
        .and_then(|()| match &debug {
            Some((_, debug_bound)) => writeln!(stdout, "debug listening on {debug_bound}"),
            None => Ok(()),
        })
        .and_then(|()| stdout.flush());
    drop(stdout);

    // One signal stops both servers: /readyz turns 503 as soon as it
    // arrives, and the listeners close once the drain delay has passed.
    let ready = Arc::new(AtomicBool::new(true));
    let shutdown = Shutdown::new();
    let _signal = {
        let ready = Arc::clone(&ready);
        shutdown.trigger_after(
            shutdown_signal(),
            move || ready.store(false, Ordering::Release),
            limits.drain_delay,
        )
    };

    let router = http::router(
        http::HttpState::new(Arc::clone(&live), Arc::clone(&headers), ready)
            .with_metrics(Arc::clone(&metrics))
            .with_caps(caps)
            .with_build_info(crate::version::build_info()),
    );
    let statsd = match &listen.statsd {
        Some(setting) => {
            let flusher = StatsdFlusher::connect(Arc::clone(&metrics), &setting.target)
                .await
                .map_err(|error| {
                    CommandError::Failed(format!(
                        "cannot send statsd to {}: {error}",
                        setting.target
                    ))
                })?;
            tracing::info!(target = %setting.target, interval = ?setting.interval, "statsd output on");
            Some(tokio::spawn(
                flusher.run(setting.interval, shutdown.stopped()),
            ))
        }
        None => None,
    };
    let service = grpc::RateLimitGrpc::live(Arc::clone(&live), headers)
        .with_metrics(metrics)
        .with_caps(caps)
        .with_quota_book(quota_book);
    let grpc_server = async {
        grpc::serve_capped(
            listener,
            service,
            Some(limits.grpc),
            limits.grpc_tls,
            shutdown.stopped(),
        )
        .await
        .map_err(|error| CommandError::Failed(format!("the gRPC server failed: {error}")))
    };
    let debug_router = router.clone();
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
    tokio::try_join!(grpc_server, http_server, debug_server)?;
    live.return_leases().await;
    if let Some(statsd) = statsd {
        // The last flush after the stop; a panic in it is not worth failing the exit.
        let _ = statsd.await;
    }
    tracing::info!("stopped");
    Ok(())
}
