//! [`run`]: loads the limits (or subscribes to an xDS server), connects the store, builds the engine and the quota book, then serves until a signal.

use std::sync::Arc;

use tollgate_core::CoarseClock;
use tollgate_protocol::rls::{Jitter, ResponseHeaders};
use tollgate_rules::{LoadOptions, RuleSet};
use tollgate_runtime::ConnectionLimit;
use tollgate_server::bounds::{BoundsCollector, BoundsSource};
use tollgate_server::http::HttpLimits;
use tollgate_server::metric_key::MetricKeys;
use tollgate_server::metrics::{ConfigStats, Metrics};
use tollgate_server::overrides::Overrides;
use tollgate_server::overrides::access::Tokens;
use tollgate_server::overrides::control::Backing;
use tollgate_server::overrides::fleet::Fleet;
use tollgate_server::overrides::gauges::OverridesCollector;
use tollgate_server::rlqs::{QuotaBook, RlqsCollector, RlqsOptions};
use tollgate_server::store::RemoteOptions;
use tollgate_server::xds::{XdsCollector, XdsState};
use tollgate_server::{Engine, LiveEngine};

use crate::CommandError;
use crate::upstream_env::UpstreamEnv;

use super::args::ServeArgs;
use super::combine::settings;
use super::listen::{Listen, Listeners, OverridesSetup, serve};

/// Loads the limits, then serves gRPC until SIGTERM or Ctrl-C and drains the calls in flight.
///
/// A configuration with any error never starts: every diagnostic is
/// printed as `file:line:col: …` on stderr and the command fails. While
/// serving, a change under the config path or SIGHUP reloads it all or
/// nothing (see [`tollgate_server::reload`]).
pub fn run(args: &ServeArgs) -> Result<(), CommandError> {
    let settings = settings(args, &UpstreamEnv::from_process())?;
    let (mut runtime, grpc_workers) = runtime_builder(
        args.worker_threads,
        settings.tracing.enabled,
        settings.store.as_ref().is_some_and(|store| {
            matches!(
                tollgate_redis::RedisTarget::parse(&store.url),
                Ok(tollgate_redis::RedisTarget::Cluster { .. })
            )
        }),
    );
    let runtime = runtime
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
    // Seen at LOG_LEVEL=warn, the level docs/migrating.md recommends: each once, at start.
    for note in &settings.notes {
        tracing::warn!("{note}");
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
    // From an xDS server, the rules arrive once the client runs (below).
    let (rules, config_hash) = match &settings.xds {
        Some(_) => (RuleSet::default(), 0),
        None => {
            let crate::limits_file::StartRules { rules, hash } =
                crate::limits_file::read_at_start(config_path, start_options)?;
            if rules.rule_count() == 0 && !args.limits.allow_empty_config {
                tracing::warn!(
                    config = %config_path.display(),
                    "started without a rate limit (--force-start-without-initial-config): every request is unlimited until a reload brings rules; a reload back to no rule is refused"
                );
            }
            if args.redis_key_format == super::args::RedisKeyFormat::Upstream {
                warn_own_keys(&rules, settings.store.is_some());
            }
            (rules, hash)
        }
    };
    let engine_options = args.engine_options(&settings);
    // Follows the system wall clock (re-read every millisecond, never going
    // back): the in-memory counters and the Redis store's `local` fallback
    // both decide on it. See tollgate_core::clock for steps of the wall.
    let clock = CoarseClock::shifted(args.clock_offset);
    let engine = match &settings.store {
        None => Engine::new(Arc::new(rules), engine_options, clock.clone()),
        Some(store) => {
            let remote = runtime.block_on(super::store_connect::open_store(
                store,
                settings.store_timeout,
                settings.key_prefix.as_deref(),
                args.redis_encoding.into(),
                settings.store_retry,
                RemoteOptions {
                    expected_instances: args.expected_instances.max(1),
                    quick_deny_keys: args.quick_deny_keys,
                    lease_period: args.lease_period,
                    lease_max_keys: args.lease_max_keys,
                    ready_requires_store: args.ready_requires_store,
                    shares: args.shares_options(),
                    upstream_keys: args.redis_key_format == super::args::RedisKeyFormat::Upstream,
                    expiration_jitter_max_s: settings.expiration_jitter_max_s,
                    ..RemoteOptions::default()
                },
                clock.clone(),
            ))?;
            Engine::with_remote(Arc::new(rules), engine_options, clock.clone(), remote)
        }
    };
    let engine = Arc::new(engine);
    let live = Arc::new(match &settings.xds {
        Some(_) => LiveEngine::fixed(engine),
        None => LiveEngine::new(engine, config_path.clone(), options, config_hash),
    });
    let xds = settings
        .xds
        .as_ref()
        .map(|xds| {
            let client = xds.options(options)?;
            let state = Arc::new(XdsState::new(client.max_update_bytes));
            Ok::<_, CommandError>((client, state))
        })
        .transpose()?;

    let overrides = start_overrides(args, &live, options)?;

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
        grpc_max_connection_age: settings.max_connection_age,
        grpc_workers,
        http_refunds: args.http_refunds,
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
    let mut metrics =
        metrics.with_collector(Box::new(OverridesCollector(Arc::clone(&overrides.0))));
    if let Some((_, state)) = &xds {
        metrics = metrics.with_collector(Box::new(XdsCollector(Arc::clone(state))));
    }
    let metrics = Arc::new(
        metrics
            .with_build_info(&crate::version::build_info())
            .with_extra_tags(settings.extra_tags.clone()),
    );
    let listen = Listen {
        grpc: settings.grpc_addr,
        http: settings.http_addr,
        debug: settings.debug_addr,
        statsd: settings.statsd.clone(),
        prometheus: settings.prometheus.clone(),
    };
    let _xds_client = match xds {
        Some((client, state)) => {
            let uri = client.server.uri.clone();
            let guard = {
                let _entered = runtime.enter();
                tollgate_server::xds::spawn(Arc::clone(&live), client, Arc::clone(&state))
            };
            if settings.force_start_without_initial_config {
                tracing::warn!(
                    server = %uri,
                    "listening before the first config from the xDS server (--force-start-without-initial-config): every request is unlimited until it arrives"
                );
            } else if !runtime.block_on(first_config(&state, &uri)) {
                tracing::info!("stopped before the first config from the xDS server arrived");
                return Ok(());
            }
            Some(guard)
        }
        None => None,
    };
    runtime.block_on(serve(
        listen, live, headers, metrics, caps, limits, quota_book, overrides,
    ))
}

/// How `serve` runs: the runtime `run` drives, and how many gRPC workers of
/// their own serve the gRPC listener beside it (`None`: the gRPC listener
/// is served on that runtime too).
///
/// `threads` is `--worker-threads` (`None`: one per CPU this process may
/// run on). One worker is a current-thread runtime: every task runs on the
/// thread that serves, with no work stealing and no wake-ups across
/// threads, and a task woken (a connection whose calls have answered) runs
/// after the tasks already queued, so a connection writes the answers of
/// the calls that came together in one write rather than one write per
/// answer (docs/benchmarks.md: 0.79-0.87x the server CPU per check of a
/// multi-thread runtime with one worker; 12.9-13.7 us a check on the quiet
/// run of 2026-11-28).
///
/// More workers, tracing off, counters in memory: the same, N times over. The gRPC listener is
/// served by N threads, each with a current-thread runtime of its own
/// accepting from the same socket and serving the connections it accepted
/// ([`grpc::serve_on_workers`](tollgate_server::grpc::serve_on_workers));
/// the runtime returned here is a current-thread one that runs the rest on
/// the main thread: the HTTP API, the debug and Prometheus listeners, the
/// reload and TLS watchers, the signal handler, the overrides poll, statsd,
/// the xDS client and the quota service's payer. A quota stream's task runs on the worker that
/// accepted its connection, and its rounds reach it through channels.
///
/// With tracing on it stays one multi-thread runtime for everything: the
/// OTLP exporter's client runs on the runtime from its own thread, and its
/// last flush, after serving, needs a runtime that runs without being
/// driven. With a Redis Cluster (`redis_cluster`) too: its connections'
/// tasks would run on the main thread, and every check would cross from
/// its worker to them and back (docs/benchmarks.md: 1.05-1.22x the server
/// CPU per exact check of the multi-thread runtime, two workers). A single
/// node (direct or through Sentinel) gets a connection per worker instead
/// ([`tollgate_redis::RedisStore::with_connection_per_worker`]).
fn runtime_builder(
    threads: Option<std::num::NonZeroUsize>,
    tracing: bool,
    redis_cluster: bool,
) -> (tokio::runtime::Builder, Option<std::num::NonZeroUsize>) {
    let threads = threads.or_else(|| std::thread::available_parallelism().ok());
    match threads {
        Some(one) if one.get() == 1 && !tracing => {
            (tokio::runtime::Builder::new_current_thread(), None)
        }
        Some(workers) if !tracing && !redis_cluster => {
            (tokio::runtime::Builder::new_current_thread(), Some(workers))
        }
        _ => {
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            if let Some(threads) = threads {
                runtime.worker_threads(threads.get());
            }
            (runtime, None)
        }
    }
}

/// Waits until the xDS client has put a first config in service (true) or
/// a shutdown signal arrives (false). Until then nothing listens, as
/// upstream serves nothing before its first config: a caller is refused
/// a connection, never admitted by an empty configuration.
async fn first_config(state: &XdsState, uri: &str) -> bool {
    tracing::info!(
        server = %uri,
        "waiting for the first config from the xDS server; listening once it has arrived"
    );
    tokio::select! {
        () = state.first_applied() => true,
        () = tollgate_runtime::shutdown_signal() => false,
    }
}

/// The overrides of `live`: kept in Redis with a Redis store, else in
/// `--overrides-file` (read now: a bad file stops the start) or in memory;
/// with the token file read (an unreadable one stops the start too).
fn start_overrides(
    args: &ServeArgs,
    live: &Arc<LiveEngine<CoarseClock>>,
    options: LoadOptions,
) -> Result<OverridesSetup, CommandError> {
    let flags = &args.overrides;
    let backing = match (live.load().remote().cloned(), &flags.overrides_file) {
        (Some(_), Some(path)) => {
            return Err(CommandError::Usage(format!(
                "--overrides-file {} keeps a single instance's overrides, and with a Redis store they are kept in Redis for every instance; drop --overrides-file",
                path.display()
            )));
        }
        (Some(remote), None) => Backing::Fleet(Fleet::new(remote)),
        (None, Some(path)) => Backing::File(path.clone()),
        (None, None) => Backing::Memory,
    };
    let overrides = Overrides::new(Arc::clone(live), flags.bounds(), options, backing);
    let loaded = overrides.load_file().map_err(|problem| {
        CommandError::Failed(format!("cannot start with the overrides file: {problem}"))
    })?;
    if loaded > 0 {
        tracing::info!(
            overrides = loaded,
            "overrides read from the overrides file and in service"
        );
    }
    let tokens = flags
        .overrides_token_file
        .as_deref()
        .map(Tokens::read)
        .transpose()
        .map_err(|problem| CommandError::Usage(format!("--overrides-token-file: {problem}")))?;
    Ok(OverridesSetup(
        overrides,
        tokens,
        flags.overrides_poll_interval,
    ))
}

/// Says once at start, at WARN, which rules keep Tollgate's keys under
/// `--redis-key-format upstream` (upstream's pods do not share their
/// count), or that the setting changes nothing without a Redis store.
fn warn_own_keys(rules: &tollgate_rules::RuleSet, shared_store: bool) {
    if !shared_store {
        tracing::warn!(
            "--redis-key-format upstream changes nothing: counters are in this process's memory, not in Redis"
        );
        return;
    }
    // Bounded: at most 10 rules named, the rest counted.
    let mut named = Vec::new();
    let mut count = 0usize;
    for domain in rules.domains() {
        for rule in rules.rules(domain) {
            if let Some(reason) = tollgate_server::engine::keeps_own_keys(rule) {
                count += 1;
                if named.len() < 10 {
                    named.push(format!(
                        "{}:{} ({reason})",
                        rule.file.display(),
                        rule.position
                    ));
                }
            }
        }
    }
    if count > 0 {
        tracing::warn!(
            rules = count,
            first = %named.join(", "),
            "--redis-key-format upstream: these rules keep Tollgate's keys, so envoyproxy/ratelimit pods on the same Redis do not share their count"
        );
    }
}
