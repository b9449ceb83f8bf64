//! [`RetiredStores`]: the stores of algorithms a reload dropped, kept so their counters carry on if the algorithm comes back.
//!
//! A limits file written in several steps can be loaded half-written: the
//! rules missing from it drop out, and when the whole file loads they come
//! back. Were their stores dropped with them, every counter of those rules
//! would start from zero, and a client that used up its limit could start
//! again. A retired store is kept until none of its keys still holds state
//! (every key is *fresh*: a new key would decide the same) or, when more
//! than the bound are retired, the one retired longest ago is dropped.

use std::collections::VecDeque;
use std::sync::Arc;

use tollgate_core::{AnyAlgorithm, Timestamp};

use crate::memory_store::MemoryStore;

/// How many retired stores are kept unless configured otherwise.
pub const DEFAULT_MAX_RETIRED_STORES: usize = 256;

/// Stores no rule uses any more, oldest retired first, at most `max` of them.
#[derive(Debug)]
pub struct RetiredStores {
    max: usize,
    stores: VecDeque<(AnyAlgorithm, Arc<MemoryStore>)>,
}

impl RetiredStores {
    /// Keeps at most `max` retired stores (0 keeps none: a dropped rule's counters start again).
    pub fn new(max: usize) -> Self {
        RetiredStores {
            max,
            stores: VecDeque::new(),
        }
    }

    /// The most stores kept.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many stores are kept now.
    pub fn len(&self) -> usize {
        self.stores.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.stores.is_empty()
    }

    /// The stores kept, oldest retired first.
    pub fn stores(&self) -> impl Iterator<Item = &Arc<MemoryStore>> {
        self.stores.iter().map(|(_, store)| store)
    }

    /// Takes back the store retired for `algorithm`, if it is still kept.
    pub fn take(&mut self, algorithm: &AnyAlgorithm) -> Option<Arc<MemoryStore>> {
        let at = self.stores.iter().position(|(a, _)| a == algorithm)?;
        self.stores.remove(at).map(|(_, store)| store)
    }

    /// The store retired for `algorithm`, if it is still kept, left in place (a count to carry from).
    pub fn get(&self, algorithm: &AnyAlgorithm) -> Option<Arc<MemoryStore>> {
        self.stores
            .iter()
            .find(|(a, _)| a == algorithm)
            .map(|(_, store)| Arc::clone(store))
    }

    /// Keeps `store`, which no rule uses now, in case `algorithm` comes back.
    pub fn retire(&mut self, algorithm: AnyAlgorithm, store: Arc<MemoryStore>) {
        self.stores.retain(|(a, _)| *a != algorithm);
        self.stores.push_back((algorithm, store));
    }

    /// Drops the stores whose every key is fresh at `now`, then the oldest
    /// retired beyond the bound.
    pub fn tidy(&mut self, now: Timestamp) {
        self.stores.retain(|(_, store)| {
            store.sweep(now);
            !store.is_empty()
        });
        while self.stores.len() > self.max {
            self.stores.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_core::{AnyWordAlgorithm, FixedWindow};

    use super::*;
    use crate::config::StoreConfig;

    fn per_hour(limit: u64) -> AnyAlgorithm {
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(
            FixedWindow::new(limit, Duration::from_secs(3600)).expect("a valid limit"),
        ))
    }

    fn used_store(algorithm: AnyAlgorithm, now: Timestamp) -> Arc<MemoryStore> {
        let store = Arc::new(MemoryStore::new(algorithm, StoreConfig::with_max_keys(64)));
        assert!(store.check(b"k".as_slice(), now, 1).is_allowed());
        store
    }

    #[test]
    fn a_store_is_kept_while_a_key_holds_state_and_dropped_once_all_are_fresh() {
        let start = Timestamp::from_secs(7200);
        let mut retired = RetiredStores::new(4);
        retired.retire(per_hour(3), used_store(per_hour(3), start));
        retired.tidy(start.saturating_add(Duration::from_secs(60)));
        assert_eq!(retired.len(), 1);
        retired.tidy(start.saturating_add(Duration::from_secs(3600)));
        assert!(retired.is_empty(), "the window is over: nothing to keep");
    }

    #[test]
    fn the_oldest_retired_go_first_past_the_bound_and_take_gives_a_store_back() {
        let now = Timestamp::from_secs(7200);
        let mut retired = RetiredStores::new(2);
        for limit in 1..=3 {
            retired.retire(per_hour(limit), used_store(per_hour(limit), now));
        }
        retired.tidy(now);
        assert_eq!(retired.len(), 2);
        assert!(
            retired.take(&per_hour(1)).is_none(),
            "retired first, dropped first"
        );
        let back = retired.take(&per_hour(3)).expect("kept");
        assert_eq!(back.algorithm(), per_hour(3));
        assert_eq!(retired.len(), 1);
        assert!(RetiredStores::new(0).take(&per_hour(3)).is_none());
    }
}
