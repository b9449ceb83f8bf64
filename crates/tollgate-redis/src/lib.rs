//! Rate-limit counters in Redis and Redis Cluster: one atomic Lua call per check.
//!
//! Must not know (the README's layout table): descriptors, limits files, gRPC.
//!
//! [`RedisStore`] implements [`CounterStore`]: every counter of a request
//! goes into one `FCALL` of the check function (`src/check.lua`), which reads
//! Redis `TIME`, decides every counter with the same arithmetic as the
//! algorithms of `tollgate-core`, and writes only when the whole group (one
//! descriptor) allows (fixed windows count denied requests, as in memory).
//! Each counter is one short string value written with its TTL (`SET … PX`,
//! at the time its state becomes fresh), so idle keys expire by themselves.
//! The Lua code is one Redis Functions library, loaded at connect and again
//! whenever a node lost it (restart, failover, flush); on a Redis without
//! Functions the same code runs as scripts (`EVALSHA`). See `src/library.rs`.
//!
//! Deployments ([`RedisTarget`]): a single node (`redis://`, `rediss://`,
//! `unix://`), a cluster (`redis-cluster://host:port,host:port`) and
//! Sentinel (`redis-sentinel://master-name@host:port,host:port`), the last
//! two over TLS as `rediss-cluster://` and `rediss-sentinel://`. Calls share
//! one multiplexed connection, so concurrent requests pipeline.
//!
//! Keys are `tg{<16 hex digits>}` followed by the engine's counter key:
//! the braces hold a hash of the descriptor, so every limit of one
//! descriptor lands in one cluster slot and is decided atomically. A key
//! holds a packed string or a hash (as releases before the packed encoding
//! kept every counter); a counter's state stays in the format it is found
//! in, and [`Encoding`] chooses the format of new ones. On a cluster, the
//! counters of a request whose descriptors hash to different slots are sent
//! as one call per slot, in parallel; each call is atomic on its own.
//! A counter key made by [`upstream_key`] is instead envoyproxy/ratelimit's
//! own Redis key (after the store's prefix, `CACHE_KEY_PREFIX`), counted in
//! the same call as upstream counts it (`INCRBY`, `EXPIRE` of the unit plus
//! up to [`RedisStore::with_expiration_jitter`]), so both share one budget.
//!
//! Quota leases ([`tollgate_core::lease`]): a second function (`src/lease.lua`)
//! grants an instance units of one counter's budget ahead of use, and takes
//! back what it did not spend, in one atomic call on the counter's own key
//! ([`RedisStore::grant_lease`], [`RedisStore::return_lease`]). Both start
//! from `src/prelude.lua` (the clock, the TTLs, the integer arithmetic and
//! the two encodings of each counter's state), joined at build time; a
//! [`LeaseBook`] holds an instance's leases and answers requests from them,
//! and [`LeasedStore`] puts one in front of a `RedisStore` as a
//! [`CounterStore`] (the middleware's leased mode).
//! Token buckets, GCRA and the leaky-bucket policer lease tokens, fixed
//! windows lease counts of the current window; the sliding window counter
//! and the sliding log stay on the exact path.
//!
//! Production always decides at Redis `TIME`. The simulator replays virtual
//! time through the same code: [`RedisStore::check_batch_at`] supplies the
//! time to decide at and a fixed TTL for the keys it writes, and
//! [`RedisStore::with_key_prefix`] keeps a run's keys apart from production's
//! and from every other run's.

#![forbid(unsafe_code)]

mod check_reply;
mod documents;
mod key;
mod lease;
mod lease_book;
mod leased_store;
mod library;
mod rlqs_claims;
mod script_params;
mod shares;
mod target;
mod worker_connection;

use std::sync::Arc;
use std::time::Duration;

use check_reply::{CheckReply, to_decision};
use futures_util::future::try_join_all;
pub use library::Encoding;
use library::{Calls, Entry};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
pub use redis::{ClientTlsConfig, TlsCertificates};
use redis::{Cmd, RedisError, RedisWrite};
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, Decision, Outcome, Timestamp};
use tollgate_store::{Counter, CounterStore, StoreError};

pub use documents::DocumentWrite;
pub use key::{UPSTREAM_UNITS, redis_key, upstream_key};
pub use lease_book::{GrantAsk, LeaseBook, LeaseStats, Retired};
pub use leased_store::LeasedStore;
pub use rlqs_claims::CLAIMS_PER_CALL;
use script_params::{ScriptParams, write_params};
pub use shares::{RedisAuthority, SharesStats};
pub use target::{RedisTarget, TargetError};

/// The default time one call may take before it counts as a store error.
///
/// A call that outlives it is answered by the rule's `on_store_error`
/// (`allow` by default: admitted uncounted), so it must sit well above the
/// slowest answers of a busy machine, or load alone opens the limit: at
/// 5 ms, `scripts/bench-redis.sh` (64 in flight, a loaded 2-core machine)
/// fell back on 97 % of checks; its checks' p99.9 was 54–115 ms with no
/// timeout in the way, and none fell back at 250 ms. A hung Redis still
/// costs little: the breaker opens after 3 calls have waited this long.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// The most seconds added to an upstream key's TTL unless set
/// (envoyproxy/ratelimit's default `EXPIRATION_JITTER_MAX_SECONDS`).
pub const DEFAULT_EXPIRATION_JITTER_MAX_S: u64 = 300;

/// A live connection to a single node (direct or found through Sentinel) or a cluster.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Counters kept in Redis, decided by one Lua call per request.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    /// `FCALL` of the library, or `EVALSHA` where Redis has no Functions.
    calls: Calls,
    /// The format counters with no state yet are created in.
    encoding: Encoding,
    timeout: Duration,
    target: RedisTarget,
    /// Bytes put before every key (empty in production unless `CACHE_KEY_PREFIX`).
    key_prefix: Arc<[u8]>,
    /// The most seconds added at random to the TTL of an upstream key
    /// (envoyproxy/ratelimit's `EXPIRATION_JITTER_MAX_SECONDS`; 0: none).
    expiration_jitter_max_s: u64,
    /// A single node's client, for workers' own connections (see `worker_connection.rs`).
    workers: Option<Arc<worker_connection::WorkerConnections>>,
    /// Whether calls on a worker's runtime use a connection of its own.
    per_worker: bool,
}

/// The time a call decides at instead of Redis `TIME`, for simulations.
///
/// Production never supplies one. With it, the script reads no clock:
/// schedules (token bucket, GCRA, leaky bucket) decide at `at` to the
/// nanosecond, windows to the microsecond (as with `TIME`), and every key the
/// call writes gets `key_ttl` instead of the time its state takes to become
/// fresh (which is virtual time and says nothing about real time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuppliedTime {
    /// The instant to decide at (nanoseconds since the Unix epoch).
    pub at: Timestamp,
    /// How long, in real time, each key written lives after its last write.
    pub key_ttl: Duration,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a store could not be opened.
#[derive(Debug)]
pub enum ConnectError {
    /// The URL is not one of the supported forms.
    Target(TargetError),
    /// The first connection or its first `PING` failed.
    Redis(RedisError),
    /// The first `PING` got no answer in time.
    Timeout(Duration),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Target(e) => e.fmt(f),
            ConnectError::Redis(e) => write!(f, "cannot connect to Redis: {e}"),
            ConnectError::Timeout(wait) => {
                write!(
                    f,
                    "cannot connect to Redis: no answer to PING within {wait:?}"
                )
            }
        }
    }
}

impl std::error::Error for ConnectError {}

impl RedisStore {
    /// Connects to `url` (see [`RedisTarget::parse`]) with calls limited to `timeout`.
    ///
    /// Fails when the first connection fails; afterwards the connection
    /// reconnects by itself and each call that finds it down is a
    /// [`StoreError`].
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self, ConnectError> {
        let target = RedisTarget::parse(url).map_err(ConnectError::Target)?;
        Self::connect_to(target, timeout).await
    }

    /// Connects to a parsed target.
    pub async fn connect_to(target: RedisTarget, timeout: Duration) -> Result<Self, ConnectError> {
        Self::connect_with_tls(target, timeout, None).await
    }

    /// Connects to a parsed target, presenting `tls`' client certificate
    /// and trusting its root certificate (a single node or Sentinel's master
    /// over `rediss://`).
    ///
    /// The first `PING` must succeed: a node that refuses the credentials
    /// (`NOAUTH`, `WRONGPASS`) fails here, as an unreachable one does, instead
    /// of failing every call afterwards.
    pub async fn connect_with_tls(
        target: RedisTarget,
        timeout: Duration,
        tls: Option<TlsCertificates>,
    ) -> Result<Self, ConnectError> {
        install_tls_provider();
        let (connection, workers) = target
            .connect(timeout, tls)
            .await
            .map_err(ConnectError::Redis)?;
        let mut store = RedisStore {
            connection,
            calls: Calls::Functions,
            encoding: Encoding::default(),
            timeout,
            target,
            key_prefix: Arc::from(&[][..]),
            expiration_jitter_max_s: DEFAULT_EXPIRATION_JITTER_MAX_S,
            workers,
            per_worker: false,
        };
        let wait = target::connect_timeout(timeout);
        match tokio::time::timeout(wait, store.ping_call()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ConnectError::Redis(e)),
            Err(_) => return Err(ConnectError::Timeout(wait)),
        }
        // The library, once: its answer says whether this Redis has Functions.
        let load = store.calls.load(Entry::Check, store.encoding);
        match tokio::time::timeout(wait, store.query::<redis::Value>(&load)).await {
            Ok(answer) => {
                store.calls = Calls::from_load(answer.map(drop)).map_err(ConnectError::Redis)?;
                Ok(store)
            }
            Err(_) => Err(ConnectError::Timeout(wait)),
        }
    }

    /// The same store writing every key under `prefix` (before `tg{…}`), sharing the connection.
    ///
    /// The simulator gives each run its own prefix, so a run never reads or
    /// writes production counters or another run's. A prefix must not
    /// contain `{` or `}`, which would move the cluster hash tag.
    pub fn with_key_prefix(&self, prefix: &[u8]) -> Self {
        RedisStore {
            key_prefix: Arc::from(prefix),
            ..self.clone()
        }
    }

    /// The same store creating new counters in `encoding` (see [`Encoding`]), sharing the connection.
    pub fn with_encoding(&self, encoding: Encoding) -> Self {
        RedisStore {
            encoding,
            ..self.clone()
        }
    }

    /// The same store adding up to `max_s` seconds at random to the TTL
    /// of each upstream key it writes ([`upstream_key`]), as upstream's
    /// `EXPIRATION_JITTER_MAX_SECONDS` does (0: exactly the unit).
    pub fn with_expiration_jitter(&self, max_s: u64) -> Self {
        RedisStore {
            expiration_jitter_max_s: max_s,
            ..self.clone()
        }
    }

    /// The same store making each call that runs on a current-thread
    /// runtime other than the one it connected on (a worker of `tollgate
    /// serve`) on a connection of that runtime's own, opened on its first
    /// call: the call never leaves the worker's thread. A cluster keeps one
    /// connection per node for every runtime.
    ///
    /// Connections to a single node: one, plus one per worker runtime that
    /// has made a call ([`worker_connections`](Self::worker_connections)).
    pub fn with_connection_per_worker(&self) -> Self {
        RedisStore {
            per_worker: true,
            ..self.clone()
        }
    }

    /// The connections opened for workers so far (see [`with_connection_per_worker`](Self::with_connection_per_worker)).
    pub fn worker_connections(&self) -> usize {
        self.workers.as_ref().map_or(0, |w| w.opened())
    }

    /// The connection a call on the current runtime goes out on: a
    /// worker's own when [`with_connection_per_worker`](Self::with_connection_per_worker), else `home`.
    fn single(&self, home: &ConnectionManager) -> ConnectionManager {
        if self.per_worker
            && let Some(workers) = &self.workers
            && let Some(own) = workers.here()
        {
            return own;
        }
        home.clone()
    }

    /// The format new counters are created in.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The bytes put before every key (empty in production).
    pub fn key_prefix(&self) -> &[u8] {
        &self.key_prefix
    }

    /// The Redis key of a counter, with this store's prefix.
    ///
    /// An upstream key ([`upstream_key`]) is upstream's own, with no hash tag.
    fn key_of(&self, c: &Counter<'_>) -> Vec<u8> {
        let mut key = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write_key(c, &mut key);
        key
    }

    /// Writes counter `c`'s Redis key ([`key_of`](Self::key_of)) to `out`:
    /// straight into a command's next argument, with no key of its own.
    fn write_key(&self, c: &Counter<'_>, mut out: impl std::io::Write) -> std::io::Result<()> {
        out.write_all(&self.key_prefix)?;
        match key::as_upstream(c.key) {
            Some(upstream) => out.write_all(upstream),
            None => {
                out.write_all(&key::key_head(c.tag))?;
                out.write_all(c.key)
            }
        }
    }

    /// The script's kind and parameters for counter `c`.
    fn params_of(&self, c: &Counter<'_>) -> Result<ScriptParams, StoreError> {
        let mut params = ScriptParams::of(&c.algorithm)?;
        params.p3 = c.phase_ns / 1_000;
        if key::as_upstream(c.key).is_some()
            && let AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) = c.algorithm
        {
            // Upstream's arithmetic in upstream's key: the unit in seconds
            // and, as upstream, EXPIRE of the unit plus its jitter.
            let unit_s = a.window().as_secs();
            let jitter = match self.expiration_jitter_max_s {
                0 => 0,
                max => rand::random_range(0..max),
            };
            params = ScriptParams {
                kind: "u",
                p1: unit_s,
                p2: a.limit(),
                p3: unit_s.saturating_add(jitter),
            };
        }
        Ok(params)
    }

    /// Decides a batch like [`CounterStore::check_batch`], at a supplied time instead of Redis `TIME`.
    ///
    /// For simulations in virtual time (see [`SuppliedTime`]); production
    /// calls never use it.
    pub async fn check_batch_at(
        &self,
        counters: &[Counter<'_>],
        time: SuppliedTime,
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        self.check(counters, Some(time), decisions).await
    }

    /// Deletes every key under this store's prefix (a simulation's keys); returns how many.
    ///
    /// Refuses a store without a prefix, so production counters are never
    /// touched. On a single node it scans and unlinks; on a cluster it does
    /// nothing and leaves the keys to their TTL.
    pub async fn delete_prefixed(&self) -> Result<u64, StoreError> {
        if self.key_prefix.is_empty() {
            return Err(StoreError::Unsupported(
                "only keys under a prefix are deleted".to_owned(),
            ));
        }
        let Connection::Single(connection) = &self.connection else {
            return Ok(0);
        };
        let mut connection = connection.clone();
        let mut pattern = Vec::with_capacity(self.key_prefix.len() + 1);
        for &b in self.key_prefix.iter() {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                pattern.push(b'\\');
            }
            pattern.push(b);
        }
        pattern.push(b'*');
        let (mut cursor, mut deleted) = (0u64, 0u64);
        // Bounded: a scan ends when the cursor comes back to 0; each call within the timeout.
        loop {
            let scan = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .take();
            let (next, keys): (u64, Vec<Vec<u8>>) =
                self.within(scan.query_async(&mut connection)).await?;
            if !keys.is_empty() {
                let unlink = redis::cmd("UNLINK").arg(&keys).take();
                deleted += self
                    .within(unlink.query_async::<u64>(&mut connection))
                    .await?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// Decides each of `calls` on its own (one counter, one supplied time), in
    /// order, pipelined in one round trip; one decision per call.
    ///
    /// For simulations: a run's decisions in sequence, each seeing the ones
    /// before it, without a round trip each. Production never uses it. On a
    /// cluster each call goes on its own.
    pub async fn check_each_at(
        &self,
        calls: &[(Counter<'_>, SuppliedTime)],
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        decisions.clear();
        let Connection::Single(connection) = &self.connection else {
            let mut one = Vec::with_capacity(1);
            for (c, time) in calls {
                self.check(std::slice::from_ref(c), Some(*time), &mut one)
                    .await?;
                decisions.extend_from_slice(&one);
            }
            return Ok(());
        };
        let mut pipe = redis::pipe();
        for (c, time) in calls {
            let params = self.params_of(c)?;
            let ns = time.at.as_nanos();
            let mut cmd = self.calls.command(Entry::Check, self.encoding, 1);
            cmd.arg(self.key_of(c));
            write_params(c, &params, cmd.writer_for_next_arg())
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            cmd.arg(ns / 1_000_000_000).arg(ns % 1_000_000_000).arg(
                u64::try_from(time.key_ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
            pipe.add_command(cmd);
        }
        let mut connection = connection.clone();
        let mut replies: Option<Vec<CheckReply>> = None;
        // Twice at most: a node without the code (a fresh, restarted or
        // flushed Redis) loads it and the calls are made again.
        for _ in 0..2 {
            let call = pipe.query_async::<Vec<CheckReply>>(&mut connection);
            match tokio::time::timeout(self.timeout, call).await {
                Ok(Ok(r)) => {
                    replies = Some(r);
                    break;
                }
                Ok(Err(e)) if library::is_missing(&e) => {
                    let load = self.calls.load(Entry::Check, self.encoding);
                    let load = load.query_async::<redis::Value>(&mut connection);
                    match tokio::time::timeout(self.timeout, load).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Err(StoreError::Unavailable(e.to_string())),
                        Err(_) => return Err(StoreError::Timeout(self.timeout)),
                    }
                }
                Ok(Err(e)) => return Err(StoreError::Unavailable(e.to_string())),
                Err(_) => return Err(StoreError::Timeout(self.timeout)),
            }
        }
        let Some(replies) = replies else {
            return Err(StoreError::Unavailable(
                "the check code could not be loaded".to_owned(),
            ));
        };
        if replies.len() != calls.len() || replies.iter().any(|r| r.values().len() != 4) {
            return Err(StoreError::Unavailable(format!(
                "the check function answered {} replies for {} calls",
                replies.len(),
                calls.len()
            )));
        }
        for ((c, _), r) in calls.iter().zip(&replies) {
            decisions.push(to_decision(&c.algorithm, r.values()));
        }
        Ok(())
    }

    /// What this store is connected to.
    pub fn target(&self) -> &RedisTarget {
        &self.target
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends `PING`; Ok when the store answers within the timeout.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.within(self.ping_call()).await
    }

    /// Writes a short-lived key (`tg{ready}`, for 10 s): Ok when the store accepts a write within the timeout.
    ///
    /// A store that answers `PING` but refuses writes (out of memory under
    /// `maxmemory-policy noeviction`, a read-only replica) fails here, as
    /// it fails every check that would count.
    pub async fn probe_write(&self) -> Result<(), StoreError> {
        let mut key = self.key_prefix.to_vec();
        key.extend_from_slice(b"tg{ready}");
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(1).arg("PX").arg(10_000);
        let call = async {
            match &self.connection {
                Connection::Single(c) => cmd.query_async::<()>(&mut c.clone()).await,
                Connection::Cluster(c) => cmd.query_async::<()>(&mut c.clone()).await,
            }
        };
        self.within(call).await
    }

    /// One `PING` on the connection, without a timeout.
    async fn ping_call(&self) -> Result<(), RedisError> {
        let mut cmd = redis::cmd("PING");
        match &self.connection {
            Connection::Single(c) => cmd.query_async::<String>(&mut c.clone()).await?,
            Connection::Cluster(c) => {
                cmd.arg("tollgate");
                cmd.query_async::<String>(&mut c.clone()).await?
            }
        };
        Ok(())
    }

    /// Runs the script on `counters` (all on one node) and appends their decisions.
    async fn run_script(
        &self,
        counters: &[Counter<'_>],
        time: Option<SuppliedTime>,
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        let mut cmd = self
            .calls
            .command(Entry::Check, self.encoding, counters.len());
        for c in counters {
            self.write_key(c, cmd.writer_for_next_arg())
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        }
        for c in counters {
            let params = self.params_of(c)?;
            write_params(c, &params, cmd.writer_for_next_arg())
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        }
        if let Some(time) = time {
            let ns = time.at.as_nanos();
            cmd.arg(ns / 1_000_000_000).arg(ns % 1_000_000_000).arg(
                u64::try_from(time.key_ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        }
        let reply: CheckReply = self.invoke(Entry::Check, &cmd).await?;
        let reply = reply.values();
        if reply.len() != counters.len() * 4 {
            return Err(StoreError::Unavailable(format!(
                "the check function answered {} values for {} counters",
                reply.len(),
                counters.len()
            )));
        }
        for (c, r) in counters.iter().zip(reply.chunks_exact(4)) {
            decisions.push(to_decision(&c.algorithm, r));
        }
        Ok(())
    }
}

impl RedisStore {
    /// Makes a call of `entry` (`cmd`, from [`Calls::command`]), each try
    /// within the timeout; a node without the code loads it and is called again.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        entry: Entry,
        cmd: &Cmd,
    ) -> Result<T, StoreError> {
        // Twice at most: the second call follows a load.
        for _ in 0..2 {
            match tokio::time::timeout(self.timeout, self.query::<T>(cmd)).await {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) if library::is_missing(&e) => {
                    let load = self.calls.load(entry, self.encoding);
                    self.within(self.query::<redis::Value>(&load)).await?;
                }
                Ok(Err(e)) => return Err(StoreError::Unavailable(e.to_string())),
                Err(_) => return Err(StoreError::Timeout(self.timeout)),
            }
        }
        Err(StoreError::Unavailable(
            "the Lua code is missing on Redis right after loading it".to_owned(),
        ))
    }

    /// Runs a prepared script call of the shares authority (its script
    /// loaded on a NOSCRIPT) within the timeout, with any reply type.
    async fn invoke_as<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let call = async {
            match &self.connection {
                Connection::Single(c) => invocation.invoke_async::<T>(&mut self.single(c)).await,
                Connection::Cluster(c) => invocation.invoke_async::<T>(&mut c.clone()).await,
            }
        };
        self.within(call).await
    }

    /// One command on the connection, without a timeout.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        match &self.connection {
            Connection::Single(c) => cmd.query_async::<T>(&mut self.single(c)).await,
            Connection::Cluster(c) => cmd.query_async::<T>(&mut c.clone()).await,
        }
    }

    /// Awaits one Redis call for at most the timeout: its error or its lateness as a [`StoreError`].
    async fn within<T>(
        &self,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }
}

impl CounterStore for RedisStore {
    async fn check_batch(
        &self,
        counters: &[Counter<'_>],
        _now: Timestamp,
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        self.check(counters, None, decisions).await
    }
}

impl RedisStore {
    /// Decides a batch at Redis `TIME`, or at `time` when supplied.
    async fn check(
        &self,
        counters: &[Counter<'_>],
        time: Option<SuppliedTime>,
        decisions: &mut Vec<Decision>,
    ) -> Result<(), StoreError> {
        decisions.clear();
        if counters.is_empty() {
            return Ok(());
        }
        if matches!(self.connection, Connection::Single(_)) {
            return self.run_script(counters, time, decisions).await;
        }
        // A cluster: one call per slot, in parallel, each atomic on its own.
        let mut by_slot: Vec<(Slot, Vec<usize>)> = Vec::new();
        for (i, c) in counters.iter().enumerate() {
            let slot = Slot::for_key(self.key_of(c));
            match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, members)) => members.push(i),
                None => by_slot.push((slot, vec![i])),
            }
        }
        if by_slot.len() == 1 {
            return self.run_script(counters, time, decisions).await;
        }
        let calls = by_slot.iter().map(|(_, members)| async move {
            let part: Vec<Counter<'_>> = members.iter().map(|&i| counters[i]).collect();
            let mut out = Vec::with_capacity(part.len());
            self.run_script(&part, time, &mut out).await.map(|()| out)
        });
        let answers = try_join_all(calls).await?;
        decisions.resize(
            counters.len(),
            Decision::from_parts(Outcome::Allowed, 0, 0, 0, 0),
        );
        for ((_, members), answer) in by_slot.iter().zip(answers) {
            for (&i, d) in members.iter().zip(answer) {
                decisions[i] = d;
            }
        }
        Ok(())
    }
}

/// Installs rustls's ring provider once, for `rediss://` connections.
fn install_tls_provider() {
    // Err means a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
