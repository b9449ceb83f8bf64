//! `tollgate serve`'s flags: every setting of the command line and its `TOLLGATE_*` variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use tollgate_protocol::rls::RequestCaps;
use tollgate_protocol::rls::caps::{
    DEFAULT_MAX_DESCRIPTOR_ENTRIES, DEFAULT_MAX_DESCRIPTORS, DEFAULT_MAX_MESSAGE_BYTES,
};
use tollgate_server::EngineOptions;
use tollgate_server::metric_key::{
    DEFAULT_MAX_METRIC_KEYS, DEFAULT_MAX_METRIC_LABEL_BYTES, MIN_METRIC_LABEL_BYTES,
};
use tollgate_server::store::RemoteOptions;
use tollgate_store::{DEFAULT_MAX_LOG_ENTRIES, StoreConfig};

use crate::limits_args::LimitsArgs;
pub use crate::logging::LogFormat;
use crate::tls_args::ServeTlsArgs;

use super::combine::{Settings, parse_ratio};

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
    /// Worker threads that serve gRPC calls [default: one per CPU]; at
    /// least 1. With counters in memory and tracing off, each runs a
    /// current-thread runtime of its own and serves the connections it
    /// accepts (the HTTP API and the background work run on the main
    /// thread); with a Redis Cluster or tracing on, one multi-thread runtime
    /// of N workers serves everything.
    #[arg(long, env = "TOLLGATE_WORKER_THREADS", value_name = "N")]
    pub worker_threads: Option<std::num::NonZeroUsize>,
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
    /// The overrides API.
    #[command(flatten)]
    pub overrides: super::overrides_args::OverridesArgs,
    /// Limits from an xDS management server.
    #[command(flatten)]
    pub xds: super::xds_args::XdsArgs,
    /// The most verbose level logged on stderr: error, warn, info, debug or
    /// trace [default: info].
    #[arg(long, env = "TOLLGATE_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<tracing::Level>,
    /// How log lines are written on stderr: `text` for people or `json`, one
    /// object per line for a log collector [default: text].
    #[arg(long, env = "TOLLGATE_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// OpenTelemetry tracing.
    #[command(flatten)]
    pub tracing: crate::telemetry::TracingArgs,
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
    /// `redis-sentinel://master@h:p,…`; `rediss-cluster://`, `rediss-sentinel://`
    /// over TLS). Upstream's `REDIS_URL` (with
    /// `REDIS_SOCKET_TYPE`) is used when neither the flag nor `TOLLGATE_STORE` is set.
    #[arg(long, env = "TOLLGATE_STORE", value_name = "memory|URL")]
    pub store: Option<String>,
    /// How long one Redis call may take before the rule's `on_store_error`
    /// answers [default: 250ms; upstream's REDIS_TIMEOUT when set].
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
    /// With a Redis store: the most keys of `shares: true` rules this
    /// instance holds shares of (each a few hundred bytes); a request for
    /// another key past it is denied until an idle key is released.
    #[arg(long, env = "TOLLGATE_SHARES_MAX_KEYS", value_name = "N", default_value_t = tollgate_server::shares::DEFAULT_SHARES_MAX_KEYS, value_parser = parse_cap)]
    pub shares_max_keys: usize,
    /// With a Redis store: how often this instance's holder calls Redis for
    /// `shares: true` rules (a heartbeat with every demand change since);
    /// a request for a key with no share yet is decided after the next
    /// call, about a millisecond later.
    #[arg(long, env = "TOLLGATE_SHARES_SYNC_INTERVAL", value_name = "DURATION", default_value = "100ms", value_parser = tollgate_core::duration::parse_duration)]
    pub shares_sync_interval: Duration,
    /// With a Redis store: how long an instance's registration lasts after
    /// its last call; a killed instance's shares return after it. The
    /// instance itself stops using its shares a tenth earlier.
    #[arg(long, env = "TOLLGATE_SHARES_TTL", value_name = "DURATION", default_value = "10s", value_parser = tollgate_core::duration::parse_duration)]
    pub shares_ttl: Duration,
    /// With a Redis store: starter slots of `shares: true` rules (0: none,
    /// at most 1024). Every key then keeps about 1/--shares-starter-divisor
    /// of its limit out of its pool, in N parts; each of the first N
    /// instances owns one and decides a key's first use from it at once
    /// instead of waiting for a call. The first instance to reach Redis
    /// sets the fleet's policy and the others follow it (docs/operations.md).
    #[arg(long, env = "TOLLGATE_SHARES_STARTER_SLOTS", value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub shares_starter_slots: u32,
    /// With a Redis store and starter slots: the slots hold together about
    /// 1/D of each key's limit (a limit too small for one token per slot
    /// keeps none and its first uses wait for a call).
    #[arg(long, env = "TOLLGATE_SHARES_STARTER_DIVISOR", value_name = "D", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub shares_starter_divisor: u64,
    /// With a Redis store: the format a counter with no state in Redis yet
    /// is created in, under its one key `tg{…}`: `hash` (as releases before
    /// `packed` wrote it) or `packed` (a string, fewer Redis commands per
    /// check). Either way a counter stays in the format it is found in, so
    /// instances of both settings and of an older release share one count;
    /// `packed` also converts the hashes it finds, and an older release
    /// fails on a packed counter (WRONGTYPE, answered by on_store_error), so
    /// turn it on only once no instance of a release before it is left
    /// (docs/operations.md).
    #[arg(long, env = "TOLLGATE_REDIS_ENCODING", value_name = "hash|packed", value_enum, default_value_t = RedisEncoding::Hash)]
    pub redis_encoding: RedisEncoding,
    /// With a Redis store: whose keys fixed-window rules count in.
    /// `tollgate` (Tollgate's own `tg{…}` keys) or `upstream`:
    /// envoyproxy/ratelimit's own keys (`CACHE_KEY_PREFIX` + domain +
    /// entries + the window's start), counted as upstream counts them
    /// (INCRBY, then EXPIRE of the unit plus up to
    /// --expiration-jitter-max-seconds), so upstream's pods and these share
    /// one budget during a rolling switch (docs/migrating.md). Only rules
    /// upstream could write do (one limit, a fixed window of a whole unit,
    /// not staggered); the others keep Tollgate's keys, named in a warning
    /// at start.
    #[arg(long, env = "TOLLGATE_REDIS_KEY_FORMAT", value_name = "tollgate|upstream", value_enum, default_value_t = RedisKeyFormat::Tollgate)]
    pub redis_key_format: RedisKeyFormat,
    /// With `--redis-key-format upstream`: the most seconds added at random
    /// to an upstream key's TTL, as upstream does [default: 300; upstream's
    /// EXPIRATION_JITTER_MAX_SECONDS when set].
    #[arg(
        long,
        env = "TOLLGATE_EXPIRATION_JITTER_MAX_SECONDS",
        value_name = "SECONDS"
    )]
    pub expiration_jitter_max_seconds: Option<u64>,
    /// Envoy rate limit quota (RLQS) streams open at once; past it a new
    /// stream is refused with RESOURCE_EXHAUSTED (each about 1 KB plus its buckets).
    #[arg(long, env = "TOLLGATE_RLQS_MAX_STREAMS", value_name = "N", default_value_t = 1024, value_parser = parse_cap)]
    pub rlqs_max_streams: usize,
    /// RLQS buckets tracked over all streams (about 300 bytes each); a
    /// report that would pass it ends its stream with RESOURCE_EXHAUSTED.
    #[arg(long, env = "TOLLGATE_RLQS_MAX_BUCKETS", value_name = "N", default_value_t = tollgate_server::rlqs::book::DEFAULT_MAX_BUCKETS, value_parser = parse_cap)]
    pub rlqs_max_buckets: usize,
    /// RLQS buckets tracked for one stream, so that one Envoy cannot take
    /// them all; a report that would pass it ends its stream with RESOURCE_EXHAUSTED.
    #[arg(long, env = "TOLLGATE_RLQS_MAX_STREAM_BUCKETS", value_name = "N", default_value_t = tollgate_server::rlqs::book::DEFAULT_MAX_STREAM_BUCKETS, value_parser = parse_cap)]
    pub rlqs_max_stream_buckets: usize,
    /// How long an RLQS assignment holds in Envoy without a renewal (every
    /// answer to a report and every payment round that finds it due renews
    /// it, so it never lapses on a live stream); after it Envoy 1.40 applies
    /// the bucket's `no_assignment_behavior` fallback (not
    /// `expired_assignment_behavior`). Also how long an ended stream's
    /// shares stay reserved after its last renewal (and a round): shorter
    /// hands a dead Envoy's share over sooner, longer rides out a longer
    /// stall or outage. Envoy reads whole seconds.
    #[arg(long, env = "TOLLGATE_RLQS_ASSIGNMENT_TTL", value_name = "DURATION", default_value = "3s", value_parser = parse_assignment_ttl)]
    pub rlqs_assignment_ttl: Duration,
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
    /// The most bytes of one such label value (and of one part of a statsd
    /// name): a longer value is cut at a character boundary and ends in `~`
    /// and 16 hex digits of its hash, so distinct values stay distinct. At
    /// least 32. With `--max-metric-keys`, the labels take at most keys ×
    /// levels × this.
    #[arg(long, env = "TOLLGATE_MAX_METRIC_LABEL_BYTES", value_name = "BYTES", default_value_t = DEFAULT_MAX_METRIC_LABEL_BYTES, value_parser = parse_label_bytes)]
    pub max_metric_label_bytes: usize,
    /// With statsd over TCP (upstream's `USE_STATSD`), the most bytes of
    /// lines kept while the statsd server cannot be reached; lines past it
    /// are dropped and counted (`ratelimit_statsd_dropped_lines_total`).
    #[arg(long, env = "TOLLGATE_STATSD_BUFFER_BYTES", value_name = "BYTES", default_value_t = tollgate_server::statsd::DEFAULT_BUFFER_BYTES)]
    pub statsd_buffer_bytes: usize,
    /// How many instances share the store; `on_store_error: local` allows limit ÷ this.
    #[arg(
        long,
        env = "TOLLGATE_EXPECTED_INSTANCES",
        value_name = "N",
        default_value_t = 1
    )]
    pub expected_instances: u64,
    /// Answer `/readyz` 503 (and gRPC health NOT_SERVING) while the shared
    /// store does not take a write. By default a replica stays ready while
    /// its rules answer by `on_store_error`; `/healthz/store` and
    /// `ratelimit_store_up` show the store either way.
    #[arg(long, env = "TOLLGATE_READY_REQUIRES_STORE", value_parser = BoolishValueParser::new())]
    pub ready_requires_store: bool,
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
    /// Each gRPC connection is sent GOAWAY once older than this (plus up to
    /// a tenth, so connections made together do not leave together), so
    /// long-lived Envoy connections spread over the replicas after a
    /// scale-out; upstream's `GRPC_MAX_CONNECTION_AGE`. Default: none, or
    /// upstream's 24h without --config.
    #[arg(long, env = "TOLLGATE_MAX_CONNECTION_AGE", value_name = "DUR", value_parser = parse_timeout)]
    pub max_connection_age: Option<Duration>,
    /// How long an aged connection's calls in flight may take before it is
    /// closed; upstream's `GRPC_MAX_CONNECTION_AGE_GRACE` (default 1h, upstream's).
    #[arg(long, env = "TOLLGATE_MAX_CONNECTION_AGE_GRACE", value_name = "DUR", value_parser = tollgate_core::duration::parse_duration)]
    pub max_connection_age_grace: Option<Duration>,
    /// Whether the HTTP API gives units back when `/json` asks
    /// (`isNegativeHits`): `allow` (upstream's behaviour) or `refuse` (403,
    /// nothing spent or given back). Anyone who reaches the listener can ask.
    #[arg(long, env = "TOLLGATE_HTTP_REFUNDS", value_name = "allow|refuse", default_value = "allow", value_parser = parse_refunds)]
    pub http_refunds: tollgate_server::http::Refunds,
}

/// `allow` or `refuse`.
fn parse_refunds(text: &str) -> Result<tollgate_server::http::Refunds, String> {
    match text.trim() {
        "allow" => Ok(tollgate_server::http::Refunds::Allowed),
        "refuse" => Ok(tollgate_server::http::Refunds::Refused),
        other => Err(format!("{other:?} is not allow or refuse")),
    }
}

/// Upstream's `GRPC_MAX_CONNECTION_AGE` default, used without --config.
pub(super) const UPSTREAM_MAX_CONNECTION_AGE: Duration = Duration::from_secs(24 * 3600);

/// Upstream's `GRPC_MAX_CONNECTION_AGE_GRACE` default, used whenever connections are aged.
pub(super) const DEFAULT_MAX_CONNECTION_AGE_GRACE: Duration = Duration::from_secs(3600);

/// The connections each listener keeps open unless configured otherwise (the proxy's default).
pub(super) const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// A count that may be 0 (0 turns the thing it counts off).
pub(super) fn parse_count(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("{text:?} is not a whole number"))
}

/// A timeout: a duration above zero.
pub(super) fn parse_timeout(text: &str) -> Result<Duration, String> {
    match tollgate_core::duration::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("{text:?} is not above zero")),
        Err(error) => Err(error.to_string()),
    }
}

/// A cap: a whole number of at least 1.
pub(super) fn parse_cap(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// An RLQS assignment's time to live: at least a second (Envoy 1.40 reads
/// whole seconds: a shorter one would lapse at once, and every bucket
/// would stay on its `no_assignment_behavior`).
fn parse_assignment_ttl(text: &str) -> Result<Duration, String> {
    match tollgate_core::duration::parse_duration(text) {
        Ok(ttl) if ttl >= Duration::from_secs(1) => Ok(ttl),
        Ok(_) => Err(format!(
            "{text:?} is shorter than a second: Envoy reads an assignment's time to live in whole seconds"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A label byte bound: a whole number with room for the hash suffix.
fn parse_label_bytes(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= MIN_METRIC_LABEL_BYTES => Ok(n),
        _ => Err(format!(
            "{text:?} is not a whole number of at least {MIN_METRIC_LABEL_BYTES}"
        )),
    }
}

impl ServeArgs {
    /// The engine's options from the store bounds.
    pub(super) fn engine_options(&self, settings: &Settings) -> EngineOptions {
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
    /// How `shares: true` rules run, from the `--shares-*` flags.
    pub(super) fn shares_options(&self) -> tollgate_server::shares::SharesOptions {
        let defaults = tollgate_server::shares::SharesOptions::default();
        let ttl = self.shares_ttl.max(Duration::from_millis(10));
        tollgate_server::shares::SharesOptions {
            holder: tollgate_core::share::HolderPolicy {
                sync_interval: self.shares_sync_interval.max(Duration::from_millis(1)),
                ttl,
                ttl_margin: ttl / 10,
                max_keys: self.shares_max_keys,
                ..defaults.holder
            },
            authority: tollgate_core::share::AuthorityPolicy {
                ttl,
                starter: tollgate_core::share::StarterPolicy {
                    slots: self.shares_starter_slots,
                    divisor: self.shares_starter_divisor,
                },
                ..defaults.authority
            },
        }
    }

    pub(super) fn request_caps(&self) -> RequestCaps {
        RequestCaps {
            max_descriptors: self.max_descriptors,
            max_descriptor_entries: self.max_descriptor_entries,
            max_message_bytes: self.max_request_bytes,
        }
    }
}

/// A signed duration (`-3s`, `250ms`) in nanoseconds.
pub(super) fn parse_offset(text: &str) -> Result<i64, String> {
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let d = tollgate_core::duration::parse_duration(magnitude).map_err(|e| e.to_string())?;
    let nanos = i64::try_from(d.as_nanos()).map_err(|_| format!("`{text}` is too large"))?;
    Ok(if negative { -nanos } else { nanos })
}

/// The `--redis-key-format` setting: whose keys fixed-window rules count in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisKeyFormat {
    /// Tollgate's own keys, `tg{…}`.
    #[default]
    Tollgate,
    /// envoyproxy/ratelimit's keys, with its arithmetic, where a rule allows.
    Upstream,
}

/// The `--redis-encoding` setting (see [`tollgate_redis::Encoding`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisEncoding {
    /// New counters as hashes under `tg{…}`, as releases before `packed`.
    #[default]
    Hash,
    /// New counters as packed strings under `tg{…}`; hashes found are converted.
    Packed,
}

impl From<RedisEncoding> for tollgate_redis::Encoding {
    fn from(setting: RedisEncoding) -> Self {
        match setting {
            RedisEncoding::Hash => tollgate_redis::Encoding::Hash,
            RedisEncoding::Packed => tollgate_redis::Encoding::Packed,
        }
    }
}
