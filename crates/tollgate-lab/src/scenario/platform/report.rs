//! What a platform run reports per mode: decisions, store calls, over- and under-admission, added latency.

use serde::Serialize;
use tollgate_core::Timestamp;
use tollgate_core::share::{ConformanceChecker, Share};

use super::model::PlatformMode;

/// One mode's figures over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlatformLaneReport {
    /// The mode.
    pub mode: PlatformMode,
    /// Requests decided.
    pub decisions: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Admitted requests the exact bucket of their key or of the platform would have refused.
    pub over_admitted: u64,
    /// The most over-admitted requests in one second of the run.
    pub worst_over_second: u64,
    /// How many fewer requests this mode admitted than the exact limiter, in percent of what
    /// the exact limiter admitted (negative: more).
    pub under_admission_pct: f64,
    /// Store calls (a batched call counts once).
    pub store_calls: u64,
    /// Keys the store calls carried in all (1 per exact call).
    pub keys_in_calls: u64,
    /// Store calls per decision.
    pub calls_per_decision: f64,
    /// Store calls per second of simulated time.
    pub calls_per_second: f64,
    /// Keys per store call.
    pub keys_per_call: f64,
    /// Decisions that waited on the store.
    pub waited: u64,
    /// The 99th percentile of the time a decision waited on the store, in microseconds.
    pub p99_wait_us: f64,
    /// The longest wait, in microseconds.
    pub max_wait_us: f64,
    /// Requests admitted in each second of the run, from its start (a decision
    /// still waiting at the end counts in the second it was decided).
    pub admitted_per_second: Vec<u64>,
    /// Script calls the lane sent to Redis (absent in memory, and for the
    /// exact lane, which stays the in-memory reference): the shares
    /// authority makes two per store call (a read, then a compare-and-set
    /// write), a lease one per grant or return.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script_calls: Option<u64>,
}

/// Adds one to `per_second[second]`, growing it as the run goes.
fn count_in(per_second: &mut Vec<u64>, second: usize) {
    if per_second.len() <= second {
        per_second.resize(second + 1, 0);
    }
    per_second[second] += 1;
}

/// A lane's running counts, and the exact buckets its admissions are checked against.
pub(super) struct LaneStats {
    pub(super) decisions: u64,
    pub(super) admitted: u64,
    pub(super) store_calls: u64,
    pub(super) keys_in_calls: u64,
    over_admitted: u64,
    over_per_second: Vec<u64>,
    admitted_per_second: Vec<u64>,
    /// Nanoseconds waited by the decisions that waited, as (wait, how many in a row): a lane
    /// whose every decision waits one round trip keeps one entry, not one per decision.
    waits: Vec<(u64, u64)>,
    /// Decisions that waited.
    waited: u64,
    key_checkers: Vec<ConformanceChecker>,
    platform_checker: Option<ConformanceChecker>,
    start: Timestamp,
}

impl LaneStats {
    /// Counts for `keys` keys of `key_limit` and the platform's limit, from `start`.
    pub(super) fn new(
        keys: u32,
        key_limit: Share,
        platform: Option<Share>,
        start: Timestamp,
    ) -> Self {
        LaneStats {
            decisions: 0,
            admitted: 0,
            store_calls: 0,
            keys_in_calls: 0,
            over_admitted: 0,
            over_per_second: Vec::new(),
            admitted_per_second: Vec::new(),
            waits: Vec::new(),
            waited: 0,
            key_checkers: (0..keys)
                .map(|_| ConformanceChecker::new(key_limit, start))
                .collect(),
            platform_checker: platform.map(|p| ConformanceChecker::new(p, start)),
            start,
        }
    }

    /// Records a decision on `key` made at `decided` (after waiting `waited_ns` on the store).
    pub(super) fn decided(&mut self, key: u32, decided: Timestamp, admitted: bool, waited_ns: u64) {
        self.decisions += 1;
        if waited_ns > 0 {
            self.waited += 1;
            match self.waits.last_mut() {
                Some((wait, n)) if *wait == waited_ns => *n += 1,
                _ => self.waits.push((waited_ns, 1)),
            }
        }
        if !admitted {
            return;
        }
        self.admitted += 1;
        let second = decided.saturating_since(self.start).as_secs() as usize;
        count_in(&mut self.admitted_per_second, second);
        let mut conforms = self.key_checkers[key as usize].admit(decided, 1);
        if let Some(platform) = &mut self.platform_checker {
            conforms &= platform.admit(decided, 1);
        }
        if !conforms {
            self.over_admitted += 1;
            count_in(&mut self.over_per_second, second);
        }
    }

    /// Records one store call carrying `keys` keys.
    pub(super) fn called(&mut self, keys: u64) {
        self.store_calls += 1;
        self.keys_in_calls += keys;
    }

    /// The report, against `exact_admitted` and over `seconds` of simulated time.
    pub(super) fn report(
        mut self,
        mode: PlatformMode,
        exact_admitted: u64,
        seconds: f64,
    ) -> PlatformLaneReport {
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        self.waits.sort_unstable();
        // Decisions that did not wait count as waiting 0.
        let rank = (self.decisions as f64 * 0.99).ceil() as u64;
        let no_wait = self.decisions - self.waited;
        let p99 = if rank <= no_wait {
            0
        } else {
            // The (rank − no_wait)th smallest wait (1-based), or the longest.
            let nth = (rank - no_wait).clamp(1, self.waited);
            let mut seen = 0;
            self.waits
                .iter()
                .find(|&&(_, n)| {
                    seen += n;
                    seen >= nth
                })
                .map_or(0, |&(wait, _)| wait)
        };
        PlatformLaneReport {
            mode,
            decisions: self.decisions,
            admitted: self.admitted,
            over_admitted: self.over_admitted,
            worst_over_second: self.over_per_second.iter().copied().max().unwrap_or(0),
            under_admission_pct: if exact_admitted == 0 {
                0.0
            } else {
                (exact_admitted as f64 - self.admitted as f64) * 100.0 / exact_admitted as f64
            },
            store_calls: self.store_calls,
            keys_in_calls: self.keys_in_calls,
            calls_per_decision: per(self.store_calls, self.decisions),
            calls_per_second: if seconds > 0.0 {
                self.store_calls as f64 / seconds
            } else {
                0.0
            },
            keys_per_call: per(self.keys_in_calls, self.store_calls),
            waited: self.waited,
            p99_wait_us: p99 as f64 / 1_000.0,
            max_wait_us: self.waits.last().map_or(0, |&(wait, _)| wait) as f64 / 1_000.0,
            admitted_per_second: self.admitted_per_second,
            script_calls: None,
        }
    }
}
