//! `tollgate proxy --limits`: the global rate limit decided in the proxy itself, by `tollgate serve`'s engine called in process.
//!
//! A global rate limit whose `rate_limit_service` is `{in_process: true}`
//! asks this engine instead of a service over the network. The limits
//! file is the one `tollgate serve --config` reads (same rules crate, same
//! reload on change or SIGHUP, a bad file keeps the running rules). Its
//! counters live in this process (`--store memory`, one proxy's limit) or
//! in Redis (`--store redis://…`), shared by every proxy and `tollgate
//! serve` instance that names it: with `--lease-period`, each proxy takes
//! quota leases and answers most requests with no Redis call, and keeps a
//! quick-deny list of keys Redis said are over, as `tollgate serve` does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tollgate_core::CoarseClock;
use tollgate_protocol::rls::{InProcessService, ResponseHeaders, RlsClient};
use tollgate_redis::RedisStore;
use tollgate_runtime::AbortOnDrop;
use tollgate_server::grpc::RateLimitGrpc;
use tollgate_server::reload;
use tollgate_server::store::{DEFAULT_LEASE_MAX_KEYS, RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions, LiveEngine};

use crate::CommandError;
use crate::limits_args::LimitsArgs;

/// The flags of the proxy's own limits; each has a `TOLLGATE_PROXY_*` variable.
#[derive(Args, Debug)]
pub struct ProxyLimitsArgs {
    /// A limits file or directory (envoyproxy/ratelimit's format, as
    /// `tollgate serve --config`) that a global rate limit with
    /// `rate_limit_service: {in_process: true}` is decided by, in this
    /// proxy; reloaded when it changes.
    #[arg(long = "limits", env = "TOLLGATE_PROXY_LIMITS", value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Where those limits count: `memory` (this proxy alone) or a Redis URL
    /// every proxy sharing the limit names (`redis://`, `rediss://`,
    /// `redis-cluster://h:p,h:p`, `redis-sentinel://master@h:p,…`, and
    /// `rediss-cluster://`, `rediss-sentinel://` over TLS).
    #[arg(
        long = "store",
        env = "TOLLGATE_PROXY_STORE",
        value_name = "memory|URL",
        default_value = "memory",
        requires = "path"
    )]
    pub store: String,
    /// How long one Redis call may take before the rule's `on_store_error` answers.
    #[arg(long = "store-timeout", env = "TOLLGATE_PROXY_STORE_TIMEOUT", value_name = "DURATION", default_value = "250ms", value_parser = tollgate_core::duration::parse_duration)]
    pub store_timeout: Duration,
    /// With Redis: the quota lease period of rules without their own `lease`
    /// (`0` = off: one Redis call per request). Leases never over-admit
    /// (see docs/operations.md for the bounds).
    #[arg(long = "lease-period", env = "TOLLGATE_PROXY_LEASE_PERIOD", value_name = "DURATION", default_value = "0s", value_parser = tollgate_core::duration::parse_duration)]
    pub lease_period: Duration,
    /// With Redis: the most counters this proxy tracks leases for.
    #[arg(long = "lease-max-keys", env = "TOLLGATE_PROXY_LEASE_MAX_KEYS", value_name = "N", default_value_t = DEFAULT_LEASE_MAX_KEYS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_max_keys: u64,
    /// With Redis: the most keys the quick-deny list holds (0 turns it off).
    #[arg(long = "quick-deny-keys", env = "TOLLGATE_PROXY_QUICK_DENY_KEYS", value_name = "N", default_value_t = RemoteOptions::default().quick_deny_keys as u64)]
    pub quick_deny_keys: u64,
    /// How many instances share the store; `on_store_error: local` allows limit ÷ this.
    #[arg(long = "expected-instances", env = "TOLLGATE_PROXY_EXPECTED_INSTANCES", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub expected_instances: u64,
    /// How the limits files are read.
    #[command(flatten)]
    pub read: LimitsArgs,
}

/// The engine a proxy runs for its own limits, and what keeps it current.
pub struct ProxyLimits {
    /// The engine in service (reloads swap it).
    live: Arc<LiveEngine<CoarseClock>>,
    /// Reloads on change or SIGHUP while it lives.
    _reloading: Option<AbortOnDrop>,
}

impl ProxyLimits {
    /// Reads the limits and connects the store (at start: an error stops the proxy).
    pub async fn start(args: &ProxyLimitsArgs) -> Result<Option<Self>, CommandError> {
        let Some(path) = &args.path else {
            return Ok(None);
        };
        let options = args.read.load_options();
        let start = crate::limits_file::read_at_start(path, options)?;
        let rules = Arc::new(start.rules);
        let clock = CoarseClock::shifted(0);
        let engine = if args.store == "memory" {
            Engine::new(rules, EngineOptions::default(), clock)
        } else {
            let redis = RedisStore::connect(&args.store, args.store_timeout)
                .await
                .map_err(|error| {
                    CommandError::Failed(format!("--store {}: {error}", args.store))
                })?;
            tracing::info!(store = ?redis.target(), timeout = ?args.store_timeout, lease_period = ?args.lease_period, "proxy limits counted in Redis");
            let remote = RemoteStore::new(
                redis,
                RemoteOptions {
                    expected_instances: args.expected_instances,
                    quick_deny_keys: usize::try_from(args.quick_deny_keys).unwrap_or(usize::MAX),
                    lease_period: args.lease_period,
                    lease_max_keys: usize::try_from(args.lease_max_keys).unwrap_or(usize::MAX),
                    ..RemoteOptions::default()
                },
            );
            Engine::with_remote(rules, EngineOptions::default(), clock, remote)
        };
        let live = Arc::new(LiveEngine::new(
            Arc::new(engine),
            path.clone(),
            options,
            start.hash,
        ));
        let reloading = reload::watch(&live);
        Ok(Some(ProxyLimits {
            live,
            _reloading: reloading,
        }))
    }

    /// The client a global rate limit with `in_process: true` calls.
    pub fn client(&self) -> RlsClient {
        let service: Arc<dyn InProcessService> = Arc::new(RateLimitGrpc::live(
            Arc::clone(&self.live),
            Arc::new(ResponseHeaders::default()),
        ));
        RlsClient::in_process(service)
    }

    /// The store's metrics (decisions by path, Redis calls, leases), when the counters are in Redis.
    pub fn store_collector(&self) -> Option<tollgate_server::store::StoreCollector> {
        self.live
            .engine()
            .remote()
            .map(|remote| tollgate_server::store::StoreCollector(Arc::clone(remote)))
    }

    /// Gives the outstanding leases and shares back to Redis (at shutdown).
    pub async fn give_back_at_shutdown(&self) {
        self.live.give_back_at_shutdown().await;
    }
}
