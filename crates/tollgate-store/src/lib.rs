//! Keyed rate-limit state: a bounded, concurrent in-memory store.
//!
//! Must not know (the README's layout table): descriptors, limits files, Redis, networking.
//!
//! The algorithms of [`tollgate_core`] decide on one key's state; this crate
//! keeps the state of many keys, safely shared between threads:
//!
//! * [`WordStore`] for every algorithm whose state is one `u64` (token
//!   bucket, GCRA, leaky bucket, fixed window, sliding window counter):
//!   sharded open-addressing tables read without locks, updated by
//!   compare-and-swap, so a hot key's denials write nothing shared and a
//!   limit of `L` admits exactly `L` at any concurrency. See
//!   [`word_store`] for the design.
//! * [`LogStore`] for the sliding log, whose state is a list of timestamps:
//!   sharded mutex-protected maps.
//! * [`MemoryStore`], either of the two, chosen from an
//!   [`AnyAlgorithm`](tollgate_core::AnyAlgorithm) at run time.
//! * [`Limiter`], a store and a [`Clock`](tollgate_core::Clock): what an
//!   application uses.
//! * [`CounterStore`], the one interface of every keeper of counters (this
//!   crate's [`MemoryCounters`], the Redis store of `tollgate-redis`): a
//!   batch of counters decided all-or-nothing per group.
//! * [`DirectLimiter`], one limit with no key: a single state word and a
//!   clock, with the same lock-free step.
//!
//! Every store is bounded by [`StoreConfig::max_keys`]. Keys whose state has
//! become fresh are dropped without changing any decision; when a store is
//! full, it evicts the keys that have used the least of their budget (the
//! newest among equals), so that an eviction changes the fewest decisions
//! and no flood of later keys, of any cost, frees an exhausted key. Stores never
//! read a clock: time comes in as a [`Timestamp`](tollgate_core::Timestamp).
//!
//! Keys are anything that implements [`Key`]: integers map exactly to a
//! [`KeyId`], byte strings are hashed (xxh3-128, seeded per store).
//!
//! ```
//! use std::time::Duration;
//! use tollgate_core::{Timestamp, TokenBucket};
//! use tollgate_store::{MemoryStore, StoreConfig};
//!
//! let bucket = TokenBucket::new(2, 1, Duration::from_secs(1)).unwrap();
//! let store = MemoryStore::new(bucket, StoreConfig::with_max_keys(10_000));
//! let now = Timestamp::from_secs(1_700_000_000);
//! assert!(store.check("alice", now, 1).is_allowed());
//! assert!(store.check("alice", now, 1).is_allowed());
//! assert!(!store.check("alice", now, 1).is_allowed());
//! assert!(store.check("bob", now, 1).is_allowed());
//! ```

mod config;
mod counters;
mod direct_limiter;
pub mod eviction;
mod hashing;
mod key;
mod limiter;
mod log_store;
mod memory_store;
mod retired_stores;
pub mod state_word;
mod sweep_schedule;
pub mod word_store;

pub use config::{
    BYTES_PER_KEY_AT_FULL_LOAD, DEFAULT_MAX_LOG_ENTRIES, DEFAULT_SHARDS, MAX_SHARDS, StoreConfig,
};
pub use counters::{
    AsCounter, Counter, CounterStore, CountersUsage, MemoryCounters, StoreError, StoresUsage,
    counts_denied,
};
pub use direct_limiter::DirectLimiter;
pub use key::{Key, KeyId};
pub use limiter::Limiter;
pub use log_store::LogStore;
pub use memory_store::MemoryStore;
pub use retired_stores::{DEFAULT_MAX_RETIRED_STORES, RetiredStores};
pub use word_store::WordStore;

/// Every store can be shared between threads.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<WordStore<tollgate_core::AnyWordAlgorithm>>();
    shareable::<WordStore<tollgate_core::TokenBucket>>();
    shareable::<LogStore>();
    shareable::<MemoryStore>();
    shareable::<Limiter<tollgate_core::ManualClock>>();
    shareable::<Limiter<tollgate_core::CoarseClock>>();
    shareable::<DirectLimiter<tollgate_core::Gcra, tollgate_core::CoarseClock>>();
};
