//! The quick-deny cache: counters the store said are over, answered here until their retry time without a store call.

use std::collections::HashMap;

use parking_lot::Mutex;
use tollgate_core::{AnyAlgorithm, Decision, Outcome, Timestamp};
use tollgate_store::{Counter, counts_denied};

/// Counters known to be over their limit, answered without a store call until their retry time.
///
/// When the store denies a request of `h` units with "retry after `T`",
/// the same request is denied until `T` for every algorithm: `T` is the
/// exact time `h` units fit again. So a later request of exactly `h` units
/// on that key is denied locally until then, reporting the time left. The
/// end is taken as the time the call was sent plus `T`: never later than
/// the true time, so the cache never denies a request Redis would admit —
/// unless another instance gives units back meanwhile, which only makes it
/// stricter for at most `T`. A cheaper or dearer request asks the store (a
/// dearer one would be told a retry time that is too early). A fixed window
/// that denies stays closed until its end for any cost (it counts denied
/// requests, and a give-back cannot reopen it), so it is answered for every
/// cost. A give-back through this instance forgets the key, and a reload
/// forgets every key.
///
/// Bounded: at most `capacity` keys in 16 shards; a full shard first drops
/// the expired entries and otherwise does not cache.
#[derive(Debug)]
pub struct QuickDeny {
    shards: Vec<Mutex<HashMap<u64, Closed>>>,
    per_shard: usize,
}

/// A denied key: until when, for what cost, the limit to report, and the
/// algorithm that denied it (a reload that changes the limit must not be
/// answered from a denial under the old one).
#[derive(Clone, Copy, Debug)]
struct Closed {
    until: Timestamp,
    hits: u64,
    limit: u64,
    algorithm: AnyAlgorithm,
}

impl QuickDeny {
    const SHARDS: usize = 16;

    /// A cache of at most `capacity` keys (0 turns it off), in up to 16 shards of an equal share.
    pub fn new(capacity: usize) -> Self {
        let shards = capacity.clamp(1, Self::SHARDS);
        QuickDeny {
            shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity / shards,
        }
    }

    /// The keys cached now (expired ones included until a full shard drops them).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, hash: u64) -> &Mutex<HashMap<u64, Closed>> {
        &self.shards[(hash >> 60) as usize % self.shards.len()]
    }

    /// The denial of `hits` units on `key` under `algorithm` at `now`, if the key is known to be over.
    pub fn lookup(
        &self,
        key: &[u8],
        algorithm: &AnyAlgorithm,
        hits: u64,
        now: Timestamp,
    ) -> Option<Decision> {
        if self.per_shard == 0 {
            return None;
        }
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        let closed = *self.shard(hash).lock().get(&hash)?;
        if closed.until <= now
            || closed.algorithm != *algorithm
            || (closed.hits != hits && !counts_denied(algorithm))
        {
            return None;
        }
        let wait = closed.until.saturating_since(now).as_nanos();
        let wait = u64::try_from(wait).unwrap_or(u64::MAX);
        Some(Decision::from_parts(
            Outcome::Denied,
            closed.limit,
            0,
            wait,
            wait,
        ))
    }

    /// Remembers the denials of a batch sent at `sent`, and forgets the keys it gave units back to.
    pub fn remember(&self, counters: &[Counter<'_>], decisions: &[Decision], sent: Timestamp) {
        if self.per_shard == 0 {
            return;
        }
        for (c, d) in counters.iter().zip(decisions) {
            if c.give_back {
                self.forget(c.key);
                continue;
            }
            if d.outcome() != Outcome::Denied {
                continue;
            }
            let Some(retry) = d.retry_after() else {
                continue;
            };
            let hash = xxhash_rust::xxh3::xxh3_64(c.key);
            let mut shard = self.shard(hash).lock();
            if shard.len() >= self.per_shard {
                shard.retain(|_, closed| closed.until > sent);
                if shard.len() >= self.per_shard {
                    continue;
                }
            }
            shard.insert(
                hash,
                Closed {
                    until: sent.saturating_add(retry),
                    hits: c.hits,
                    limit: d.limit(),
                    algorithm: c.algorithm,
                },
            );
        }
    }

    /// Forgets `key` (units were given back to it).
    pub fn forget(&self, key: &[u8]) {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        self.shard(hash).lock().remove(&hash);
    }

    /// Forgets every key (a reload).
    pub fn clear(&self) {
        for shard in &self.shards {
            shard.lock().clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn denials_of_every_algorithm_are_repeated_locally_until_their_retry_time() {
        use tollgate_core::{AnyAlgorithm, FixedWindow, TokenBucket};
        let cache = QuickDeny::new(64);
        let fw: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(60)).unwrap().into();
        let tb: AnyAlgorithm = TokenBucket::new(5, 5, Duration::from_secs(60))
            .unwrap()
            .into();
        let counter = |key: &'static [u8], algorithm, give_back| Counter {
            group: 0,
            key,
            tag: 0,
            algorithm,
            hits: 1,
            give_back,
            phase_ns: 0,
        };
        let sent = Timestamp::from_secs(1_000);
        let denied = Decision::from_parts(Outcome::Denied, 5, 0, 20_000_000_000, 20_000_000_000);
        cache.remember(
            &[counter(b"fw", fw, false), counter(b"tb", tb, false)],
            &[denied, denied],
            sent,
        );
        assert_eq!(cache.len(), 2);
        let later = sent.saturating_add(Duration::from_secs(5));
        let d = cache
            .lookup(b"fw", &fw, 3, later)
            .expect("a closed window denies any cost");
        assert_eq!(d.retry_after(), Some(Duration::from_secs(15)));
        assert_eq!((d.limit(), d.remaining()), (5, 0));
        let d = cache
            .lookup(b"tb", &tb, 1, later)
            .expect("a token bucket's denial of 1 unit is repeated");
        assert_eq!(d.retry_after(), Some(Duration::from_secs(15)));
        assert!(
            cache.lookup(b"tb", &tb, 2, later).is_none(),
            "a dearer request asks the store (its retry time is later)"
        );
        let end = sent.saturating_add(Duration::from_secs(20));
        assert!(
            cache.lookup(b"fw", &fw, 1, end).is_none(),
            "open again at the retry time"
        );
        let raised: AnyAlgorithm = FixedWindow::new(10, Duration::from_secs(60))
            .unwrap()
            .into();
        assert!(
            cache.lookup(b"fw", &raised, 1, later).is_none(),
            "a reload that raised the limit is asked of the store"
        );
        cache.remember(&[counter(b"tb", tb, true)], &[denied], later);
        assert!(
            cache.lookup(b"tb", &tb, 1, later).is_none(),
            "a give-back forgets the key"
        );
        cache.clear();
        assert!(cache.is_empty(), "a reload forgets every key");
        let off = QuickDeny::new(0);
        off.remember(&[counter(b"fw", fw, false)], &[denied], sent);
        assert!(off.lookup(b"fw", &fw, 1, later).is_none());
    }
}
