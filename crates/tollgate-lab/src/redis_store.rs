//! Simulated stores on a real Redis: the production Lua script, driven by virtual time.
//!
//! [`RedisStores`] connects once and hands every lane (or sidecar) a
//! [`SimulatedStore`] of its own: the production [`RedisStore`] with a key
//! prefix unique to that store (`tglab:<run nonce>:<store number>:`), so a
//! simulation never touches production counters (`tg{…}`) or another run's.
//! Each decision is one call (`FCALL`) of the production check function with the
//! virtual time supplied ([`SuppliedTime`]) instead of Redis `TIME`; keys
//! live [`LAB_KEY_TTL`] after their last write and are deleted when the store
//! is dropped.
//!
//! The simulator is synchronous and the Redis client async: each call is
//! `block_on` on the runtime the connection lives on (a current-thread
//! runtime owned by the factory for `tollgate simulate`, the server's runtime
//! for the web lab), so a decision costs one round trip (tens of microseconds
//! on loopback) instead of the in-memory store's tens of nanoseconds. Calls
//! must not be made from a thread that drives async tasks (use
//! `spawn_blocking`). A scenario without a per-decision observer hands each
//! store a whole tick at once ([`SimulatedStore::check_many`]): its script
//! calls go out pipelined, up to 512 per round trip, still one call per
//! decision and in order.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};
use tollgate_core::share::AuthorityPolicy;
use tollgate_core::{AnyAlgorithm, Decision, Outcome, Timestamp};
use tollgate_redis::{RedisAuthority, RedisStore, SuppliedTime};
use tollgate_store::Counter;

use crate::SharesAuthority;
use crate::redis_shares::RedisSharesAuthority;
use crate::store::{SimulatedStore, StoreFactory};

/// How long a simulation's key lives in Redis after its last write, in real time.
///
/// The store deletes its keys when dropped; the TTL is what clears them if
/// the process dies first. Virtual time says nothing about real time, so the
/// key's own freshness (used in production) cannot be the TTL.
pub const LAB_KEY_TTL: Duration = Duration::from_secs(3600);

/// The time one script call may take before the run fails.
///
/// Long, because a platform run's shares calls can be large: an instance
/// leaving a 100 000-key run hands back tens of thousands of keys in one
/// call, whose scripts took 1–4.4 s on a busy Redis here.
pub const LAB_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Makes simulated stores on one Redis deployment, each under its own key prefix.
pub struct RedisStores {
    store: RedisStore,
    handle: Handle,
    /// The runtime the connection lives on, when this factory made it.
    runtime: Option<Arc<Runtime>>,
    /// A random number naming this factory's run(s) in every key prefix.
    nonce: u64,
    next_store: AtomicU64,
}

impl fmt::Debug for RedisStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStores")
            .field("target", self.store.target())
            .field("nonce", &format_args!("{:016x}", self.nonce))
            .finish_non_exhaustive()
    }
}

impl RedisStores {
    /// Connects to `url` (any form `tollgate serve --store` takes) from async code.
    ///
    /// The connection lives on the current runtime; decisions are then made
    /// from blocking threads (`spawn_blocking`). The error names the URL's
    /// problem or why the connection failed.
    pub async fn connect(url: &str) -> Result<Self, String> {
        let store = connect_and_ping(url).await?;
        Ok(Self::with_store(store, Handle::current(), None))
    }

    /// Connects to `url` from synchronous code, on a current-thread runtime of its own.
    ///
    /// The calling thread drives the connection during each call (no hop to
    /// another thread per decision), so its stores are used from that thread.
    pub fn connect_blocking(url: &str) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime for Redis: {e}"))?;
        let store = runtime.block_on(connect_and_ping(url))?;
        let handle = runtime.handle().clone();
        Ok(Self::with_store(store, handle, Some(Arc::new(runtime))))
    }

    fn with_store(store: RedisStore, handle: Handle, runtime: Option<Arc<Runtime>>) -> Self {
        RedisStores {
            store,
            handle,
            runtime,
            nonce: rand::random(),
            next_store: AtomicU64::new(0),
        }
    }

    /// The deployment, with any password hidden.
    pub fn describe(&self) -> String {
        self.store.target().redacted()
    }

    /// The key prefix of every store this factory makes: `tglab:<nonce>:`.
    pub fn run_prefix(&self) -> String {
        format!("tglab:{:016x}:", self.nonce)
    }
}

impl Drop for RedisStores {
    fn drop(&mut self) {
        // A runtime cannot be dropped inside async code; let it go in the background.
        if let Some(runtime) = self.runtime.take()
            && let Ok(runtime) = Arc::try_unwrap(runtime)
        {
            runtime.shutdown_background();
        }
    }
}

async fn connect_and_ping(url: &str) -> Result<RedisStore, String> {
    let store = RedisStore::connect(url, LAB_CALL_TIMEOUT)
        .await
        .map_err(|e| format!("--redis: {e}"))?;
    store.ping().await.map_err(|e| {
        format!(
            "--redis: {} does not answer: {e}",
            store.target().redacted()
        )
    })?;
    Ok(store)
}

impl StoreFactory for RedisStores {
    fn store(&self, algorithm: AnyAlgorithm, _keys: usize) -> Box<dyn SimulatedStore> {
        let number = self.next_store.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}{number}:", self.run_prefix());
        Box::new(SimulatedRedisStore {
            store: self.store.with_key_prefix(prefix.as_bytes()),
            handle: self.handle.clone(),
            runtime: self.runtime.clone(),
            algorithm,
            decisions: Vec::with_capacity(1),
            failure: None,
        })
    }

    fn is_remote(&self) -> bool {
        true
    }

    /// The production shares authority on this Redis, at virtual time, under a prefix of its own.
    fn shares_authority(&self, policy: AuthorityPolicy) -> Box<dyn SharesAuthority> {
        let number = self.next_store.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}{number}:", self.run_prefix());
        let store = self.store.with_key_prefix(prefix.as_bytes());
        Box::new(RedisSharesAuthority {
            authority: RedisAuthority::new(store.clone(), policy),
            store,
            handle: self.handle.clone(),
            runtime: self.runtime.clone(),
            failure: None,
        })
    }
}

/// One lane's (or sidecar's) keys in Redis, decided by the production script.
struct SimulatedRedisStore {
    store: RedisStore,
    handle: Handle,
    /// The factory's own current-thread runtime, which each call drives.
    runtime: Option<Arc<Runtime>>,
    algorithm: AnyAlgorithm,
    decisions: Vec<Decision>,
    failure: Option<String>,
}

impl SimulatedRedisStore {
    /// One script call for `key` at `at`; after a failure, no more calls.
    fn call(&mut self, key: u64, at: Timestamp, hits: u64) -> Option<Decision> {
        if self.failure.is_some() {
            return None;
        }
        let key_bytes = key.to_string();
        let counter = Counter {
            group: 0,
            key: key_bytes.as_bytes(),
            tag: key,
            algorithm: self.algorithm,
            hits,
            give_back: false,
            phase_ns: 0,
        };
        let time = SuppliedTime {
            at,
            key_ttl: LAB_KEY_TTL,
        };
        let (store, decisions) = (&self.store, &mut self.decisions);
        let counters = [counter];
        let call = store.check_batch_at(&counters, time, decisions);
        let answer = match &self.runtime {
            Some(runtime) => runtime.block_on(call),
            None => self.handle.block_on(call),
        };
        match answer {
            Ok(()) => self.decisions.first().copied(),
            Err(e) => {
                self.failure = Some(format!(
                    "the Redis store at {} failed: {e}",
                    self.store.target().redacted()
                ));
                None
            }
        }
    }
}

/// Decisions pipelined in one round trip, at most.
const PIPELINE: usize = 512;

impl SimulatedStore for SimulatedRedisStore {
    fn check(&mut self, key: u64, at: Timestamp, cost: u64) -> Decision {
        self.call(key, at, cost)
            .unwrap_or_else(|| Decision::from_parts(Outcome::Denied, 0, 0, 0, 0))
    }

    /// One pipelined round trip per [`PIPELINE`] requests, each its own script call, in order.
    fn check_many(&mut self, requests: &[(u64, Timestamp, u64)], decisions: &mut Vec<Decision>) {
        decisions.clear();
        let unanswered = Decision::from_parts(Outcome::Denied, 0, 0, 0, 0);
        for chunk in requests.chunks(PIPELINE) {
            if self.failure.is_some() {
                break;
            }
            let keys: Vec<String> = chunk.iter().map(|(key, _, _)| key.to_string()).collect();
            let calls: Vec<(Counter<'_>, SuppliedTime)> = chunk
                .iter()
                .zip(&keys)
                .map(|(&(key, at, cost), key_bytes)| {
                    let counter = Counter {
                        group: 0,
                        key: key_bytes.as_bytes(),
                        tag: key,
                        algorithm: self.algorithm,
                        hits: cost,
                        give_back: false,
                        phase_ns: 0,
                    };
                    let time = SuppliedTime {
                        at,
                        key_ttl: LAB_KEY_TTL,
                    };
                    (counter, time)
                })
                .collect();
            let mut answers = Vec::with_capacity(chunk.len());
            let call = self.store.check_each_at(&calls, &mut answers);
            let answer = match &self.runtime {
                Some(runtime) => runtime.block_on(call),
                None => self.handle.block_on(call),
            };
            match answer {
                Ok(()) => decisions.extend_from_slice(&answers),
                Err(e) => {
                    self.failure = Some(format!(
                        "the Redis store at {} failed: {e}",
                        self.store.target().redacted()
                    ));
                }
            }
        }
        decisions.resize(requests.len(), unanswered);
    }

    /// Read through a check that costs nothing: the units the key holds, in whole units.
    fn state_level(&mut self, key: u64, at: Timestamp) -> f64 {
        let Some(d) = self.call(key, at, 0) else {
            return 0.0;
        };
        let capacity = self.algorithm.capacity();
        match self.algorithm {
            // What is left to take: tokens in the bucket, burst available.
            AnyAlgorithm::Word(tollgate_core::AnyWordAlgorithm::TokenBucket(_))
            | AnyAlgorithm::Word(tollgate_core::AnyWordAlgorithm::Gcra(_)) => d.remaining() as f64,
            // What is taken: the queue, the window's count, the log's units.
            _ => capacity.saturating_sub(d.remaining()) as f64,
        }
    }

    fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}

impl Drop for SimulatedRedisStore {
    fn drop(&mut self) {
        delete_keys(&self.store, &self.handle, self.runtime.as_deref());
    }
}

/// Deletes the keys under `store`'s prefix now (in the background inside
/// async code); their TTL covers a process that dies first.
pub(crate) fn delete_keys(store: &RedisStore, handle: &Handle, runtime: Option<&Runtime>) {
    let store = store.clone();
    let cleanup = async move {
        let _ = store.delete_prefixed().await;
    };
    match (runtime, Handle::try_current().is_ok()) {
        // Inside async code: clean up in the background.
        (_, true) => drop(handle.spawn(cleanup)),
        (Some(runtime), false) => runtime.block_on(cleanup),
        (None, false) => handle.block_on(cleanup),
    }
}
