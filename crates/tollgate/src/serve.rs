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
use tollgate_runtime::{Shutdown, shutdown_signal};
use tollgate_server::metric_key::DEFAULT_MAX_METRIC_KEYS;
use tollgate_server::metrics::{ConfigStats, DEFAULT_NEAR_LIMIT_RATIO, Metrics};
use tollgate_server::reload::{self, read_config};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions, LiveEngine, grpc, http};

use crate::CommandError;
use crate::limits_args::LimitsArgs;

/// The address served when neither a flag nor an environment variable names one.
const DEFAULT_GRPC_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8081);

/// The HTTP address served when neither a flag nor an environment variable names one.
const DEFAULT_HTTP_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// The arguments of `tollgate serve`.
///
/// Each flag has a `TOLLGATE_*` variable; upstream envoyproxy/ratelimit's
/// `GRPC_HOST`/`GRPC_PORT`, `HOST`/`PORT`, `SHADOW_MODE`, `LOG_LEVEL` and
/// `LIMIT_RESPONSE_HEADERS_ENABLED` (with `LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`) are read too, after the
/// flag and the `TOLLGATE_*` variable.
#[derive(Args, Debug)]
#[command(
    after_help = "Upstream's GRPC_HOST (default 0.0.0.0) and GRPC_PORT, HOST (default 0.0.0.0) and PORT (the HTTP API), SHADOW_MODE, LOG_LEVEL, LOG_FORMAT, NEAR_LIMIT_RATIO and LIMIT_RESPONSE_HEADERS_ENABLED (with LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER) are also read, after the flags and TOLLGATE_* variables."
)]
pub struct ServeArgs {
    /// A limits file, or a directory of `*.yaml` / `*.yml` limits files
    /// (envoyproxy/ratelimit's format, with Tollgate's extensions).
    #[arg(long, env = "TOLLGATE_CONFIG", value_name = "PATH")]
    pub config: PathBuf,
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
    /// How long one Redis call may take before the rule's `on_store_error` answers.
    #[arg(long, env = "TOLLGATE_STORE_TIMEOUT", value_name = "DURATION", default_value = "5ms", value_parser = tollgate_core::duration::parse_duration)]
    pub store_timeout: Duration,
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
}

/// A cap: a whole number of at least 1.
fn parse_cap(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

impl ServeArgs {
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

/// The Redis URL to use, if any: the flag (or `TOLLGATE_STORE`), else upstream's `REDIS_URL`.
fn store_url(args: &ServeArgs, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    match args.store.as_deref() {
        Some("memory") => None,
        Some(url) => Some(url.to_owned()),
        None => {
            let url = env("REDIS_URL").filter(|u| !u.is_empty())?;
            if url.contains("://") {
                return Some(url);
            }
            let scheme = match env("REDIS_SOCKET_TYPE").as_deref() {
                Some("unix") => "unix://",
                _ => "redis://",
            };
            Some(format!("{scheme}{url}"))
        }
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

/// What `serve` runs with once flags and environment are combined.
#[derive(Clone, Debug, PartialEq)]
struct Settings {
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    shadow_mode: bool,
    log_level: tracing::Level,
    log_format: LogFormat,
    near_limit_ratio: f64,
    headers: HeaderOptions,
}

/// Combines the flags (and `TOLLGATE_*` variables, which clap has read)
/// with upstream's variables, looked up through `env`.
fn settings(
    args: &ServeArgs,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Settings, CommandError> {
    let grpc_addr = listen_addr(
        args.grpc_addr,
        "GRPC_HOST",
        "GRPC_PORT",
        DEFAULT_GRPC_ADDR,
        &env,
    )?;
    let http_addr = listen_addr(args.http_addr, "HOST", "PORT", DEFAULT_HTTP_ADDR, &env)?;
    let upstream_shadow = match env("SHADOW_MODE") {
        None => false,
        Some(value) => parse_bool(&value).ok_or_else(|| {
            CommandError::Usage(format!("SHADOW_MODE={value:?} is not true or false"))
        })?,
    };
    let log_level = match (args.log_level, env("LOG_LEVEL")) {
        (Some(level), _) => level,
        (None, Some(value)) => value.trim().parse().map_err(|_| {
            CommandError::Usage(format!(
                "LOG_LEVEL={value:?} is not one of error, warn, info, debug, trace"
            ))
        })?,
        (None, None) => tracing::Level::INFO,
    };
    let log_format = match (args.log_format, env("LOG_FORMAT")) {
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
    let near_limit_ratio = match (args.near_limit_ratio, env("NEAR_LIMIT_RATIO")) {
        (Some(ratio), _) => ratio,
        (None, Some(value)) => parse_ratio(&value)
            .map_err(|error| CommandError::Usage(format!("NEAR_LIMIT_RATIO={error}")))?,
        (None, None) => DEFAULT_NEAR_LIMIT_RATIO,
    };
    let upstream_limit_headers = match env("LIMIT_RESPONSE_HEADERS_ENABLED") {
        None => false,
        Some(value) => parse_bool(&value).ok_or_else(|| {
            CommandError::Usage(format!(
                "LIMIT_RESPONSE_HEADERS_ENABLED={value:?} is not true or false"
            ))
        })?,
    };
    let defaults = LimitHeaderNames::default();
    let header_name = |variable: &str, default: String| -> Result<String, CommandError> {
        match env(variable) {
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
        grpc_addr,
        http_addr,
        shadow_mode: args.shadow_mode || upstream_shadow,
        log_level,
        log_format,
        near_limit_ratio,
        headers,
    })
}

/// The address to listen on: the flag, else upstream's `host_var`
/// (default 0.0.0.0) and `port_var` when the port is set, else `default`.
fn listen_addr(
    flag: Option<SocketAddr>,
    host_var: &str,
    port_var: &str,
    default: SocketAddr,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<SocketAddr, CommandError> {
    match (flag, env(port_var)) {
        (Some(addr), _) => Ok(addr),
        (None, Some(port)) => {
            let port: u16 = port.trim().parse().map_err(|_| {
                CommandError::Usage(format!("{port_var}={port:?} is not a port number"))
            })?;
            let host = env(host_var).unwrap_or_else(|| "0.0.0.0".to_owned());
            let ip: std::net::IpAddr = host.trim().parse().map_err(|_| {
                CommandError::Usage(format!("{host_var}={host:?} is not an IP address"))
            })?;
            Ok(SocketAddr::new(ip, port))
        }
        (None, None) => Ok(default),
    }
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

/// Reads a boolean the way upstream's configuration does (`1`, `t`, `true`, `0`, `f`, `false`, any case).
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" => Some(true),
        "0" | "f" | "false" | "" => Some(false),
        _ => None,
    }
}

/// Loads the limits, then serves gRPC until SIGTERM or Ctrl-C and drains the calls in flight.
///
/// A configuration with any error never starts: every diagnostic is
/// printed as `file:line:col: …` on stderr and the command fails. While
/// serving, a change under the config path or SIGHUP reloads it all or
/// nothing (see [`tollgate_server::reload`]).
pub fn run(args: &ServeArgs) -> Result<(), CommandError> {
    let settings = settings(args, |name| std::env::var(name).ok())?;
    // A second initialisation (only possible in tests) keeps the first subscriber.
    let logs = tracing_subscriber::fmt()
        .with_max_level(settings.log_level)
        .with_writer(std::io::stderr);
    let _ = match settings.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => logs.json().with_ansi(false).try_init(),
    };

    // Reloads keep refusing an empty configuration unless it is allowed,
    // whatever the start accepted.
    let options = args.limits.load_options();
    let start_options = LoadOptions {
        allow_empty: options.allow_empty || args.force_start_without_initial_config,
        ..options
    };
    let read = read_config(&args.config, start_options).map_err(|error| {
        CommandError::Failed(format!("cannot read {}: {error}", args.config.display()))
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
                args.config.display()
            )));
        }
    };
    for diagnostic in warnings.all() {
        eprintln!("{diagnostic}");
    }
    if rules.rule_count() == 0 && !args.limits.allow_empty_config {
        tracing::warn!(
            config = %args.config.display(),
            "started without a rate limit (--force-start-without-initial-config): every request is unlimited until a reload brings rules; a reload back to no rule is refused"
        );
    }
    tracing::info!(
        config = %args.config.display(),
        files = file_count,
        domains = rules.domain_count(),
        rules = rules.rule_count(),
        hash = %format_args!("{config_hash:016x}"),
        "limits loaded"
    );

    let engine_options = EngineOptions {
        global_shadow_mode: settings.shadow_mode,
        global_quota_mode: args.quota_mode,
        stop_increment_when_over_limit: args.stop_increment_when_over_limit,
        max_retired_stores: args.max_retired_stores,
        ..EngineOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tollgate-worker")
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    // Follows the system wall clock (re-read every millisecond, never going
    // back): the in-memory counters and the Redis store's `local` fallback
    // both decide on it. See tollgate_core::clock for steps of the wall.
    let clock = CoarseClock::shifted(args.clock_offset);
    let engine = match store_url(args, |name| std::env::var(name).ok()) {
        None => Engine::new(Arc::new(rules), engine_options, clock.clone()),
        Some(url) => {
            let redis = runtime
                .block_on(RedisStore::connect(&url, args.store_timeout))
                .map_err(|error| CommandError::Failed(error.to_string()))?;
            tracing::info!(store = ?redis.target(), timeout = ?args.store_timeout, "counters in Redis");
            let remote = RemoteStore::new(
                redis,
                RemoteOptions {
                    expected_instances: args.expected_instances.max(1),
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
        args.config.clone(),
        options,
        config_hash,
    ));

    let headers = Arc::new(ResponseHeaders::new(settings.headers, Jitter::random()));
    let caps = args.request_caps();
    let mut metrics = Metrics::new(
        Arc::clone(&live) as Arc<dyn ConfigStats>,
        settings.near_limit_ratio,
    )
    .with_request_caps(&caps)
    .with_max_metric_keys(args.max_metric_keys);
    if let Some(remote) = live.load().remote() {
        metrics = metrics.with_store(Arc::clone(remote));
    }
    let metrics = Arc::new(metrics);
    runtime.block_on(serve(
        settings.grpc_addr,
        settings.http_addr,
        live,
        headers,
        metrics,
        caps,
    ))
}

/// Binds both addresses, announces them and serves gRPC and HTTP until a shutdown signal.
async fn serve(
    addr: SocketAddr,
    http_addr: SocketAddr,
    live: Arc<LiveEngine<CoarseClock>>,
    headers: Arc<ResponseHeaders>,
    metrics: Arc<Metrics>,
    caps: RequestCaps,
) -> Result<(), CommandError> {
    // Watch (and hear SIGHUP) before announcing, so no change after the announcement is missed.
    let _reloading = reload::watch(&live);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|error| CommandError::Failed(format!("cannot listen on {addr}: {error}")))?;
    let bound = listener
        .local_addr()
        .map_err(|error| CommandError::Failed(format!("cannot read the bound address: {error}")))?;
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
        "gRPC rate limit service listening"
    );
    let http_listener = TcpListener::bind(http_addr)
        .await
        .map_err(|error| CommandError::Failed(format!("cannot listen on {http_addr}: {error}")))?;
    let http_bound = http_listener
        .local_addr()
        .map_err(|error| CommandError::Failed(format!("cannot read the bound address: {error}")))?;
    tracing::info!(addr = %http_bound, "HTTP API listening");
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not stop the server; the log lines above say the same.
    let _ = writeln!(stdout, "listening on {bound}")
        .and_then(|()| writeln!(stdout, "http listening on {http_bound}"))
        .and_then(|()| stdout.flush());
    drop(stdout);

    // One signal stops both servers; /readyz turns 503 as soon as it arrives.
    let ready = Arc::new(AtomicBool::new(true));
    let shutdown = Shutdown::new();
    let _signal = {
        let ready = Arc::clone(&ready);
        shutdown.trigger_on(shutdown_signal(), move || {
            ready.store(false, Ordering::Release);
        })
    };

    let router = http::router(
        http::HttpState::new(Arc::clone(&live), Arc::clone(&headers), ready)
            .with_metrics(Arc::clone(&metrics))
            .with_caps(caps),
    );
    let service = grpc::RateLimitGrpc::live(Arc::clone(&live), headers)
        .with_metrics(metrics)
        .with_caps(caps);
    let grpc_server = async {
        grpc::serve_with(listener, service, shutdown.stopped())
            .await
            .map_err(|error| CommandError::Failed(format!("the gRPC server failed: {error}")))
    };
    let http_server = async {
        http::serve(http_listener, router, shutdown.stopped())
            .await
            .map_err(|error| CommandError::Failed(format!("the HTTP server failed: {error}")))
    };
    tokio::try_join!(grpc_server, http_server)?;
    let engine = live.engine();
    if let Some(remote) = engine.remote() {
        let units = remote.return_leases(engine.now()).await;
        tracing::info!(units, "outstanding leases returned");
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn resolve(flags: &[&str], env: &[(&str, &str)]) -> Result<Settings, CommandError> {
        let mut argv = vec!["serve", "--config", "limits"];
        argv.extend_from_slice(flags);
        let cli = Cli::try_parse_from(argv).expect("the flags parse");
        settings(&cli.serve, |name| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
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
}
