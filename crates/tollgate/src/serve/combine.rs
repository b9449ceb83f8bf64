//! What `serve` runs with: the flags combined with envoyproxy/ratelimit's variables (listen addresses, the store, statsd, logging, headers).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tollgate_protocol::rls::{HeaderOptions, LimitHeaderNames};
use tollgate_server::exposition::ExtraTags;
use tollgate_server::metrics::DEFAULT_NEAR_LIMIT_RATIO;
use tollgate_server::statsd::{Dialect, StatsdOptions, Transport};
use tollgate_tls::ServerTlsFiles;

use crate::CommandError;
use crate::upstream_env::UpstreamEnv;
use crate::upstream_redis::{UpstreamStore, upstream_store};

use super::args::{
    DEFAULT_MAX_CONNECTION_AGE_GRACE, LogFormat, ServeArgs, UPSTREAM_MAX_CONNECTION_AGE,
};
use tollgate_runtime::ConnectionAge;

/// The address served when neither a flag nor an environment variable names one.
pub(super) const DEFAULT_GRPC_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8081);

/// The HTTP address served when neither a flag nor an environment variable names one.
pub(super) const DEFAULT_HTTP_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// Upstream's ports for gRPC, HTTP and the debug endpoints, used when upstream's variables configure `serve`.
pub(super) const UPSTREAM_PORTS: (u16, u16, u16) = (8081, 8080, 6070);

/// The store to use, if not memory: the flag (or `TOLLGATE_STORE`), else upstream's `REDIS_*` variables.
///
/// Configured the way upstream is (no `--config`), a missing `REDIS_URL` is
/// refused: upstream would connect to its default socket, and counting in
/// each replica's memory instead would multiply every limit by the
/// replica count without a word. `--store memory` (`TOLLGATE_STORE=memory`)
/// asks for that explicitly.
pub(super) fn store_setting(
    args: &ServeArgs,
    env: &UpstreamEnv,
) -> Result<Option<UpstreamStore>, CommandError> {
    match args.store.as_deref() {
        Some("memory") => Ok(None),
        Some(url) => Ok(Some(UpstreamStore {
            url: url.to_owned(),
            tls: None,
        })),
        None => match upstream_store(env)? {
            None if args.config.is_none() => Err(CommandError::Usage(format!(
                "REDIS_URL is not set: envoyproxy/ratelimit would use its default, {} ({} socket); \
                 set REDIS_URL to your Redis, or TOLLGATE_STORE=memory to count in this process only \
                 (each replica then counts on its own, so a limit is multiplied by the replicas)",
                UPSTREAM_DEFAULT_REDIS_URL, UPSTREAM_DEFAULT_REDIS_SOCKET_TYPE
            ))),
            store => Ok(store),
        },
    }
}

/// envoyproxy/ratelimit's `REDIS_URL` and `REDIS_SOCKET_TYPE` defaults (a twemproxy socket).
const UPSTREAM_DEFAULT_REDIS_URL: &str = "/var/run/nutcracker/ratelimit.sock";
const UPSTREAM_DEFAULT_REDIS_SOCKET_TYPE: &str = "unix";

/// Where statsd lines go (upstream's `USE_STATSD` or `USE_DOG_STATSD`,
/// `STATSD_HOST`, `STATSD_PORT`, `STATSD_PROTOCOL`, `STATS_FLUSH_INTERVAL`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StatsdSetting {
    pub(super) options: StatsdOptions,
    pub(super) interval: Duration,
}

/// The Prometheus listener of upstream's `USE_PROMETHEUS`: `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PrometheusSetting {
    pub(super) addr: SocketAddr,
    pub(super) path: String,
}

/// What `serve` runs with once flags and environment are combined.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Settings {
    /// Upstream variables that are set and change nothing, to log at start.
    pub(super) notes: Vec<String>,
    /// The gRPC connections' maximum age and grace (`None`: not aged).
    pub(super) max_connection_age: Option<ConnectionAge>,
    pub(super) config: PathBuf,
    /// Limits from an xDS server instead of `config` (`--config-xds`, upstream's `CONFIG_TYPE=GRPC_XDS_SOTW`).
    pub(super) xds: Option<super::xds_args::XdsSetting>,
    pub(super) merge_domains: bool,
    /// Every descriptor is a quota descriptor (upstream's `QUOTA_MODE`).
    pub(super) quota_mode: bool,
    /// Give back what other descriptors took when one is over (upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub(super) stop_increment_when_over_limit: bool,
    /// Start even with no rate limit (upstream's `FORCE_START_WITHOUT_INITIAL_CONFIG`).
    pub(super) force_start_without_initial_config: bool,
    /// TLS on the listeners: `--tls-*`, or upstream's `GRPC_SERVER_*` / `GRPC_CLIENT_TLS_*`.
    pub(super) tls: Option<ServerTlsFiles>,
    pub(super) grpc_addr: SocketAddr,
    pub(super) http_addr: SocketAddr,
    pub(super) debug_addr: Option<SocketAddr>,
    pub(super) store: Option<UpstreamStore>,
    pub(super) store_timeout: Duration,
    pub(super) key_prefix: Option<String>,
    /// The most seconds of jitter on an upstream key's TTL (`--expiration-jitter-max-seconds`, upstream's `EXPIRATION_JITTER_MAX_SECONDS`).
    pub(super) expiration_jitter_max_s: u64,
    /// The backoff of reconnections to a Redis not up yet (`REDIS_STARTUP_*`).
    pub(super) store_retry: super::store_connect::StoreRetry,
    pub(super) statsd: Option<StatsdSetting>,
    /// Upstream's `EXTRA_TAGS`: labels on every series, tags on every statsd line.
    pub(super) extra_tags: ExtraTags,
    /// Upstream's `USE_PROMETHEUS` listener, if on.
    pub(super) prometheus: Option<PrometheusSetting>,
    pub(super) shadow_mode: bool,
    pub(super) log_level: tracing::Level,
    pub(super) log_format: LogFormat,
    /// Tracing, with upstream's `TRACING_*` variables applied.
    pub(super) tracing: crate::telemetry::TracingArgs,
    pub(super) near_limit_ratio: f64,
    pub(super) headers: HeaderOptions,
}

/// Combines the flags (and `TOLLGATE_*` variables, which clap has read)
/// with upstream's variables in `env`; the variables' table is checked first.
/// The gRPC connections' age: the flags, else upstream's `GRPC_MAX_CONNECTION_AGE`
/// and `_GRACE`, else upstream's defaults without --config and no aging with it.
fn connection_age(
    args: &ServeArgs,
    env: &UpstreamEnv,
    upstream: bool,
) -> Result<Option<ConnectionAge>, CommandError> {
    let duration = |name: &str| -> Result<Option<Duration>, CommandError> {
        env.get(name)
            .filter(|v| !v.trim().is_empty())
            .map(|value| {
                tollgate_core::duration::parse_duration(value.trim())
                    .map_err(|error| CommandError::Usage(format!("{name}={value:?}: {error}")))
            })
            .transpose()
    };
    let age = match (
        args.max_connection_age,
        duration("GRPC_MAX_CONNECTION_AGE")?,
    ) {
        (Some(age), _) | (None, Some(age)) => Some(age),
        (None, None) => upstream.then_some(UPSTREAM_MAX_CONNECTION_AGE),
    };
    let grace = match (
        args.max_connection_age_grace,
        duration("GRPC_MAX_CONNECTION_AGE_GRACE")?,
    ) {
        (Some(grace), _) | (None, Some(grace)) => grace,
        (None, None) => DEFAULT_MAX_CONNECTION_AGE_GRACE,
    };
    match age {
        Some(age) if age.is_zero() => Err(CommandError::Usage(
            "a maximum connection age of 0 would close every connection at once; unset it to keep connections".to_owned(),
        )),
        Some(max_age) => Ok(Some(ConnectionAge { max_age, grace })),
        None => Ok(None),
    }
}

pub(super) fn settings(args: &ServeArgs, env: &UpstreamEnv) -> Result<Settings, CommandError> {
    let mut notes = env.check()?;
    let xds = super::xds_args::xds_setting(&args.xds, env, args.config.as_ref(), &mut notes)?;
    // Without --config (or --config-xds), `serve` is configured the way
    // upstream is: its runtime directory and its listening defaults.
    let upstream = args.config.is_none() && args.xds.config_xds.is_none();
    let config = match &args.config {
        Some(path) => path.clone(),
        None => runtime_directory(env),
    };
    let (grpc_port, http_port, debug_port) = UPSTREAM_PORTS;
    let grpc_addr = listen_addr(
        args.grpc_addr,
        ("GRPC_HOST", "GRPC_PORT", grpc_port),
        upstream,
        env,
    )?
    .unwrap_or(DEFAULT_GRPC_ADDR);
    let http_addr = listen_addr(args.http_addr, ("HOST", "PORT", http_port), upstream, env)?
        .unwrap_or(DEFAULT_HTTP_ADDR);
    let debug_addr = listen_addr(
        None,
        ("DEBUG_HOST", "DEBUG_PORT", debug_port),
        upstream,
        env,
    )?;
    for variable in ["RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"] {
        env.bool(variable)?;
    }
    let store = store_setting(args, env)?;
    let store_timeout = match (args.store_timeout, env.get("REDIS_TIMEOUT")) {
        (Some(timeout), _) => timeout,
        (None, Some(value)) => tollgate_core::duration::parse_duration(value.trim())
            .map_err(|error| CommandError::Usage(format!("REDIS_TIMEOUT={value:?}: {error}")))?,
        (None, None) => tollgate_redis::DEFAULT_TIMEOUT,
    };
    let key_prefix = match env.get("CACHE_KEY_PREFIX") {
        Some(prefix) if prefix.contains(['{', '}']) => {
            return Err(CommandError::Usage(format!(
                "CACHE_KEY_PREFIX={prefix:?} must not contain {{ or }}"
            )));
        }
        prefix => prefix.map(str::to_owned),
    };
    let expiration_jitter_max_s = match (
        args.expiration_jitter_max_seconds,
        env.get("EXPIRATION_JITTER_MAX_SECONDS"),
    ) {
        (Some(seconds), _) => seconds,
        (None, Some(value)) => value.trim().parse().map_err(|_| {
            CommandError::Usage(format!(
                "EXPIRATION_JITTER_MAX_SECONDS={value:?} is not a whole number of seconds"
            ))
        })?,
        (None, None) => tollgate_redis::DEFAULT_EXPIRATION_JITTER_MAX_S,
    };
    let store_retry = startup_retry(env)?;
    let max_connection_age = connection_age(args, env, upstream)?;
    let statsd = statsd_setting(env, args.statsd_buffer_bytes)?;
    let extra_tags = match env.get("EXTRA_TAGS") {
        None => ExtraTags::default(),
        Some(text) => ExtraTags::parse(text)
            .map_err(|error| CommandError::Usage(format!("EXTRA_TAGS={text:?}: {error}")))?,
    };
    let prometheus = prometheus_setting(env)?;
    let upstream_shadow = env.bool("SHADOW_MODE")?.unwrap_or(false);
    let log_level = match (args.log_level, env.get("LOG_LEVEL")) {
        (Some(level), _) => level,
        (None, Some(value)) => parse_log_level(value)?,
        (None, None) => tracing::Level::INFO,
    };
    let log_format = match (args.log_format, env.get("LOG_FORMAT")) {
        (Some(format), _) => format,
        (None, Some(value)) => match value.trim().to_ascii_lowercase().as_str() {
            "json" => LogFormat::Json,
            "text" | "" => LogFormat::Text,
            _ => {
                return Err(CommandError::Usage(format!(
                    "LOG_FORMAT={value:?} is not text or json"
                )));
            }
        },
        (None, None) => LogFormat::Text,
    };
    let near_limit_ratio = match (args.near_limit_ratio, env.get("NEAR_LIMIT_RATIO")) {
        (Some(ratio), _) => ratio,
        (None, Some(value)) => parse_ratio(value)
            .map_err(|error| CommandError::Usage(format!("NEAR_LIMIT_RATIO={error}")))?,
        (None, None) => DEFAULT_NEAR_LIMIT_RATIO,
    };
    let upstream_limit_headers = env.bool("LIMIT_RESPONSE_HEADERS_ENABLED")?.unwrap_or(false);
    let defaults = LimitHeaderNames::default();
    let header_name = |variable: &str, default: String| -> Result<String, CommandError> {
        match env.get(variable) {
            None => Ok(default),
            Some(name) if is_header_name(name.trim()) => Ok(name.trim().to_owned()),
            Some(name) => Err(CommandError::Usage(format!(
                "{variable}={name:?} is not a header name"
            ))),
        }
    };
    let headers = HeaderOptions {
        limit_headers: args.limit_headers || upstream_limit_headers,
        limit_header_names: LimitHeaderNames {
            limit: header_name("LIMIT_LIMIT_HEADER", defaults.limit)?,
            remaining: header_name("LIMIT_REMAINING_HEADER", defaults.remaining)?,
            reset: header_name("LIMIT_RESET_HEADER", defaults.reset)?,
        },
        ietf_headers: args.ietf_headers,
        retry_after: args.retry_after,
        retry_after_jitter: args.retry_after_jitter,
        raw_body: args.raw_body,
    };
    Ok(Settings {
        notes,
        max_connection_age,
        config,
        xds,
        merge_domains: args.limits.merge_domains
            || env.bool("MERGE_DOMAIN_CONFIG")?.unwrap_or(false),
        quota_mode: args.quota_mode || env.bool("QUOTA_MODE")?.unwrap_or(false),
        stop_increment_when_over_limit: args.stop_increment_when_over_limit
            || env
                .bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")?
                .unwrap_or(false),
        force_start_without_initial_config: args.force_start_without_initial_config
            || env
                .bool("FORCE_START_WITHOUT_INITIAL_CONFIG")?
                .unwrap_or(false),
        tls: args.tls.files(env)?,
        grpc_addr,
        http_addr,
        debug_addr,
        store,
        store_timeout,
        key_prefix,
        expiration_jitter_max_s,
        store_retry,
        statsd,
        extra_tags,
        prometheus,
        shadow_mode: args.shadow_mode || upstream_shadow,
        log_level,
        log_format,
        tracing: args.tracing.with_upstream(env)?,
        near_limit_ratio,
        headers,
    })
}

/// The reconnection backoff: upstream's `REDIS_STARTUP_INITIAL_INTERVAL`
/// and `REDIS_STARTUP_MAX_INTERVAL` where set, Tollgate's otherwise.
fn startup_retry(env: &UpstreamEnv) -> Result<super::store_connect::StoreRetry, CommandError> {
    let read = |name: &str, default: Duration| match env.get(name) {
        None => Ok(default),
        Some(value) => match tollgate_core::duration::parse_duration(value.trim()) {
            Ok(wait) if !wait.is_zero() => Ok(wait),
            _ => Err(CommandError::Usage(format!(
                "{name}={value:?} is not a positive duration"
            ))),
        },
    };
    let defaults = super::store_connect::StoreRetry::default();
    let first = read("REDIS_STARTUP_INITIAL_INTERVAL", defaults.first)?;
    let longest = read("REDIS_STARTUP_MAX_INTERVAL", defaults.longest.max(first))?;
    if longest < first {
        return Err(CommandError::Usage(format!(
            "REDIS_STARTUP_MAX_INTERVAL ({longest:?}) is shorter than REDIS_STARTUP_INITIAL_INTERVAL ({first:?})"
        )));
    }
    Ok(super::store_connect::StoreRetry { first, longest })
}

/// The address to listen on: the flag; else, when upstream's host or port
/// variable is set or `upstream` configures `serve`, the host (default
/// 0.0.0.0) and port (default upstream's) they give; else `None`.
pub(super) fn listen_addr(
    flag: Option<SocketAddr>,
    (host_var, port_var, default_port): (&str, &str, u16),
    upstream: bool,
    env: &UpstreamEnv,
) -> Result<Option<SocketAddr>, CommandError> {
    if flag.is_some() {
        return Ok(flag);
    }
    let (host, port) = (env.get(host_var), env.get(port_var));
    if host.is_none() && port.is_none() && !upstream {
        return Ok(None);
    }
    let port = match port {
        None => default_port,
        Some(port) => port.trim().parse().map_err(|_| {
            CommandError::Usage(format!("{port_var}={port:?} is not a port number"))
        })?,
    };
    let host = host.unwrap_or("0.0.0.0");
    let ip: std::net::IpAddr = host
        .trim()
        .parse()
        .map_err(|_| CommandError::Usage(format!("{host_var}={host:?} is not an IP address")))?;
    Ok(Some(SocketAddr::new(ip, port)))
}

/// Upstream's runtime directory: `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
pub(super) fn runtime_directory(env: &UpstreamEnv) -> PathBuf {
    let mut path = PathBuf::from(
        env.get("RUNTIME_ROOT")
            .unwrap_or("/srv/runtime_data/current"),
    );
    if let Some(subdirectory) = env.get("RUNTIME_SUBDIRECTORY") {
        path.push(subdirectory);
    }
    path.push(env.get("RUNTIME_APPDIRECTORY").unwrap_or("config"));
    path
}

/// Upstream's `LOG_LEVEL` (logrus' names, any case).
pub(super) fn parse_log_level(value: &str) -> Result<tracing::Level, CommandError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "warning" => Ok(tracing::Level::WARN),
        "panic" | "fatal" => Ok(tracing::Level::ERROR),
        other => other.parse().map_err(|_| {
            CommandError::Usage(format!(
                "LOG_LEVEL={value:?} is not one of error, warn, info, debug, trace"
            ))
        }),
    }
}

/// statsd output: plain with `USE_STATSD=true`, DogStatsD with
/// `USE_DOG_STATSD=true` (not both, as upstream refuses), neither with
/// `DISABLE_STATS=true`. Plain statsd goes over `STATSD_PROTOCOL` (upstream's
/// stats library reads it; `tcp` by default, or `udp`), DogStatsD over UDP
/// as upstream's client sends it.
pub(super) fn statsd_setting(
    env: &UpstreamEnv,
    buffer_bytes: usize,
) -> Result<Option<StatsdSetting>, CommandError> {
    let disabled = env.bool("DISABLE_STATS")?.unwrap_or(false);
    let plain = env.bool("USE_STATSD")?.unwrap_or(false);
    let dog = env.bool("USE_DOG_STATSD")?.unwrap_or(false);
    if plain && dog {
        return Err(CommandError::Usage(
            "USE_STATSD=true and USE_DOG_STATSD=true ask for two statsd outputs to one server; set one of them (upstream refuses both too)".to_owned(),
        ));
    }
    if dog && let Some(names) = env.get("USE_DOG_STATSD_MOGRIFIERS") {
        return Err(CommandError::Usage(format!(
            "USE_DOG_STATSD_MOGRIFIERS={names:?} is not supported: Tollgate's DogStatsD lines carry EXTRA_TAGS only; unset it"
        )));
    }
    let protocol = match env.get("STATSD_PROTOCOL").map(str::trim) {
        None => Transport::Tcp,
        Some(value) if value.eq_ignore_ascii_case("tcp") => Transport::Tcp,
        Some(value) if value.eq_ignore_ascii_case("udp") => Transport::Udp,
        Some(value) => {
            return Err(CommandError::Usage(format!(
                "STATSD_PROTOCOL={value:?} is not tcp or udp"
            )));
        }
    };
    if !(plain || dog) || disabled {
        return Ok(None);
    }
    let host = env.get("STATSD_HOST").unwrap_or("localhost").trim();
    let port: u16 = match env.get("STATSD_PORT") {
        None => 8125,
        Some(port) => port.trim().parse().map_err(|_| {
            CommandError::Usage(format!("STATSD_PORT={port:?} is not a port number"))
        })?,
    };
    let interval = match env.get("STATS_FLUSH_INTERVAL") {
        None => tollgate_server::statsd::DEFAULT_FLUSH_INTERVAL,
        Some(value) => match tollgate_core::duration::parse_duration(value.trim()) {
            Ok(interval) if !interval.is_zero() => interval,
            _ => {
                return Err(CommandError::Usage(format!(
                    "STATS_FLUSH_INTERVAL={value:?} is not a positive duration"
                )));
            }
        },
    };
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let (transport, dialect) = if dog {
        (Transport::Udp, Dialect::Dog)
    } else {
        (protocol, Dialect::Plain)
    };
    Ok(Some(StatsdSetting {
        options: StatsdOptions {
            target,
            transport,
            dialect,
            buffer_bytes,
        },
        interval,
    }))
}

/// Upstream's Prometheus listener: with `USE_PROMETHEUS=true`, at
/// `PROMETHEUS_ADDR` (Go's form, `host:port` with an empty host for every
/// address; default `:9090`) and `PROMETHEUS_PATH` (default `/metrics`).
pub(super) fn prometheus_setting(
    env: &UpstreamEnv,
) -> Result<Option<PrometheusSetting>, CommandError> {
    if !env.bool("USE_PROMETHEUS")?.unwrap_or(false) {
        return Ok(None);
    }
    let text = env.get("PROMETHEUS_ADDR").unwrap_or(":9090").trim();
    let bad = || {
        CommandError::Usage(format!(
            "PROMETHEUS_ADDR={text:?} is not host:port (an IP address or nothing before the colon)"
        ))
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = match host {
        "" => std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        "localhost" => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        host => host.parse().map_err(|_| bad())?,
    };
    let path = env.get("PROMETHEUS_PATH").unwrap_or("/metrics").trim();
    if !path.starts_with('/') || path.contains(['?', '#', '{', '}', '*']) {
        return Err(CommandError::Usage(format!(
            "PROMETHEUS_PATH={path:?} is not a path (it starts with / and has no ?, #, {{, }} or *)"
        )));
    }
    Ok(Some(PrometheusSetting {
        addr: SocketAddr::new(ip, port),
        path: path.to_owned(),
    }))
}

/// Parses a ratio between 0 and 1.
pub(super) fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("{text:?} is not a number between 0 and 1")),
    }
}

/// Whether `name` is an HTTP field name (an RFC 9110 token).
pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
