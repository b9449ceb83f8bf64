//! `tollgate proxy`: the HTTP sidecar / edge proxy with Envoy's local and global rate-limit filters.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tokio::net::TcpListener;
use tollgate_core::{Clock, MonotonicClock};
use tollgate_proxy::config::{ConfigPath, LimitSettings};
use tollgate_proxy::metrics::Metrics;
use tollgate_proxy::{ConfigSource, Proxy};

use crate::proxy_limits::ProxyLimits;

use crate::CommandError;

/// The arguments of `tollgate proxy`; each flag has a `TOLLGATE_PROXY_*` variable.
///
/// Either `--config FILE` (the proxy's YAML: listeners, clusters, routes,
/// policies), or the sidecar flags `--listen`, `--upstream` and optionally
/// `--local-ratelimit FILE` (an Istio EnvoyFilter or a LocalRateLimit, as is).
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// The proxy's YAML configuration (see docs/proxy.md).
    #[arg(long, env = "TOLLGATE_PROXY_CONFIG", value_name = "FILE", conflicts_with_all = ["listen", "upstream", "local_ratelimit"])]
    pub config: Option<PathBuf>,
    /// Sidecar mode: the address to listen on (HTTP/1.1 and h2c); port 0 picks a free port.
    #[arg(
        long,
        env = "TOLLGATE_PROXY_LISTEN",
        value_name = "ADDR",
        requires = "upstream"
    )]
    pub listen: Option<SocketAddr>,
    /// Sidecar mode: the one upstream endpoint every request goes to.
    #[arg(
        long,
        env = "TOLLGATE_PROXY_UPSTREAM",
        value_name = "ADDR",
        requires = "listen"
    )]
    pub upstream: Option<SocketAddr>,
    /// Sidecar mode: an Istio EnvoyFilter inserting envoy.filters.http.local_ratelimit, or a
    /// LocalRateLimit config (typed directly or as a TypedStruct).
    #[arg(
        long,
        env = "TOLLGATE_PROXY_LOCAL_RATELIMIT",
        value_name = "FILE",
        requires = "listen"
    )]
    pub local_ratelimit: Option<PathBuf>,
    /// Sidecar mode: the admin address (/metrics, /healthz, /readyz); with --config, the file's `admin`.
    #[arg(long, env = "TOLLGATE_PROXY_ADMIN_ADDR", value_name = "ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Worker threads [default: one per CPU]; 1 runs everything on one thread (tokio's current-thread scheduler).
    #[arg(long, env = "TOLLGATE_PROXY_WORKER_THREADS", value_name = "N")]
    pub worker_threads: Option<usize>,
    /// How long a shutdown waits for requests in flight.
    #[arg(long, env = "TOLLGATE_PROXY_DRAIN_TIMEOUT", value_name = "DUR", default_value = "10s", value_parser = tollgate_core::duration::parse_duration)]
    pub drain_timeout: Duration,
    /// The time a client has to send a request's headers, on every listener (0 disables) [default: 10s, or the file's].
    #[arg(long, env = "TOLLGATE_PROXY_REQUEST_HEADERS_TIMEOUT", value_name = "DUR", value_parser = tollgate_core::duration::parse_duration)]
    pub request_headers_timeout: Option<Duration>,
    /// The time a client connection with no request in flight stays open, on every listener (0 disables) [default: 60s, or the file's].
    #[arg(long, env = "TOLLGATE_PROXY_IDLE_TIMEOUT", value_name = "DUR", value_parser = tollgate_core::duration::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// The time a request in flight may go without a byte read from or written to its client, on every listener (0 disables) [default: 5m, or the file's].
    #[arg(long, env = "TOLLGATE_PROXY_STREAM_IDLE_TIMEOUT", value_name = "DUR", value_parser = tollgate_core::duration::parse_duration)]
    pub stream_idle_timeout: Option<Duration>,
    /// The most client connections each listener keeps open; more wait in the listen backlog [default: 10000, or the file's].
    #[arg(long, env = "TOLLGATE_PROXY_MAX_CONNECTIONS", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,
    /// The largest request head in KiB (8 to 8192); a larger one gets 431 [default: 60, or the file's].
    #[arg(long, env = "TOLLGATE_PROXY_MAX_REQUEST_HEADERS_KB", value_name = "KIB", value_parser = clap::value_parser!(u32).range(8..=8192))]
    pub max_request_headers_kb: Option<u32>,
    /// The most verbose level logged on stderr [default: info].
    #[arg(long, env = "TOLLGATE_PROXY_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<tracing::Level>,
    /// How log lines are written.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// OpenTelemetry tracing.
    #[command(flatten)]
    pub tracing: crate::telemetry::TracingArgs,
    /// The proxy's own limits (`rate_limit_service: {in_process: true}`).
    #[command(flatten)]
    pub limits: crate::proxy_limits::ProxyLimitsArgs,
}

impl ProxyArgs {
    /// The connection limits the flags set, over every listener's.
    fn limit_settings(&self) -> LimitSettings {
        LimitSettings {
            request_headers_timeout: self.request_headers_timeout,
            idle_timeout: self.idle_timeout,
            stream_idle_timeout: self.stream_idle_timeout,
            max_connections: self
                .max_connections
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_request_headers_kb: self.max_request_headers_kb,
        }
    }
}

/// Runs the proxy until SIGTERM or Ctrl-C.
pub fn run(args: &ProxyArgs) -> Result<(), CommandError> {
    if args.worker_threads == Some(0) {
        return Err(CommandError::Usage(
            "--worker-threads must be at least 1".to_owned(),
        ));
    }
    let runtime = runtime(args.worker_threads)
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    // The exporter's client runs on the runtime; it flushes when `_traces` drops.
    let (trace_layer, _traces) = {
        let _entered = runtime.enter();
        crate::telemetry::start(&args.tracing)?.unzip()
    };
    crate::logging::init_with(
        args.log_level.unwrap_or(tracing::Level::INFO),
        args.log.log_format,
        trace_layer,
    );
    let source = match (&args.config, args.listen, args.upstream) {
        (Some(path), None, None) => ConfigSource::File(path.clone()),
        (None, Some(listen), Some(upstream)) => ConfigSource::Sidecar {
            listen,
            upstream,
            local_ratelimit: args.local_ratelimit.clone(),
            admin: args.admin_addr,
        },
        _ => {
            return Err(CommandError::Usage(
                "give --config FILE, or --listen ADDR and --upstream ADDR".to_owned(),
            ));
        }
    };
    runtime.block_on(serve(source, args))
}

/// The runtime for `worker_threads` (`None`: one per CPU).
///
/// One thread gets tokio's current-thread scheduler: every task (the
/// client connections, the upstream pool's connections) runs on the thread
/// that waits for IO, so no wake-up crosses threads and nothing is stolen.
fn runtime(worker_threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if worker_threads == Some(1) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(n) = worker_threads {
            builder.worker_threads(n);
        }
        builder
    };
    builder.enable_all().thread_name("tollgate-proxy").build()
}

async fn serve(source: ConfigSource, args: &ProxyArgs) -> Result<(), CommandError> {
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
    let own_limits = ProxyLimits::start(&args.limits).await?;
    let mut metrics = Metrics::new();
    if let Some(collector) = own_limits.as_ref().and_then(ProxyLimits::store_collector) {
        metrics = metrics.with_collector(Box::new(collector));
    }
    let proxy = Proxy::load_with(
        source.clone(),
        clock,
        own_limits.as_ref().map(ProxyLimits::client),
        metrics,
    )
    .map_err(|e| CommandError::Failed(e.to_string()))?;
    let runtime = proxy.runtime();
    let mut listeners = Vec::new();
    let mut lines = Vec::new();
    let flags = args.limit_settings();
    for spec in &runtime.listeners {
        let mut spec = spec.clone();
        spec.limits = spec
            .limits
            .with(&flags, &ConfigPath::root())
            .map_err(|e| CommandError::Usage(e.to_string()))?;
        let addr = spec.address;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|error| CommandError::Failed(format!("cannot listen on {addr}: {error}")))?;
        let bound = listener.local_addr().map_err(|error| {
            CommandError::Failed(format!("cannot read the bound address: {error}"))
        })?;
        lines.push(format!("listening on {bound}"));
        listeners.push((listener, spec));
    }
    let admin_addr = args.admin_addr.or(runtime.admin);
    let admin = match admin_addr {
        Some(addr) => {
            let listener = TcpListener::bind(addr).await.map_err(|error| {
                CommandError::Failed(format!("cannot listen on {addr} (admin): {error}"))
            })?;
            if let Ok(bound) = listener.local_addr() {
                lines.push(format!("admin listening on {bound}"));
            }
            Some(listener)
        }
        None => None,
    };
    drop(runtime);
    // Watch (and hear SIGHUP) before announcing the listeners, so no change after the announcement is missed.
    let _reloading = tollgate_proxy::watch_config(&proxy);
    // The signal handlers are in place before the addresses are announced.
    let signal = tollgate_runtime::shutdown_signal();
    crate::logging::announce(&lines);
    tollgate_proxy::serve(proxy, listeners, admin, signal, args.drain_timeout).await;
    if let Some(own_limits) = &own_limits {
        own_limits.give_back_at_shutdown().await;
    }
    tracing::info!("drained; exiting");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        proxy: ProxyArgs,
    }

    #[test]
    fn a_config_file_and_the_sidecar_flags_exclude_each_other() {
        let both = [
            "p",
            "--config",
            "f.yaml",
            "--listen",
            "127.0.0.1:1",
            "--upstream",
            "127.0.0.1:2",
        ];
        assert!(Cli::try_parse_from(both).is_err());
        assert!(Cli::try_parse_from(["p", "--listen", "127.0.0.1:1"]).is_err());
        let sidecar = Cli::try_parse_from([
            "p",
            "--listen",
            "127.0.0.1:1",
            "--upstream",
            "127.0.0.1:2",
            "--worker-threads",
            "1",
        ])
        .expect("valid");
        assert_eq!(sidecar.proxy.worker_threads, Some(1));
        assert_eq!(sidecar.proxy.drain_timeout, Duration::from_secs(10));
    }

    #[test]
    fn one_worker_thread_runs_the_current_thread_scheduler() {
        use tokio::runtime::RuntimeFlavor;
        let flavor = |threads| runtime(threads).expect("runtime").handle().runtime_flavor();
        assert_eq!(flavor(Some(1)), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(Some(2)), RuntimeFlavor::MultiThread);
        assert_eq!(flavor(None), RuntimeFlavor::MultiThread);
    }
}
