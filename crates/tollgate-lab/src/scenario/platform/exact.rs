//! The exact lane (one store call per decision, both descriptors in it) and the local lane (each instance its own buckets).

use std::collections::HashMap;

use tollgate_core::Timestamp;
use tollgate_core::share::{Share, ShareBucket};

use super::lane::PlatformLane;
use super::report::LaneStats;
use super::trace::Arrival;

/// A key's bucket and the platform's, decided together: admitted only if both have a token.
fn take_both(key: &mut ShareBucket, platform: Option<&mut ShareBucket>, now: Timestamp) -> bool {
    match platform {
        Some(platform) => {
            let pass = key.has(now, 1) && platform.has(now, 1);
            pass && key.try_take(now, 1) && platform.try_take(now, 1)
        }
        None => key.try_take(now, 1),
    }
}

/// Every decision on the store: one call carrying the key and the platform descriptor.
pub(super) struct ExactLane {
    keys: Vec<ShareBucket>,
    platform: Option<ShareBucket>,
    rtt_ns: u64,
    descriptors: u64,
}

impl ExactLane {
    /// `keys` keys of `limit` and the platform's `platform` limit, full at `start`.
    pub(super) fn new(
        keys: u32,
        limit: Share,
        platform: Option<Share>,
        start: Timestamp,
        rtt_ns: u64,
    ) -> Self {
        ExactLane {
            keys: (0..keys).map(|_| ShareBucket::full(limit, start)).collect(),
            platform: platform.map(|p| ShareBucket::full(p, start)),
            rtt_ns,
            descriptors: 1 + u64::from(platform.is_some()),
        }
    }
}

impl PlatformLane for ExactLane {
    fn decide(&mut self, arrival: Arrival, now: Timestamp, stats: &mut LaneStats) {
        let admitted = take_both(
            &mut self.keys[arrival.key as usize],
            self.platform.as_mut(),
            now,
        );
        stats.called(self.descriptors);
        stats.decided(arrival.key, now, admitted, self.rtt_ns);
    }
}

/// Each instance applies the whole limits on its own: no calls, the limits drift to `limit × instances`.
pub(super) struct LocalLane {
    limit: Share,
    platform: Option<Share>,
    start: Timestamp,
    instances: Vec<(HashMap<u32, ShareBucket>, Option<ShareBucket>)>,
}

impl LocalLane {
    /// Instances applying `limit` per key and `platform` locally, from `start`.
    pub(super) fn new(limit: Share, platform: Option<Share>, start: Timestamp) -> Self {
        LocalLane {
            limit,
            platform,
            start,
            instances: Vec::new(),
        }
    }
}

impl PlatformLane for LocalLane {
    fn decide(&mut self, arrival: Arrival, now: Timestamp, stats: &mut LaneStats) {
        let index = arrival.instance as usize;
        if self.instances.len() <= index {
            let (platform, start) = (self.platform, self.start);
            self.instances.resize_with(index + 1, || {
                (
                    HashMap::new(),
                    platform.map(|p| ShareBucket::full(p, start)),
                )
            });
        }
        let (keys, platform) = &mut self.instances[index];
        let limit = self.limit;
        let key = keys
            .entry(arrival.key)
            .or_insert_with(|| ShareBucket::full(limit, now));
        let admitted = take_both(key, platform.as_mut(), now);
        stats.decided(arrival.key, now, admitted, 0);
    }
}
