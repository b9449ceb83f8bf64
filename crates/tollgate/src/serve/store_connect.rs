//! Connecting `serve` to Redis: at once when it is up, else in the background with backoff and jitter while the rules' `on_store_error` answers.
//!
//! A store that is merely not up yet (connection refused, no socket file,
//! timed out, dropped) never stops start-up: [`open_store`] returns an
//! unconnected [`RemoteStore`] and a task retries with exponential backoff
//! and full jitter ([`backon`]), logging at most one warning per
//! [`FAILURE_LOG_INTERVAL`] with the redacted URL, and hands the connection
//! to the store once `PING` answers. Anything else (a bad URL, a wrong
//! password, a TLS error) is an error naming it, and `serve` does not start.
//!
//! Behind Sentinel, the master can change (a failover): while the store is
//! down (a failed call or write probe; the gRPC health watcher probes every
//! second), [`follow_sentinel`] asks the sentinels for the master again every
//! [`FAILOVER_CHECK`] and hands the new connection to the store, so `serve`
//! counts in the promoted replica without a restart.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tollgate_core::{Clock, CoarseClock};
use tollgate_redis::{ConnectError, RedisStore, RedisTarget};
use tollgate_server::failure_log::{FAILURE_LOG_INTERVAL, FailureLog};
use tollgate_server::store::{RemoteOptions, RemoteStore};

use crate::CommandError;
use crate::upstream_redis::UpstreamStore;

/// The backoff of reconnections to a Redis that is not up yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreRetry {
    /// The first wait (doubled each time, jittered): `REDIS_STARTUP_INITIAL_INTERVAL`.
    pub first: Duration,
    /// The longest wait: `REDIS_STARTUP_MAX_INTERVAL`.
    pub longest: Duration,
}

impl Default for StoreRetry {
    /// 200 ms doubling up to 5 s.
    fn default() -> Self {
        StoreRetry {
            first: Duration::from_millis(200),
            longest: Duration::from_secs(5),
        }
    }
}

/// How often a Sentinel store that is down re-resolves its master.
const FAILOVER_CHECK: Duration = Duration::from_millis(500);

/// The message of the rate-limited re-resolution warnings.
const NO_MASTER: &str = "the master found through Sentinel is down: re-resolving it";

/// The message of the rate-limited reconnection warnings.
const NOT_UP: &str = "Redis is not up: every rule answers by its on_store_error (no leases) until it is; reconnecting with backoff";

/// Opens the store `store` names: connected when Redis answers now, else
/// unconnected with a background task (on the current runtime) that
/// connects it. Errors for a store that cannot work once up.
pub async fn open_store(
    store: &UpstreamStore,
    timeout: Duration,
    key_prefix: Option<&str>,
    encoding: tollgate_redis::Encoding,
    retry: StoreRetry,
    options: RemoteOptions,
    clock: CoarseClock,
) -> Result<Arc<RemoteStore>, CommandError> {
    let target = RedisTarget::parse(&store.url).map_err(|e| CommandError::Failed(e.to_string()))?;
    let redacted = target.redacted();
    let attempt = Attempt {
        target,
        timeout,
        tls: store.tls.clone(),
        key_prefix: key_prefix.map(str::to_owned),
        encoding,
        expiration_jitter_max_s: options.expiration_jitter_max_s,
    };
    match attempt.connect().await {
        Ok(redis) => {
            tracing::info!(store = %redacted, timeout = ?timeout, encoding = encoding.name(), "counters in Redis");
            let remote = RemoteStore::new(redis, options);
            tokio::spawn(follow_sentinel(
                attempt,
                Arc::clone(&remote),
                clock,
                redacted,
            ));
            Ok(remote)
        }
        Err(error) if not_up_yet(&error) => {
            let remote = RemoteStore::unconnected(timeout, options);
            let log = FailureLog::new(FAILURE_LOG_INTERVAL, NOT_UP);
            log.record(clock.now(), &error);
            tokio::spawn(reconnect(
                attempt,
                retry,
                Arc::clone(&remote),
                log,
                clock,
                redacted,
            ));
            Ok(remote)
        }
        Err(error) => Err(CommandError::Failed(format!("{error} ({redacted})"))),
    }
}

/// Whether `error` says only that Redis is not up yet: worth waiting for.
fn not_up_yet(error: &ConnectError) -> bool {
    match error {
        ConnectError::Timeout(_) => true,
        ConnectError::Redis(e) => {
            e.is_connection_refusal() || e.is_connection_dropped() || e.is_timeout()
        }
        ConnectError::Target(_) => false,
    }
}

/// Retries until connected, then hands the connection to `remote`.
async fn reconnect(
    attempt: Attempt,
    retry: StoreRetry,
    remote: Arc<RemoteStore>,
    log: FailureLog,
    clock: CoarseClock,
    redacted: String,
) {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(retry.first)
        .with_max_delay(retry.longest)
        .with_jitter()
        .without_max_times();
    let connected = (|| attempt.connect())
        .retry(backoff)
        .notify(|error, _wait| {
            // A store that answers but refuses us (a wrong password) is worth an error line.
            if !not_up_yet(error) {
                tracing::error!(store = %redacted, error = %error, "Redis answered but cannot be used; retrying");
            } else {
                log.record(clock.now(), error);
            }
        })
        .await;
    match connected {
        Ok(redis) => {
            remote.connected(redis);
            tracing::warn!(store = %redacted, "Redis is up: counters in Redis again");
            follow_sentinel(attempt, remote, clock, redacted).await;
        }
        Err(error) => {
            tracing::error!(store = %redacted, error = %error, "gave up connecting to Redis");
        }
    }
}

/// For a Sentinel target: while the store is down, asks the sentinels for
/// the master again every [`FAILOVER_CHECK`] and hands the new connection to
/// the store. Returns at once for any other target.
async fn follow_sentinel(
    attempt: Attempt,
    remote: Arc<RemoteStore>,
    clock: CoarseClock,
    redacted: String,
) {
    if !matches!(attempt.target, RedisTarget::Sentinel { .. }) {
        return;
    }
    let log = FailureLog::new(FAILURE_LOG_INTERVAL, NO_MASTER);
    let mut tick = tokio::time::interval(FAILOVER_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Runs as long as the runtime: one attempt at a time, at most one per tick.
    loop {
        tick.tick().await;
        if remote.is_up() {
            continue;
        }
        match attempt.connect().await {
            Ok(redis) => {
                remote.connected(redis);
                tracing::warn!(store = %redacted, "connected to the master Sentinel names now");
            }
            Err(error) => {
                log.record(clock.now(), &error);
            }
        }
    }
}

/// One connection attempt's inputs.
struct Attempt {
    target: RedisTarget,
    timeout: Duration,
    tls: Option<crate::upstream_redis::TlsFiles>,
    key_prefix: Option<String>,
    /// The format of counters created from now on (`--redis-encoding`).
    encoding: tollgate_redis::Encoding,
    /// The most seconds of jitter on an upstream key's TTL.
    expiration_jitter_max_s: u64,
}

impl Attempt {
    /// Connects once and sends the first `PING`.
    async fn connect(&self) -> Result<RedisStore, ConnectError> {
        let tls = self
            .tls
            .as_ref()
            .map(crate::upstream_redis::TlsFiles::certificates);
        let redis = RedisStore::connect_with_tls(self.target.clone(), self.timeout, tls).await?;
        let redis = match &self.key_prefix {
            Some(prefix) => redis.with_key_prefix(prefix.as_bytes()),
            None => redis,
        };
        // Each worker's checks on a connection of its own (a single node; see tollgate_redis).
        Ok(redis
            .with_connection_per_worker()
            .with_encoding(self.encoding)
            .with_expiration_jitter(self.expiration_jitter_max_s))
    }
}
