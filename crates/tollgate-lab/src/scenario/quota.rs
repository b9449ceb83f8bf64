//! The "RLQS" lane: Envoys enforcing their share of one limit locally, rebalanced from their usage reports, as `tollgate serve`'s rate limit quota service does.
//!
//! Each Envoy holds, per key, a token-bucket assignment and decides every
//! request against it with no call. Every report interval each Envoy
//! reports what it saw per key (allowed plus denied, scaled to the limit's
//! window `W`), and the shares of the limit's `R` units per `W` are split
//! again with [`steady_shares`], the function the service runs: max-min
//! fair (a key asking less than its fair share gets all it asks, the rest
//! split the same way), the rate left when every demand is served spread
//! as headroom, never more than `R` in all, and a share within a tenth of
//! the one in force kept. A share
//! `s` becomes the service's token bucket: `max(1, ⌊C × s / R⌋)` tokens
//! (`C` the limit's capacity), refilled with `⌊s × F / W⌋` every
//! `F = ⌈W⌉` whole seconds. A changed assignment starts full, as Envoy's
//! does. What is simplified: every Envoy reports at the same instants and
//! gets its new share at once (the service answers a grown share at that
//! Envoy's next report, so the real fleet is a little slower to follow).
//!
//! Requests reach the Envoys by a skew: a `hot_permille` share of them go
//! to the first Envoy, the rest round robin over all, so a lane can show
//! its shares following demand.

use std::collections::HashMap;
use std::time::Duration;

use tollgate_core::fair_share::{Leftover, steady_shares};
use tollgate_core::{AnyAlgorithm, Decision, Timestamp, TokenBucket, WordAlgorithm};

use super::hash::mix64;

/// The token bucket the service assigns for a share `share` of `rate` units
/// per `window` of a limit of `capacity` (none for a share of 0).
fn assigned_bucket(rate: u64, capacity: u64, window: Duration, share: u64) -> Option<TokenBucket> {
    if share == 0 {
        return None;
    }
    let fill_secs = window.as_secs_f64().ceil().max(1.0);
    let per_fill = (share as f64 * fill_secs / window.as_secs_f64().max(1e-9)).floor() as u64;
    let max_tokens = (capacity.saturating_mul(share) / rate.max(1)).max(1);
    TokenBucket::new(
        max_tokens,
        per_fill.max(1),
        Duration::from_secs_f64(fill_secs),
    )
    .ok()
}

/// One Envoy's assignment for one key: its bucket and state.
#[derive(Clone, Copy, Debug)]
struct Assignment {
    share: u64,
    bucket: Option<TokenBucket>,
    state: u64,
    /// Requests seen (allowed and denied) since the last report.
    seen: u64,
}

/// The Envoys of one RLQS lane.
#[derive(Debug)]
pub(super) struct QuotaFleet {
    rate: u64,
    capacity: u64,
    window: Duration,
    report_ns: u64,
    hot_permille: u64,
    /// Per Envoy, per key.
    envoys: Vec<HashMap<u64, Assignment>>,
    /// The next report instant, in nanoseconds since the run's start.
    next_report_ns: u64,
    /// Usage reports sent in the tick and in all (one per Envoy and key each interval).
    pub(super) tick_reports: u64,
    pub(super) reports: u64,
}

impl QuotaFleet {
    /// `envoys` Envoys sharing `algorithm`'s limit, reporting every `report`.
    pub(super) fn new(
        algorithm: AnyAlgorithm,
        envoys: u32,
        report: Duration,
        hot_permille: u32,
    ) -> Self {
        let report_ns = u64::try_from(report.as_nanos()).unwrap_or(u64::MAX).max(1);
        QuotaFleet {
            rate: algorithm.capacity(),
            capacity: algorithm.capacity(),
            window: algorithm.window(),
            report_ns,
            hot_permille: u64::from(hot_permille),
            envoys: (0..envoys).map(|_| HashMap::new()).collect(),
            next_report_ns: report_ns,
            tick_reports: 0,
            reports: 0,
        }
    }

    /// The Envoy arrival `arrival` reaches: the first with `hot_permille`‰, else round robin over all.
    pub(super) fn envoy_of(&self, arrival: u64) -> usize {
        let n = self.envoys.len() as u64;
        if n == 1 {
            return 0;
        }
        // A stateless hash of the index, as clients are drawn.
        if mix64(arrival) % 1000 < self.hot_permille {
            0
        } else {
            (arrival % n) as usize
        }
    }

    /// Reports due by `offset_ns` (nanoseconds since the start): the shares split again from demand.
    pub(super) fn report_until(&mut self, offset_ns: u64) {
        while self.next_report_ns <= offset_ns {
            self.rebalance();
            self.next_report_ns = self.next_report_ns.saturating_add(self.report_ns);
        }
    }

    fn rebalance(&mut self) {
        let mut keys: Vec<u64> = self.envoys.iter().flat_map(|e| e.keys().copied()).collect();
        keys.sort_unstable();
        keys.dedup();
        let scale = self.window.as_secs_f64() / (self.report_ns as f64 / 1e9);
        for key in keys {
            let demands: Vec<Option<u64>> = self
                .envoys
                .iter()
                .map(|e| {
                    Some(
                        e.get(&key)
                            .map_or(0, |a| (a.seen as f64 * scale).round() as u64),
                    )
                })
                .collect();
            let held: Vec<Option<u64>> = self
                .envoys
                .iter()
                .map(|e| e.get(&key).map(|a| a.share).filter(|&s| s != u64::MAX))
                .collect();
            // As the service: a share within a tenth of the one in force keeps it.
            let shares = steady_shares(self.rate, &demands, &held, Leftover::Spread);
            for (envoy, share) in shares.into_iter().enumerate() {
                let assignment = self.envoys[envoy].entry(key).or_insert(Assignment {
                    share: u64::MAX,
                    bucket: None,
                    state: 0,
                    seen: 0,
                });
                if assignment.share != share {
                    let bucket = assigned_bucket(self.rate, self.capacity, self.window, share);
                    // A new assignment starts full, as Envoy's token bucket does.
                    *assignment = Assignment {
                        share,
                        bucket,
                        state: 0,
                        seen: 0,
                    };
                }
                assignment.seen = 0;
                self.tick_reports += 1;
                self.reports += 1;
            }
        }
    }

    /// Decides a request of `cost` for `key` at `at` on `envoy`, locally.
    pub(super) fn decide(&mut self, envoy: usize, key: u64, at: Timestamp, cost: u64) -> Decision {
        let (rate, capacity, window) = (self.rate, self.capacity, self.window);
        let equal = rate / self.envoys.len().max(1) as u64;
        let assignment = self.envoys[envoy].entry(key).or_insert_with(|| Assignment {
            // Before the first report: an equal share (the service's first answer).
            share: u64::MAX,
            bucket: assigned_bucket(rate, capacity, window, equal),
            state: 0,
            seen: 0,
        });
        assignment.seen = assignment.seen.saturating_add(cost);
        match assignment.bucket {
            Some(bucket) => {
                let (decision, state) = bucket.decide(assignment.state, at, cost);
                if let Some(state) = state {
                    assignment.state = state;
                }
                decision
            }
            None => Decision::from_parts(tollgate_core::Outcome::Denied, 0, 0, 0, 0),
        }
    }
}
