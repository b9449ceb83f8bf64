//! [`Lab`]: the lab's shared state (where decisions are kept, uploaded traces, the run counters).

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use super::counters::RunCounters;
use super::params::ParamError;
use crate::{MemoryStores, Replay, StoreFactory};

/// The largest trace upload accepted, in bytes.
pub const MAX_REPLAY_BYTES: usize = 64 << 20;

/// Uploaded traces by id, the newest last.
#[derive(Debug, Default)]
pub(super) struct Replays {
    pub(super) next_id: u64,
    pub(super) traces: VecDeque<(u64, Replay)>,
}

/// The lab's shared state: where decisions are kept, uploaded traces and the run counters.
#[derive(Clone, Debug)]
pub struct Lab {
    pub(super) stores: Arc<dyn StoreFactory>,
    /// A Redis store the page may choose (`store=redis`), when the lab was started with one.
    pub(super) redis: Option<Arc<dyn StoreFactory>>,
    pub(super) counters: Arc<RunCounters>,
    pub(super) replays: Arc<Mutex<Replays>>,
}

impl Default for Lab {
    fn default() -> Self {
        Self::new(Arc::new(MemoryStores))
    }
}

impl Lab {
    /// A lab deciding through `stores` (the in-memory store by default; a Redis store plugs in here).
    pub fn new(stores: Arc<dyn StoreFactory>) -> Self {
        Lab {
            stores,
            redis: None,
            counters: Arc::new(RunCounters::default()),
            replays: Arc::new(Mutex::new(Replays {
                next_id: 1,
                traces: VecDeque::new(),
            })),
        }
    }

    /// This lab, with runs deciding on `redis` by default (`store=memory` still runs in memory).
    pub fn with_redis(mut self, redis: Arc<dyn StoreFactory>) -> Self {
        self.redis = Some(redis);
        self
    }

    /// The store a run chose with `store=` (Redis by default when the lab has one).
    pub(super) fn chosen_store(
        &self,
        choice: Option<&str>,
    ) -> Result<Arc<dyn StoreFactory>, ParamError> {
        match (choice, &self.redis) {
            (None | Some("redis"), Some(redis)) => Ok(Arc::clone(redis)),
            (None | Some("memory"), _) => Ok(Arc::clone(&self.stores)),
            (Some("redis"), None) => Err(ParamError {
                field: "store".to_owned(),
                error: "store: this lab was started without --redis URL, so runs use the in-memory store".to_owned(),
            }),
            (Some(other), _) => Err(ParamError {
                field: "store".to_owned(),
                error: format!("store: {other:?} is not one of memory, redis"),
            }),
        }
    }

    /// The run counters.
    pub fn counters(&self) -> &RunCounters {
        &self.counters
    }

    /// The uploaded trace with this id, if the lab still keeps it.
    pub(super) fn replay(&self, id: u64) -> Option<Replay> {
        let replays = self.replays.lock();
        replays
            .traces
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, replay)| replay.clone())
    }
}
