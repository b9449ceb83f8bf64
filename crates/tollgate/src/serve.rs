//! `tollgate serve`: answers Envoy's rate limit service (RLS v3) over gRPC from a limits file or directory.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use tokio::net::TcpListener;
use tollgate_core::CoarseClock;
use tollgate_protocol::rls::caps::{
    DEFAULT_MAX_DESCRIPTOR_ENTRIES, DEFAULT_MAX_DESCRIPTORS, DEFAULT_MAX_MESSAGE_BYTES,
};
use tollgate_protocol::rls::{
    HeaderOptions, Jitter, LimitHeaderNames, RequestCaps, ResponseHeaders,
};
use tollgate_redis::RedisStore;
use tollgate_rules::LoadOptions;
use tollgate_runtime::{ConnectionLimit, Shutdown, shutdown_signal, watch_tls};
use tollgate_server::bounds::{BoundsCollector, BoundsSource};
use tollgate_server::http::HttpLimits;
use tollgate_server::metric_key::DEFAULT_MAX_METRIC_KEYS;
use tollgate_server::metrics::{ConfigStats, DEFAULT_NEAR_LIMIT_RATIO, Metrics};
use tollgate_server::reload::{self, read_config};
use tollgate_server::statsd::StatsdFlusher;
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions, LiveEngine, grpc, http};
use tollgate_store::{DEFAULT_MAX_LOG_ENTRIES, StoreConfig};
use tollgate_tls::{ServerTlsFiles, TlsAcceptor};

use crate::CommandError;
use crate::limits_args::LimitsArgs;
use crate::tls_args::ServeTlsArgs;
use crate::upstream_env::UpstreamEnv;
use crate::upstream_redis::{UpstreamStore, upstream_store};

/// The address served when neither a flag nor an environment variable names one.
const DEFAULT_GRPC_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8081);

/// The HTTP address served when neither a flag nor an environment variable names one.
const DEFAULT_HTTP_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// Upstream's ports for gRPC, HTTP and the debug endpoints, used when upstream's variables configure `serve`.
const UPSTREAM_PORTS: (u16, u16, u16) = (8081, 8080, 6070);

/// The arguments of `tollgate serve`.
///
/// Each flag has a `TOLLGATE_*` variable; upstream envoyproxy/ratelimit's
/// variables are read too, after the flag and the `TOLLGATE_*` variable
/// (see [`crate::upstream_env`] for what happens to each).
#[derive(Args, Debug)]
#[command(
    after_help = "envoyproxy/ratelimit's environment variables are read too, after the flags and TOLLGATE_* variables; one that asks for something Tollgate does not do stops it at start with a message naming it (docs/migrating.md lists them all). Without --config, the limits come from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY and the listeners default to upstream's 0.0.0.0:8081 (GRPC_HOST, GRPC_PORT), 0.0.0.0:8080 (HOST, PORT) and 0.0.0.0:6070 (DEBUG_HOST, DEBUG_PORT)."
)]
pub struct ServeArgs {
    /// A limits file, or a directory of `*.yaml` / `*.yml` limits files
    /// (envoyproxy/ratelimit's format, with Tollgate's extensions). Without
    /// it, upstream's RUNTIME_ROOT (default /srv/runtime_data/current),
    /// RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY (default config) name
    /// the directory, and upstream's listening defaults apply.
    #[arg(long, env = "TOLLGATE_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The address the gRPC rate limit and health services listen on
    /// [default: 127.0.0.1:8081]; port 0 picks a free port. The address
    /// bound is printed on stdout as `listening on ADDR`.
    #[arg(long, env = "TOLLGATE_GRPC_ADDR", value_name = "ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// The address the HTTP API (`/json`, `/v1/check`, health checks,
    /// `/rlconfig`) listens on [default: 127.0.0.1:8080]; port 0 picks a
    /// free port. The address bound is printed on stdout as
    /// `http listening on ADDR`.
    #[arg(long, env = "TOLLGATE_HTTP_ADDR", value_name = "ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// Allowed hits above this fraction of a limit also count in
    /// `ratelimit_near_limit` (between 0 and 1).
    /// [default: 0.8]
    #[arg(long, env = "TOLLGATE_NEAR_LIMIT_RATIO", value_name = "RATIO", value_parser = parse_ratio)]
    pub near_limit_ratio: Option<f64>,
    /// Answer OK overall whatever the limits say, still counting and
    /// reporting every descriptor (upstream's SHADOW_MODE).
    #[arg(long, env = "TOLLGATE_SHADOW_MODE", value_parser = BoolishValueParser::new())]
    pub shadow_mode: bool,
    /// Treat every descriptor as `quota_mode`: over-limit descriptors make
    /// the request over the limit only when all of them are over
    /// (upstream's QUOTA_MODE).
    #[arg(long, env = "TOLLGATE_QUOTA_MODE", value_parser = BoolishValueParser::new())]
    pub quota_mode: bool,
    /// When one descriptor of a request is over its limit, give back what
    /// the other descriptors consumed, so a rejected request spends no
    /// other quota (upstream's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
    #[arg(long, env = "TOLLGATE_STOP_INCREMENT_WHEN_OVER_LIMIT", value_parser = BoolishValueParser::new())]
    pub stop_increment_when_over_limit: bool,
    /// Start even when the configuration reads no limits file or defines no
    /// rate limit (upstream's FORCE_START_WITHOUT_INITIAL_CONFIG); requests
    /// are unlimited until a reload brings rules. Unlike
    /// `--allow-empty-config` this holds only at start: once rules are in
    /// service, a reload to an empty configuration is still refused.
    #[arg(long, env = "TOLLGATE_FORCE_START_WITHOUT_INITIAL_CONFIG", value_parser = BoolishValueParser::new())]
    pub force_start_without_initial_config: bool,
    /// How the limits files are read.
    /// TLS and mutual TLS on the listeners.
    #[command(flatten)]
    pub tls: ServeTlsArgs,
    #[command(flatten)]
    pub limits: LimitsArgs,
    /// The most verbose level logged on stderr: error, warn, info, debug or
    /// trace [default: info].
    #[arg(long, env = "TOLLGATE_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<tracing::Level>,
    /// How log lines are written on stderr: `text` for people or `json`, one
    /// object per line for a log collector [default: text].
    #[arg(long, env = "TOLLGATE_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Add the `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
    /// headers to every answer with a limit (upstream's
    /// LIMIT_RESPONSE_HEADERS_ENABLED; names from LIMIT_LIMIT_HEADER,
    /// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
    #[arg(long, env = "TOLLGATE_LIMIT_HEADERS", value_parser = BoolishValueParser::new())]
    pub limit_headers: bool,
    /// Add the IETF draft-10 `RateLimit-Policy` and `RateLimit` fields to every answer with a limit.
    #[arg(long, env = "TOLLGATE_IETF_HEADERS", value_parser = BoolishValueParser::new())]
    pub ietf_headers: bool,
    /// Add `Retry-After: SECONDS` to OVER_LIMIT answers: never earlier than
    /// the request could pass, plus up to --retry-after-jitter.
    #[arg(long, env = "TOLLGATE_RETRY_AFTER", value_parser = BoolishValueParser::new())]
    pub retry_after: bool,
    /// The most random delay added to `Retry-After`, so limited clients do not all return together.
    #[arg(
        long,
        env = "TOLLGATE_RETRY_AFTER_JITTER",
        value_name = "DUR",
        default_value = "0s",
        value_parser = tollgate_core::duration::parse_duration
    )]
    pub retry_after_jitter: Duration,
    /// Send a JSON body for Envoy's 429 reply (`raw_body`).
    #[arg(long, env = "TOLLGATE_RAW_BODY", value_parser = BoolishValueParser::new())]
    pub raw_body: bool,
    /// Where counters live: `memory` (this process) or a Redis URL
    /// (`redis://`, `rediss://`, `redis-cluster://h:p,h:p`,
    /// `redis-sentinel://master@h:p,…`). Upstream's `REDIS_URL` (with
    /// `REDIS_SOCKET_TYPE`) is used when neither the flag nor `TOLLGATE_STORE` is set.
    #[arg(long, env = "TOLLGATE_STORE", value_name = "memory|URL")]
    pub store: Option<String>,
    /// How long one Redis call may take before the rule's `on_store_error`
    /// answers [default: 5ms; upstream's REDIS_TIMEOUT when set].
    #[arg(long, env = "TOLLGATE_STORE_TIMEOUT", value_name = "DURATION", value_parser = tollgate_core::duration::parse_duration)]
    pub store_timeout: Option<Duration>,
    /// With a Redis store: the quota lease period of rules without their own
    /// `lease` (`0` = off: one exact Redis call per request). A lease is
    /// units taken from the shared budget ahead of use and spent here with
    /// no call; it never over-admits (see docs/operations.md for the bounds).
    #[arg(long, env = "TOLLGATE_LEASE_PERIOD", value_name = "DURATION", default_value = "0s", value_parser = tollgate_core::duration::parse_duration)]
    pub lease_period: Duration,
    /// With a Redis store: the most counters this instance tracks leases
    /// for (about 200 bytes each); past it, the least recently used one is
    /// dropped and its lease left to run out.
    #[arg(long, env = "TOLLGATE_LEASE_MAX_KEYS", value_name = "N", default_value_t = tollgate_server::store::DEFAULT_LEASE_MAX_KEYS, value_parser = parse_cap)]
    pub lease_max_keys: usize,
    /// Debugging: run this instance's clock ahead (`30s`) or behind (`-30s`)
    /// of the system's wall clock (added to every reading of it). Decisions on
    /// Redis do not move (they use Redis `TIME`); in-memory decisions and
    /// fallbacks do.
    #[arg(long, env = "TOLLGATE_CLOCK_OFFSET", value_name = "[-]DURATION", default_value = "0s", value_parser = parse_offset, allow_hyphen_values = true)]
    pub clock_offset: i64,
    /// How many in-memory stores to keep after a reload left their limit
    /// without a rule (a rule missing from a half-written file), so that
    /// when it comes back its counters carry on instead of starting from
    /// zero. Each is dropped once all its counters are fresh; each holds at
    /// most as many keys as a rule's store (30 bytes each), usually far fewer.
    #[arg(long, env = "TOLLGATE_MAX_RETIRED_STORES", value_name = "N", default_value_t = tollgate_store::DEFAULT_MAX_RETIRED_STORES)]
    pub max_retired_stores: usize,
    /// The most distinct per-rule statistics labels taken from request
    /// values (`detailed_metric`, `value_to_metric`); past it, hits count
    /// under the rule's configured path. About 200 bytes each, per series.
    #[arg(long, env = "TOLLGATE_MAX_METRIC_KEYS", value_name = "N", default_value_t = DEFAULT_MAX_METRIC_KEYS)]
    pub max_metric_keys: usize,
    /// How many instances share the store; `on_store_error: local` allows limit ÷ this.
    #[arg(
        long,
        env = "TOLLGATE_EXPECTED_INSTANCES",
        value_name = "N",
        default_value_t = 1
    )]
    pub expected_instances: u64,
    /// The most descriptors one request (gRPC, `/json`, `/v1/check`) may
    /// have; more is INVALID_ARGUMENT / 400, refused before it is decoded.
    #[arg(long, env = "TOLLGATE_MAX_DESCRIPTORS", value_name = "N", default_value_t = DEFAULT_MAX_DESCRIPTORS, value_parser = parse_cap)]
    pub max_descriptors: usize,
    /// The most entries one descriptor may have; more is INVALID_ARGUMENT / 400.
    #[arg(long, env = "TOLLGATE_MAX_DESCRIPTOR_ENTRIES", value_name = "N", default_value_t = DEFAULT_MAX_DESCRIPTOR_ENTRIES, value_parser = parse_cap)]
    pub max_descriptor_entries: usize,
    /// The largest gRPC request message or HTTP request body, in bytes;
    /// larger is refused before it is buffered (gRPC OUT_OF_RANGE, HTTP 413).
    #[arg(long, env = "TOLLGATE_MAX_REQUEST_BYTES", value_name = "BYTES", default_value_t = DEFAULT_MAX_MESSAGE_BYTES, value_parser = parse_cap)]
    pub max_request_bytes: usize,
    /// The most keys each in-memory store holds (one store per distinct
    /// limit of the rules); past it the least used keys are evicted. About
    /// 30 bytes per key.
    #[arg(long, env = "TOLLGATE_MAX_KEYS", value_name = "N", default_value_t = StoreConfig::default().max_keys, value_parser = parse_cap)]
    pub max_keys: usize,
    /// The most keys each store of a descriptor `limit` override holds.
    #[arg(long, env = "TOLLGATE_MAX_OVERRIDE_KEYS", value_name = "N", default_value_t = EngineOptions::default().override_store_config.max_keys, value_parser = parse_cap)]
    pub max_override_keys: usize,
    /// The most stores of descriptor `limit` overrides (one per distinct
    /// override rate and window); past it a new override is denied until
    /// the store used longest ago is all fresh.
    #[arg(long, env = "TOLLGATE_MAX_OVERRIDE_STORES", value_name = "N", default_value_t = EngineOptions::default().max_override_stores, value_parser = parse_cap)]
    pub max_override_stores: usize,
    /// The most sliding-log entries each sliding-log store holds (16 to 32
    /// bytes each); past it entries are merged in pairs, which only makes
    /// decisions stricter.
    #[arg(long, env = "TOLLGATE_MAX_LOG_ENTRIES", value_name = "N", default_value_t = DEFAULT_MAX_LOG_ENTRIES, value_parser = parse_cap)]
    pub max_log_entries: usize,
    /// With Redis: the most keys the quick-deny cache of closed fixed
    /// windows holds (0 turns it off).
    #[arg(long, env = "TOLLGATE_QUICK_DENY_KEYS", value_name = "N", default_value_t = RemoteOptions::default().quick_deny_keys, value_parser = parse_count)]
    pub quick_deny_keys: usize,
    /// The most connections each listener (gRPC, HTTP) keeps open; past it
    /// new clients wait in the listen backlog until one closes.
    #[arg(long, env = "TOLLGATE_MAX_CONNECTIONS", value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = parse_cap)]
    pub max_connections: usize,
    /// How long an HTTP client may take to send a whole request head (after
    /// connecting, or after its previous response) before it is disconnected.
    #[arg(
        long,
        env = "TOLLGATE_REQUEST_HEADERS_TIMEOUT",
        value_name = "DUR",
        default_value = "10s",
        value_parser = parse_timeout
    )]
    pub request_headers_timeout: Duration,
    /// How long, after SIGTERM or Ctrl-C, `/readyz` answers 503 while both
    /// listeners still accept and serve, before they close and the calls in
    /// flight drain: the time a load balancer or Kubernetes takes to stop
    /// sending new connections (0s closes at once).
    #[arg(
        long,
        env = "TOLLGATE_DRAIN_DELAY",
        value_name = "DURATION",
        default_value = "5s",
        value_parser = tollgate_core::duration::parse_duration
    )]
    pub drain_delay: Duration,
}

/// The connections each listener keeps open unless configured otherwise (the proxy's default).
const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// A count that may be 0 (0 turns the thing it counts off).
fn parse_count(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("{text:?} is not a whole number"))
}

/// A timeout: a duration above zero.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match tollgate_core::duration::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("{text:?} is not above zero")),
        Err(error) => Err(error.to_string()),
    }
}

/// A cap: a whole number of at least 1.
fn parse_cap(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

impl ServeArgs {
    /// The engine's options from the store bounds.
    fn engine_options(&self, settings: &Settings) -> EngineOptions {
        EngineOptions {
            global_shadow_mode: settings.shadow_mode,
            store_config: StoreConfig::with_max_keys(self.max_keys)
                .with_max_log_entries(self.max_log_entries),
            override_store_config: StoreConfig::with_max_keys(self.max_override_keys)
                .with_max_log_entries(self.max_log_entries),
            max_override_stores: self.max_override_stores,
            max_retired_stores: self.max_retired_stores,
            global_quota_mode: settings.quota_mode,
            stop_increment_when_over_limit: settings.stop_increment_when_over_limit,
        }
    }

    /// The bounds on one request.
    fn request_caps(&self) -> RequestCaps {
        RequestCaps {
            max_descriptors: self.max_descriptors,
            max_descriptor_entries: self.max_descriptor_entries,
            max_message_bytes: self.max_request_bytes,
        }
    }
}

/// A signed duration (`-3s`, `250ms`) in nanoseconds.
fn parse_offset(text: &str) -> Result<i64, String> {
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let d = tollgate_core::duration::parse_duration(magnitude).map_err(|e| e.to_string())?;
    let nanos = i64::try_from(d.as_nanos()).map_err(|_| format!("`{text}` is too large"))?;
    Ok(if negative { -nanos } else { nanos })
}

/// The store to use, if not memory: the flag (or `TOLLGATE_STORE`), else upstream's `REDIS_*` variables.
fn store_setting(
    args: &ServeArgs,
    env: &UpstreamEnv,
) -> Result<Option<UpstreamStore>, CommandError> {
    match args.store.as_deref() {
        Some("memory") => Ok(None),
        Some(url) => Ok(Some(UpstreamStore {
            url: url.to_owned(),
            tls: None,
        })),
        None => upstream_store(env),
    }
}

/// How `serve` writes its log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Plain lines for people: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields.message`, the other fields.
    Json,
}

/// Where statsd lines go (upstream's `USE_STATSD`, `STATSD_HOST`, `STATSD_PORT`, `STATS_FLUSH_INTERVAL`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct StatsdSetting {
    target: String,
    interval: Duration,
}

/// What `serve` runs with once flags and environment are combined.
#[derive(Clone, Debug, PartialEq)]
struct Settings {
    /// Upstream variables that are set and change nothing, to log at start.
    notes: Vec<String>,
    config: PathBuf,
    merge_domains: bool,
    /// Every descriptor is a quota descriptor (upstream's `QUOTA_MODE`).
    quota_mode: bool,
    /// Give back what other descriptors took when one is over (upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    stop_increment_when_over_limit: bool,
    /// Start even with no rate limit (upstream's `FORCE_START_WITHOUT_INITIAL_CONFIG`).
    force_start_without_initial_config: bool,
    /// TLS on the listeners: `--tls-*`, or upstream's `GRPC_SERVER_*` / `GRPC_CLIENT_TLS_*`.
    tls: Option<ServerTlsFiles>,
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    debug_addr: Option<SocketAddr>,
    store: Option<UpstreamStore>,
    store_timeout: Duration,
    key_prefix: Option<String>,
    statsd: Option<StatsdSetting>,
    shadow_mode: bool,
    log_level: tracing::Level,
    log_format: LogFormat,
    near_limit_ratio: f64,
    headers: HeaderOptions,
}

/// Combines the flags (and `TOLLGATE_*` variables, which clap has read)
/// with upstream's variables in `env`; the variables' table is checked first.
fn settings(args: &ServeArgs, env: &UpstreamEnv) -> Result<Settings, CommandError> {
    let notes = env.check()?;
    // Without --config, `serve` is configured the way upstream is: its
    // runtime directory and its listening defaults.
    let upstream = args.config.is_none();
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
    let statsd = statsd_setting(env)?;
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
        config,
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
        statsd,
        shadow_mode: args.shadow_mode || upstream_shadow,
        log_level,
        log_format,
        near_limit_ratio,
        headers,
    })
}

/// The address to listen on: the flag; else, when upstream's host or port
/// variable is set or `upstream` configures `serve`, the host (default
/// 0.0.0.0) and port (default upstream's) they give; else `None`.
fn listen_addr(
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
fn runtime_directory(env: &UpstreamEnv) -> PathBuf {
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
fn parse_log_level(value: &str) -> Result<tracing::Level, CommandError> {
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

/// statsd output: on with `USE_STATSD=true` unless `DISABLE_STATS=true`.
fn statsd_setting(env: &UpstreamEnv) -> Result<Option<StatsdSetting>, CommandError> {
    let disabled = env.bool("DISABLE_STATS")?.unwrap_or(false);
    if !env.bool("USE_STATSD")?.unwrap_or(false) || disabled {
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
    Ok(Some(StatsdSetting { target, interval }))
}

/// Parses a ratio between 0 and 1.
fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("{text:?} is not a number between 0 and 1")),
    }
}

/// Whether `name` is an HTTP field name (an RFC 9110 token).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Loads the limits, then serves gRPC until SIGTERM or Ctrl-C and drains the calls in flight.
///
/// A configuration with any error never starts: every diagnostic is
/// printed as `file:line:col: …` on stderr and the command fails. While
/// serving, a change under the config path or SIGHUP reloads it all or
/// nothing (see [`tollgate_server::reload`]).
pub fn run(args: &ServeArgs) -> Result<(), CommandError> {
    let settings = settings(args, &UpstreamEnv::from_process())?;
    // A second initialisation (only possible in tests) keeps the first subscriber.
    let logs = tracing_subscriber::fmt()
        .with_max_level(settings.log_level)
        .with_writer(std::io::stderr);
    let _ = match settings.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => logs.json().with_ansi(false).try_init(),
    };
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
    let read = read_config(config_path, start_options).map_err(|error| {
        CommandError::Failed(format!("cannot read {}: {error}", config_path.display()))
    })?;
    let config_hash = read.hash;
    let loaded = read.loaded;
    let file_count = loaded.file_count;
    let (rules, warnings) = match loaded.into_result() {
        Ok(ok) => ok,
        Err(diagnostics) => {
            for diagnostic in diagnostics.all() {
                eprintln!("{diagnostic}");
            }
            return Err(CommandError::Failed(format!(
                "{} has errors; not starting",
                config_path.display()
            )));
        }
    };
    for diagnostic in warnings.all() {
        eprintln!("{diagnostic}");
    }
    if rules.rule_count() == 0 && !args.limits.allow_empty_config {
        tracing::warn!(
            config = %config_path.display(),
            "started without a rate limit (--force-start-without-initial-config): every request is unlimited until a reload brings rules; a reload back to no rule is refused"
        );
    }
    tracing::info!(
        config = %config_path.display(),
        files = file_count,
        domains = rules.domain_count(),
        rules = rules.rule_count(),
        hash = %format_args!("{config_hash:016x}"),
        "limits loaded"
    );

    let engine_options = args.engine_options(&settings);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tollgate-worker")
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
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
            tracing::info!(store = ?redis.target(), timeout = ?settings.store_timeout, "counters in Redis");
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
    let mut metrics = Metrics::new(
        Arc::clone(&live) as Arc<dyn ConfigStats>,
        settings.near_limit_ratio,
    )
    .with_request_caps(&caps)
    .with_max_metric_keys(args.max_metric_keys)
    .with_bounds(BoundsCollector::new(
        Arc::clone(&live) as Arc<dyn BoundsSource>,
        limits.gauged(),
    ));
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
    runtime.block_on(serve(listen, live, headers, metrics, caps, limits))
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
        .with_caps(caps);
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
    let engine = live.engine();
    if let Some(remote) = engine.remote() {
        let units = remote.return_leases(engine.now()).await;
        tracing::info!(units, "outstanding leases returned");
    }
    if let Some(statsd) = statsd {
        // The last flush after the stop; a panic in it is not worth failing the exit.
        let _ = statsd.await;
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    use std::path::Path;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn resolve(flags: &[&str], env: &[(&str, &str)]) -> Result<Settings, CommandError> {
        let mut argv = vec!["serve", "--config", "limits"];
        argv.extend_from_slice(flags);
        let cli = Cli::try_parse_from(argv).expect("the flags parse");
        settings(&cli.serve, &UpstreamEnv::from_pairs(env.iter().copied()))
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    #[test]
    fn defaults_are_loopback_8081_no_shadow_info() {
        let s = resolve(&[], &[]).expect("valid");
        assert_eq!(s.grpc_addr, addr("127.0.0.1:8081"));
        assert_eq!(s.http_addr, addr("127.0.0.1:8080"));
        assert!(!s.shadow_mode);
        assert_eq!(s.log_level, tracing::Level::INFO);
        assert_eq!(s.headers, HeaderOptions::default());
        assert!(s.headers.is_off());
    }

    #[test]
    fn header_flags_and_upstreams_header_variables() {
        let s = resolve(
            &[
                "--limit-headers",
                "--ietf-headers",
                "--retry-after",
                "--retry-after-jitter",
                "2s",
                "--raw-body",
            ],
            &[],
        )
        .expect("valid");
        assert_eq!(
            s.headers,
            HeaderOptions {
                limit_headers: true,
                limit_header_names: LimitHeaderNames::default(),
                ietf_headers: true,
                retry_after: true,
                retry_after_jitter: Duration::from_secs(2),
                raw_body: true,
            }
        );

        let env = [
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", "X-Limit"),
            ("LIMIT_REMAINING_HEADER", "X-Left"),
            ("LIMIT_RESET_HEADER", "X-Reset"),
        ];
        let s = resolve(&[], &env).expect("valid");
        assert!(s.headers.limit_headers);
        assert!(!s.headers.ietf_headers && !s.headers.retry_after && !s.headers.raw_body);
        assert_eq!(
            s.headers.limit_header_names,
            LimitHeaderNames {
                limit: "X-Limit".to_owned(),
                remaining: "X-Left".to_owned(),
                reset: "X-Reset".to_owned(),
            }
        );
        let off = resolve(&[], &[("LIMIT_RESPONSE_HEADERS_ENABLED", "false")]).expect("valid");
        assert!(!off.headers.limit_headers);
        let bad_jitter = [
            "serve",
            "--config",
            "limits",
            "--retry-after-jitter",
            "soon",
        ];
        assert!(Cli::try_parse_from(bad_jitter).is_err());
    }

    #[test]
    fn upstream_variables_apply_when_no_flag_says_otherwise() {
        let env = [
            ("GRPC_PORT", "9091"),
            ("SHADOW_MODE", "true"),
            ("LOG_LEVEL", "DEBUG"),
        ];
        let s = resolve(&[], &env).expect("valid");
        assert_eq!(s.grpc_addr, addr("0.0.0.0:9091"));
        assert_eq!(s.http_addr, addr("127.0.0.1:8080"));
        let upstream_http = [("HOST", "127.0.0.1"), ("PORT", "9090")];
        assert_eq!(
            resolve(&[], &upstream_http).expect("valid").http_addr,
            addr("127.0.0.1:9090")
        );
        assert_eq!(
            resolve(&["--http-addr", "127.0.0.1:0"], &upstream_http)
                .expect("valid")
                .http_addr,
            addr("127.0.0.1:0")
        );
        assert!(s.shadow_mode);
        assert_eq!(s.log_level, tracing::Level::DEBUG);

        let with_host = [("GRPC_HOST", "127.0.0.1"), ("GRPC_PORT", "9091")];
        assert_eq!(
            resolve(&[], &with_host).expect("valid").grpc_addr,
            addr("127.0.0.1:9091")
        );

        let s =
            resolve(&["--grpc-addr", "127.0.0.1:0", "--log-level", "warn"], &env).expect("valid");
        assert_eq!(s.grpc_addr, addr("127.0.0.1:0"));
        assert_eq!(s.log_level, tracing::Level::WARN);
    }

    #[test]
    fn log_format_and_near_limit_ratio_from_flags_or_upstreams_variables() {
        let s = resolve(&[], &[]).expect("valid");
        assert_eq!(
            (s.log_format, s.near_limit_ratio),
            (LogFormat::Text, DEFAULT_NEAR_LIMIT_RATIO)
        );
        let env = [("LOG_FORMAT", "JSON"), ("NEAR_LIMIT_RATIO", "0.5")];
        let s = resolve(&[], &env).expect("valid");
        assert_eq!((s.log_format, s.near_limit_ratio), (LogFormat::Json, 0.5));
        let flags = ["--log-format", "text", "--near-limit-ratio", "0.9"];
        let s = resolve(&flags, &env).expect("valid");
        assert_eq!((s.log_format, s.near_limit_ratio), (LogFormat::Text, 0.9));
        let bad_ratio = ["serve", "--config", "limits", "--near-limit-ratio", "2"];
        assert!(Cli::try_parse_from(bad_ratio).is_err());
    }

    #[test]
    fn request_caps_have_defaults_flags_and_refuse_zero() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["serve", "--config", "limits"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|cli| cli.serve.request_caps())
        };
        assert_eq!(parse(&[]).expect("valid"), RequestCaps::default());
        let caps = parse(&[
            "--max-descriptors",
            "8",
            "--max-descriptor-entries",
            "4",
            "--max-request-bytes",
            "65536",
        ])
        .expect("valid");
        assert_eq!(
            caps,
            RequestCaps {
                max_descriptors: 8,
                max_descriptor_entries: 4,
                max_message_bytes: 65536,
            }
        );
        assert!(parse(&["--max-descriptors", "0"]).is_err());
        assert!(parse(&["--max-request-bytes", "1MiB"]).is_err());
    }

    #[test]
    fn store_and_connection_bounds_have_defaults_flags_and_refuse_bad_values() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["serve", "--config", "limits"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|cli| cli.serve)
        };
        let defaults = parse(&[]).expect("valid");
        let no_env = UpstreamEnv::from_pairs::<&str, &str>([]);
        let options = defaults.engine_options(&settings(&defaults, &no_env).expect("valid"));
        assert!(!options.global_shadow_mode);
        assert_eq!(options.store_config.max_keys, 1_000_000);
        assert_eq!(
            options.store_config.max_log_entries,
            DEFAULT_MAX_LOG_ENTRIES
        );
        assert_eq!(options.override_store_config.max_keys, 100_000);
        assert_eq!(options.max_override_stores, 1024);
        assert_eq!(defaults.quick_deny_keys, 65_536);
        assert_eq!(defaults.max_connections, 10_000);
        assert_eq!(defaults.request_headers_timeout, Duration::from_secs(10));
        let set = parse(&[
            "--max-keys",
            "5000",
            "--max-override-keys",
            "700",
            "--max-override-stores",
            "3",
            "--max-log-entries",
            "900",
            "--quick-deny-keys",
            "0",
            "--max-connections",
            "2",
            "--request-headers-timeout",
            "250ms",
            "--shadow-mode",
        ])
        .expect("valid");
        let options = set.engine_options(&settings(&set, &no_env).expect("valid"));
        assert!(options.global_shadow_mode);
        assert_eq!(
            (
                options.store_config.max_keys,
                options.store_config.max_log_entries,
                options.override_store_config.max_keys,
                options.max_override_stores,
            ),
            (5000, 900, 700, 3)
        );
        assert_eq!(
            (
                set.quick_deny_keys,
                set.max_connections,
                set.request_headers_timeout
            ),
            (0, 2, Duration::from_millis(250))
        );
        for bad in [
            ["--max-keys", "0"],
            ["--max-override-keys", "many"],
            ["--max-override-stores", "1.5"],
            ["--max-log-entries", "0"],
            ["--quick-deny-keys", "lots"],
            ["--max-connections", "0"],
            ["--request-headers-timeout", "0s"],
            ["--request-headers-timeout", "soon"],
        ] {
            let error = parse(&bad).expect_err("refused").to_string();
            assert!(error.contains(bad[0]), "{bad:?}: {error}");
        }
    }

    #[test]
    fn bad_upstream_values_are_usage_errors() {
        for env in [
            [("GRPC_PORT", "http")],
            [("PORT", "eighty")],
            [("SHADOW_MODE", "maybe")],
            [("LOG_LEVEL", "loud")],
            [("LIMIT_RESPONSE_HEADERS_ENABLED", "yes please")],
            [("LIMIT_RESET_HEADER", "bad name")],
            [("LOG_FORMAT", "xml")],
            [("NEAR_LIMIT_RATIO", "1.5")],
        ] {
            match resolve(&[], &env) {
                Err(CommandError::Usage(message)) => {
                    assert!(message.contains(env[0].0), "{message}")
                }
                other => panic!("{env:?}: expected a usage error, got {other:?}"),
            }
        }
    }

    /// The variables of one honoured case and the check of the setting they change.
    type HonouredCase = (Vec<(&'static str, &'static str)>, fn(&Settings) -> bool);

    /// The setting each honoured variable changes, checked on `Settings`.
    fn honoured_case(name: &str) -> HonouredCase {
        match name {
            "HOST" => (vec![("HOST", "::")], |s| s.http_addr == addr("[::]:8080")),
            "PORT" => (vec![("PORT", "9")], |s| s.http_addr == addr("0.0.0.0:9")),
            "GRPC_HOST" => (vec![("GRPC_HOST", "::")], |s| {
                s.grpc_addr == addr("[::]:8081")
            }),
            "GRPC_PORT" => (vec![("GRPC_PORT", "9")], |s| {
                s.grpc_addr == addr("0.0.0.0:9")
            }),
            "DEBUG_HOST" => (vec![("DEBUG_HOST", "::1")], |s| {
                s.debug_addr == Some(addr("[::1]:6070"))
            }),
            "DEBUG_PORT" => (vec![("DEBUG_PORT", "9")], |s| {
                s.debug_addr == Some(addr("0.0.0.0:9"))
            }),
            "LOG_LEVEL" => (vec![("LOG_LEVEL", "warning")], |s| {
                s.log_level == tracing::Level::WARN
            }),
            "LOG_FORMAT" => (vec![("LOG_FORMAT", "json")], |s| {
                s.log_format == LogFormat::Json
            }),
            "RUNTIME_ROOT" => (vec![("RUNTIME_ROOT", "/data")], |s| {
                s.config == Path::new("/data/config")
            }),
            "RUNTIME_SUBDIRECTORY" => (vec![("RUNTIME_SUBDIRECTORY", "rl")], |s| {
                s.config == Path::new("/srv/runtime_data/current/rl/config")
            }),
            "RUNTIME_APPDIRECTORY" => (vec![("RUNTIME_APPDIRECTORY", "limits")], |s| {
                s.config == Path::new("/srv/runtime_data/current/limits")
            }),
            // Either value reloads on every change, ConfigMap swaps included, and dotfiles
            // are never limits files; a value that is not a boolean is refused.
            "RUNTIME_WATCH_ROOT" => (vec![("RUNTIME_WATCH_ROOT", "false")], |_| true),
            "RUNTIME_IGNOREDOTFILES" => (vec![("RUNTIME_IGNOREDOTFILES", "true")], |_| true),
            "MERGE_DOMAIN_CONFIG" => (vec![("MERGE_DOMAIN_CONFIG", "true")], |s| s.merge_domains),
            "QUOTA_MODE" => (vec![("QUOTA_MODE", "true")], |s| s.quota_mode),
            "GRPC_SERVER_USE_TLS" | "GRPC_SERVER_TLS_CERT" | "GRPC_SERVER_TLS_KEY" => (
                vec![
                    ("GRPC_SERVER_USE_TLS", "true"),
                    ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
                    ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
                ],
                |s| {
                    s.tls.as_ref().is_some_and(|t| {
                        t.cert == Path::new("/tls/cert.pem") && t.key == Path::new("/tls/key.pem")
                    })
                },
            ),
            "GRPC_CLIENT_TLS_CACERT" | "GRPC_CLIENT_TLS_SAN" => (
                vec![
                    ("GRPC_SERVER_USE_TLS", "true"),
                    ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
                    ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
                    ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
                    ("GRPC_CLIENT_TLS_SAN", "envoy.istio-system"),
                ],
                |s| {
                    s.tls.as_ref().is_some_and(|t| {
                        t.client_ca.as_deref() == Some(Path::new("/tls/ca.pem"))
                            && t.client_sans == ["envoy.istio-system"]
                    })
                },
            ),
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT" => (
                vec![("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
                |s| s.stop_increment_when_over_limit,
            ),
            "FORCE_START_WITHOUT_INITIAL_CONFIG" => {
                (vec![("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")], |s| {
                    s.force_start_without_initial_config
                })
            }
            "SHADOW_MODE" => (vec![("SHADOW_MODE", "1")], |s| s.shadow_mode),
            "NEAR_LIMIT_RATIO" => (vec![("NEAR_LIMIT_RATIO", "0.5")], |s| {
                s.near_limit_ratio == 0.5
            }),
            "LIMIT_RESPONSE_HEADERS_ENABLED" => {
                (vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "true")], |s| {
                    s.headers.limit_headers
                })
            }
            "LIMIT_LIMIT_HEADER" => (vec![("LIMIT_LIMIT_HEADER", "X-L")], |s| {
                s.headers.limit_header_names.limit == "X-L"
            }),
            "LIMIT_REMAINING_HEADER" => (vec![("LIMIT_REMAINING_HEADER", "X-R")], |s| {
                s.headers.limit_header_names.remaining == "X-R"
            }),
            "LIMIT_RESET_HEADER" => (vec![("LIMIT_RESET_HEADER", "X-T")], |s| {
                s.headers.limit_header_names.reset == "X-T"
            }),
            "REDIS_URL" => (vec![("REDIS_URL", "/run/r.sock")], |s| {
                s.store.as_ref().map(|x| x.url.as_str()) == Some("unix:///run/r.sock")
            }),
            "REDIS_SOCKET_TYPE" => (
                vec![("REDIS_URL", "r:6379"), ("REDIS_SOCKET_TYPE", "tcp")],
                |s| s.store.as_ref().map(|x| x.url.as_str()) == Some("redis://r:6379"),
            ),
            "REDIS_TYPE" => (
                vec![("REDIS_URL", "a:1,b:2"), ("REDIS_TYPE", "cluster")],
                |s| s.store.as_ref().map(|x| x.url.as_str()) == Some("redis-cluster://a:1,b:2"),
            ),
            "REDIS_AUTH" => (
                vec![
                    ("REDIS_URL", "r:1"),
                    ("REDIS_SOCKET_TYPE", "tcp"),
                    ("REDIS_AUTH", "pw"),
                ],
                |s| s.store.as_ref().map(|x| x.url.as_str()) == Some("redis://:pw@r:1"),
            ),
            "REDIS_TLS" => (
                vec![
                    ("REDIS_URL", "r:1"),
                    ("REDIS_SOCKET_TYPE", "tcp"),
                    ("REDIS_TLS", "true"),
                ],
                |s| {
                    s.store
                        .as_ref()
                        .is_some_and(|x| x.url == "rediss://r:1" && x.tls.is_some())
                },
            ),
            "CACHE_KEY_PREFIX" => (vec![("CACHE_KEY_PREFIX", "app_")], |s| {
                s.key_prefix.as_deref() == Some("app_")
            }),
            "REDIS_TIMEOUT" => (vec![("REDIS_TIMEOUT", "250ms")], |s| {
                s.store_timeout == Duration::from_millis(250)
            }),
            "USE_STATSD" => (vec![("USE_STATSD", "true")], |s| {
                s.statsd.as_ref().map(|x| x.target.as_str()) == Some("localhost:8125")
            }),
            "STATSD_HOST" => (vec![("USE_STATSD", "true"), ("STATSD_HOST", "::1")], |s| {
                s.statsd.as_ref().map(|x| x.target.as_str()) == Some("[::1]:8125")
            }),
            "STATSD_PORT" => (vec![("USE_STATSD", "true"), ("STATSD_PORT", "9")], |s| {
                s.statsd.as_ref().map(|x| x.target.as_str()) == Some("localhost:9")
            }),
            "STATS_FLUSH_INTERVAL" => (
                vec![("USE_STATSD", "true"), ("STATS_FLUSH_INTERVAL", "1s")],
                |s| s.statsd.as_ref().map(|x| x.interval) == Some(Duration::from_secs(1)),
            ),
            "DISABLE_STATS" => (
                vec![("USE_STATSD", "true"), ("DISABLE_STATS", "true")],
                |s| s.statsd.is_none(),
            ),
            other => panic!("{other} is honoured but has no case in this table test"),
        }
    }

    /// The files `REDIS_TLS_*` name are read at start: an unreadable one is an error naming it.
    #[test]
    fn redis_tls_files_are_read_at_start() {
        for name in [
            "REDIS_TLS_CACERT",
            "REDIS_TLS_CLIENT_CERT",
            "REDIS_TLS_CLIENT_KEY",
        ] {
            let env = [
                ("REDIS_URL", "r:1"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TLS", "true"),
                (name, "/nonexistent/tollgate-test.pem"),
            ];
            match resolve(&[], &env) {
                Err(CommandError::Usage(message)) => assert!(message.contains(name), "{message}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    /// Every upstream variable, one row at a time: honoured ones change their
    /// setting, refused values stop start-up naming the variable and leave
    /// upstream's default accepted, no-effect ones are accepted and noted.
    #[test]
    fn every_upstream_variable_is_honoured_refused_or_noted_by_name() {
        use crate::upstream_env::{Disposition, VARIABLES};
        let upstream = |env: &[(&str, &str)]| {
            let cli = Cli::try_parse_from(["serve"]).expect("no flags parse");
            settings(&cli.serve, &UpstreamEnv::from_pairs(env.iter().copied()))
        };
        for variable in VARIABLES {
            let name = variable.name;
            let refusing = match variable.disposition {
                Disposition::Honoured => {
                    if [
                        "REDIS_TLS_CLIENT_CERT",
                        "REDIS_TLS_CLIENT_KEY",
                        "REDIS_TLS_CACERT",
                    ]
                    .contains(&name)
                    {
                        continue; // redis_tls_files_are_read_at_start
                    }
                    let (env, check) = honoured_case(name);
                    let s = upstream(&env).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                    assert!(check(&s), "{name}: {s:?}");
                    if ["RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"].contains(&name) {
                        assert!(
                            upstream(&[(name, "sometimes")]).is_err(),
                            "{name}=sometimes"
                        );
                    }
                    continue;
                }
                Disposition::NoEffect(_) => {
                    let s = upstream(&[(name, "1")]).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                    assert!(
                        s.notes.iter().any(|n| n.starts_with(name)),
                        "{name}: {:?}",
                        s.notes
                    );
                    continue;
                }
                Disposition::RefusedWhenTrue(_) => "true",
                Disposition::RefusedWhenSet(_) => "anything",
                Disposition::RefusedUnless(..) => "unsupported",
            };
            match upstream(&[(name, refusing)]) {
                Err(CommandError::Usage(message)) => {
                    assert!(message.starts_with(name), "{name}: {message}");
                }
                other => panic!("{name}={refusing}: expected a refusal, got {other:?}"),
            }
            if !variable.default.is_empty() {
                upstream(&[(name, variable.default)])
                    .unwrap_or_else(|e| panic!("{name}={}: {e:?}", variable.default));
            }
        }
    }

    #[test]
    fn without_config_serve_reads_upstreams_runtime_directory_and_listens_like_upstream() {
        let cli = Cli::try_parse_from(["serve"]).expect("no flags parse");
        let s = settings(&cli.serve, &UpstreamEnv::default()).expect("valid");
        assert_eq!(s.config, Path::new("/srv/runtime_data/current/config"));
        assert_eq!(s.grpc_addr, addr("0.0.0.0:8081"));
        assert_eq!(s.http_addr, addr("0.0.0.0:8080"));
        assert_eq!(s.debug_addr, Some(addr("0.0.0.0:6070")));
        assert_eq!(s.store, None);
        assert_eq!(s.store_timeout, tollgate_redis::DEFAULT_TIMEOUT);
        // With --config, Tollgate's own loopback defaults and no debug port.
        let s = resolve(&[], &[]).expect("valid");
        assert_eq!(s.debug_addr, None);
        // A host without a port listens on upstream's port (it used to be ignored).
        let s = resolve(&[], &[("GRPC_HOST", "::"), ("HOST", "0.0.0.0")]).expect("valid");
        assert_eq!(s.grpc_addr, addr("[::]:8081"));
        assert_eq!(s.http_addr, addr("0.0.0.0:8080"));
    }
}
