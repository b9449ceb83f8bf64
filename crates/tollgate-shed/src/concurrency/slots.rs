//! The per-key in-flight counts all services of one concurrency layer share, and the slot a request holds under its key.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;

/// The in-flight count of every key with something in flight.
pub(crate) struct KeyedSlots<K> {
    pub(crate) max_in_flight: usize,
    in_flight: Mutex<HashMap<K, usize>>,
}

impl<K> KeyedSlots<K> {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        KeyedSlots {
            max_in_flight,
            in_flight: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> KeyedSlots<K> {
    pub(crate) fn try_acquire(self: &Arc<Self>, key: K) -> Option<KeySlot<K>> {
        let mut in_flight = self.in_flight.lock();
        let count = in_flight.entry(key.clone()).or_insert(0);
        if *count >= self.max_in_flight {
            return None;
        }
        *count += 1;
        Some(KeySlot {
            slots: Arc::clone(self),
            key: Some(key),
        })
    }

    pub(crate) fn count(&self, key: &K) -> usize {
        self.in_flight.lock().get(key).copied().unwrap_or(0)
    }
}

/// One request's slot under its key; dropping it frees the slot.
pub struct KeySlot<K: Hash + Eq> {
    slots: Arc<KeyedSlots<K>>,
    key: Option<K>,
}

impl<K: Hash + Eq> Drop for KeySlot<K> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut in_flight = self.slots.in_flight.lock();
        if let Some(count) = in_flight.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&key);
            }
        }
    }
}

impl<K: Hash + Eq> std::fmt::Debug for KeySlot<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySlot")
    }
}
