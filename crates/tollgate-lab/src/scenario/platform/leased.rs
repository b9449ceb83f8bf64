//! The leased lane: the existing quota leases (`tollgate serve --lease-period`), one leased fleet per descriptor on one store each (in memory, or Redis's lease script at virtual time).

use std::time::Duration;

use tollgate_core::share::{MILLI_PER_TOKEN, Share};
use tollgate_core::{AnyAlgorithm, ConfigError, Timestamp, TokenBucket};

use super::super::leased::LeasedFleet;
use super::lane::PlatformLane;
use super::report::LaneStats;
use super::trace::Arrival;
use crate::store::{SimulatedStore, StoreFactory};

/// One descriptor's leased fleet and its store.
struct Leased {
    fleet: LeasedFleet,
    store: Box<dyn SimulatedStore>,
}

/// The leased lane: per-key leases first, the platform's only for requests the key admitted.
pub(super) struct LeasedLane {
    key: Leased,
    platform: Option<Leased>,
    rtt_ns: u64,
    /// The stores are remote (their calls are counted as script calls).
    remote: bool,
}

/// A token bucket of `share` (whole tokens per second) as the core's algorithm.
fn bucket(share: Share) -> Result<AnyAlgorithm, ConfigError> {
    Ok(TokenBucket::new(
        share.burst,
        share.rate / MILLI_PER_TOKEN,
        Duration::from_secs(1),
    )?
    .into())
}

impl LeasedLane {
    /// `instances` instances leasing for `period` from `keys` keys of `limit` and the platform's limit.
    pub(super) fn new(
        instances: u32,
        keys: u32,
        limit: Share,
        platform: Option<Share>,
        period: Duration,
        rtt_ns: u64,
        stores: &dyn StoreFactory,
    ) -> Result<Self, ConfigError> {
        let leased = |share: Share, keys: u32| -> Result<Leased, ConfigError> {
            let algorithm = bucket(share)?;
            Ok(Leased {
                fleet: LeasedFleet::new(algorithm, instances, period),
                store: stores.store(algorithm, keys as usize),
            })
        };
        Ok(LeasedLane {
            key: leased(limit, keys)?,
            platform: platform.map(|p| leased(p, 1)).transpose()?,
            rtt_ns,
            remote: stores.is_remote(),
        })
    }
}

impl PlatformLane for LeasedLane {
    fn decide(&mut self, arrival: Arrival, now: Timestamp, stats: &mut LaneStats) {
        let instance = (arrival.instance as usize) % self.key.fleet.instances();
        let calls_before =
            self.key.fleet.calls + self.platform.as_ref().map_or(0, |p| p.fleet.calls);
        let key = u64::from(arrival.key);
        let mut admitted = self
            .key
            .fleet
            .decide(self.key.store.as_mut(), instance, key, now, 1)
            .is_allowed();
        if admitted && let Some(platform) = &mut self.platform {
            admitted = platform
                .fleet
                .decide(platform.store.as_mut(), instance, 0, now, 1)
                .is_allowed();
        }
        let calls = self.key.fleet.calls + self.platform.as_ref().map_or(0, |p| p.fleet.calls)
            - calls_before;
        for _ in 0..calls {
            stats.called(1);
        }
        stats.decided(
            arrival.key,
            now,
            admitted,
            if calls > 0 { self.rtt_ns } else { 0 },
        );
    }

    fn store_calls(&self) -> u64 {
        if !self.remote {
            return 0;
        }
        self.key.fleet.calls + self.platform.as_ref().map_or(0, |p| p.fleet.calls)
    }

    fn failure(&self) -> Option<String> {
        let platform = self.platform.as_ref().and_then(|p| p.store.failure());
        self.key.store.failure().or(platform).map(str::to_owned)
    }
}
