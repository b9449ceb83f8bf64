//! Property tests of the token bucket, GCRA and leaky bucket against plain reference models.
//!
//! The models are written from the documented semantics (a bucket of tokens
//! that refills; nginx's `excess` bookkeeping), not from the implementation's
//! theoretical-arrival-time formulas, and compute everything exactly in
//! integer nanoseconds.

use crate::common::*;
use proptest::prelude::*;
use tollgate_core::DelayMode;

/// A token bucket as the docs describe it: it starts full, refills continuously and hands out whole tokens.
///
/// Tokens are kept exactly as token-nanoseconds: `level` is the number of
/// tokens times the per-token interval, so one nanosecond of waiting refills
/// one token-nanosecond.
#[derive(Clone, Debug)]
struct BucketModel {
    capacity: u128,
    interval: u128,
    level: u128,
    last_seen: Option<u64>,
}

impl BucketModel {
    /// A full bucket of `capacity` tokens refilled `count` per `period_ns`, one token per whole ns interval rounded up.
    fn new(capacity: u64, count: u64, period_ns: u64) -> Self {
        let period = u128::from(period_ns);
        let count = u128::from(count);
        // "Never faster than configured": the smallest whole interval with interval × count ≥ period.
        let mut interval = period / count;
        if interval * count < period {
            interval += 1;
        }
        let capacity = u128::from(capacity);
        BucketModel {
            capacity,
            interval,
            level: capacity * interval,
            last_seen: None,
        }
    }

    fn full(&self) -> u128 {
        self.capacity * self.interval
    }

    /// Adds the tokens that dripped in since the last look, up to a full bucket.
    fn refill(&mut self, now: u64) {
        if let Some(then) = self.last_seen {
            self.level = (self.level + u128::from(now - then)).min(self.full());
        }
        self.last_seen = Some(now);
    }

    fn tokens(&self) -> u64 {
        n64(self.level / self.interval)
    }

    fn until_full(&self) -> u64 {
        n64(self.full() - self.level)
    }
}

impl Limiter for BucketModel {
    fn decide(&mut self, now: u64, cost: u64) -> Seen {
        self.refill(now);
        let limit = n64(self.capacity);
        let need = u128::from(cost) * self.interval;
        if u128::from(cost) > self.capacity {
            Seen::exceeds(limit, self.tokens(), self.until_full())
        } else if self.level >= need {
            self.level -= need;
            Seen::allowed(limit, self.tokens(), self.until_full())
        } else {
            // One token-nanosecond drips in per nanosecond.
            let wait = n64(need - self.level);
            Seen::denied(limit, self.tokens(), self.until_full(), wait)
        }
    }

    fn refund(&mut self, now: u64, amount: u64) -> Seen {
        self.refill(now);
        self.level = (self.level + u128::from(amount) * self.interval).min(self.full());
        Seen::allowed(n64(self.capacity), self.tokens(), self.until_full())
    }
}

/// nginx `limit_req` in the words of its documentation and source, kept in request-nanoseconds.
///
/// nginx remembers, per key, when the last admitted request came and its
/// `excess`. A request computes `excess = max(0, stored − drained + 1)`,
/// where `drained` is the elapsed time times the rate (a key seen for the
/// first time gets 0), is rejected without any change when that is above
/// `burst`, and otherwise stores it. Here a request of `n` units is `n` such
/// requests at the same instant, all or nothing. One request is `interval`
/// request-nanoseconds, so one nanosecond drains one.
#[derive(Clone, Debug)]
struct NginxModel {
    interval: i128,
    burst: u64,
    mode: DelayMode,
    /// When the last admitted request came and the excess stored then.
    last: Option<(u64, i128)>,
}

impl NginxModel {
    fn new(rate: u64, period_ns: u64, burst: u64, mode: DelayMode) -> Self {
        let period = i128::from(period_ns);
        let rate = i128::from(rate);
        let mut interval = period / rate;
        if interval * rate < period {
            interval += 1;
        }
        NginxModel {
            interval,
            burst,
            mode,
            last: None,
        }
    }

    fn burst_ns(&self) -> i128 {
        i128::from(self.burst) * self.interval
    }

    /// The stored excess minus what drained since, or `None` for a key never seen.
    fn drained(&self, now: u64) -> Option<i128> {
        self.last
            .map(|(then, excess)| excess - i128::from(now - then))
    }

    /// The excess after `units` requests at `now`, one after another.
    fn excess_after(&self, now: u64, units: u64) -> Option<i128> {
        let mut excess = self.drained(now);
        for _ in 0..units {
            excess = Some(match excess {
                None => 0,
                Some(e) => (e + self.interval).max(0),
            });
        }
        excess
    }

    fn admits(&self, now: u64, units: u64) -> bool {
        self.excess_after(now, units)
            .is_none_or(|e| e <= self.burst_ns())
    }

    /// How many more single requests would pass at `now`.
    fn room(&self, now: u64) -> u64 {
        let mut k = 0;
        while self.admits(now, k + 1) {
            k += 1;
        }
        k
    }

    /// The wait until the key behaves as if never seen: the next request would compute 0.
    fn until_idle(&self, now: u64) -> u64 {
        let hi = n64((i128::from(self.burst) + 2) * self.interval);
        earliest(0, hi, |w| {
            self.drained(now + w).is_none_or(|e| e + self.interval <= 0)
        })
    }

    /// The delay nginx asks for at an excess of `excess` request-ns.
    fn delay(&self, excess: Option<i128>) -> u64 {
        let free = match self.mode {
            DelayMode::NoDelay => return 0,
            DelayMode::Delay => 0,
            DelayMode::DelayAfter(n) => i128::from(n) * self.interval,
        };
        excess.map_or(0, |e| n64((e - free).max(0)))
    }

    fn limit(&self) -> u64 {
        // From idle, `burst` requests above the first one pass at once.
        self.burst + 1
    }
}

impl Limiter for NginxModel {
    fn decide(&mut self, now: u64, cost: u64) -> Seen {
        let never = NginxModel {
            last: None,
            ..self.clone()
        };
        if !never.admits(now, cost) {
            return Seen::exceeds(self.limit(), self.room(now), self.until_idle(now));
        }
        if self.admits(now, cost) {
            let excess = self.excess_after(now, cost);
            if cost > 0 {
                self.last = Some((now, excess.expect("a request leaves an excess")));
            }
            Seen::allowed(self.limit(), self.room(now), self.until_idle(now))
                .with_delay(self.delay(excess))
        } else {
            let hi = n64((i128::from(self.burst) + i128::from(cost) + 2) * self.interval);
            let wait = earliest(0, hi, |w| self.admits(now + w, cost));
            Seen::denied(self.limit(), self.room(now), self.until_idle(now), wait)
        }
    }

    fn refund(&mut self, now: u64, amount: u64) -> Seen {
        if let Some(e) = self.drained(now) {
            self.last = Some((now, e - i128::from(amount) * self.interval));
        }
        Seen::allowed(self.limit(), self.room(now), self.until_idle(now))
    }
}

/// Checks that at most `capacity + count·t/period` units pass in any closed interval of length `t`.
fn check_rate_bound(
    admitted: &[(u64, u64)],
    capacity: u64,
    count: u64,
    period_ns: u64,
) -> Result<(), TestCaseError> {
    let instants = per_instant(admitted);
    for i in 0..instants.len() {
        let mut units = 0u128;
        for j in i..instants.len() {
            units += u128::from(instants[j].1);
            let span = u128::from(instants[j].0 - instants[i].0);
            let allowed = u128::from(capacity) * u128::from(period_ns) + u128::from(count) * span;
            prop_assert!(
                units * u128::from(period_ns) <= allowed,
                "{} units in [{}, {}] ({} ns), more than {} + {}/{} ns × span",
                units,
                instants[i].0,
                instants[j].0,
                span,
                capacity,
                count,
                period_ns
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// The token bucket answers exactly like the token-counting model, refunds included.
    #[test]
    fn token_bucket_matches_model((cap, count, period) in meter_params(), start in start(), ops in ops(true)) {
        let mut real = Keyed::new(token_bucket(cap, count, period));
        let mut model = BucketModel::new(cap, count, period);
        compare(&mut real, &mut model, start, Scales::meter(cap, count, period), cap, &ops)?;
    }

    /// GCRA answers exactly like a token bucket of `burst` tokens refilled at `limit / period`.
    #[test]
    fn gcra_matches_model((burst, limit, period) in meter_params(), start in start(), ops in ops(true)) {
        let mut real = Keyed::new(gcra(burst, limit, period));
        let mut model = BucketModel::new(burst, limit, period);
        compare(&mut real, &mut model, start, Scales::meter(burst, limit, period), burst, &ops)?;
    }

    /// The leaky bucket answers exactly like nginx's excess bookkeeping, delays included.
    #[test]
    fn leaky_bucket_matches_nginx_model((rate, period, burst, mode) in leaky_params(), start in start(), ops in ops(true)) {
        let mut real = Keyed::new(leaky_bucket(rate, period, burst, mode));
        let mut model = NginxModel::new(rate, period, burst, mode);
        compare(&mut real, &mut model, start, Scales::meter(burst + 1, rate, period), burst + 1, &ops)?;
    }

    /// A token bucket never admits more than its capacity plus the configured rate over any interval.
    #[test]
    fn token_bucket_stays_within_capacity_plus_rate((cap, count, period) in meter_params(), start in start(), ops in ops(false)) {
        let mut real = Keyed::new(token_bucket(cap, count, period));
        let admitted = admitted(&mut real, start, Scales::meter(cap, count, period), cap, &ops)?;
        check_rate_bound(&admitted, cap, count, period)?;
    }

    /// GCRA never admits more than its burst plus the configured rate over any interval.
    #[test]
    fn gcra_stays_within_burst_plus_rate((burst, limit, period) in meter_params(), start in start(), ops in ops(false)) {
        let mut real = Keyed::new(gcra(burst, limit, period));
        let admitted = admitted(&mut real, start, Scales::meter(burst, limit, period), burst, &ops)?;
        check_rate_bound(&admitted, burst, limit, period)?;
    }

    /// A leaky bucket never admits more than `burst + 1` plus the configured rate over any interval.
    #[test]
    fn leaky_bucket_stays_within_burst_plus_rate((rate, period, burst, mode) in leaky_params(), start in start(), ops in ops(false)) {
        let mut real = Keyed::new(leaky_bucket(rate, period, burst, mode));
        let admitted = admitted(&mut real, start, Scales::meter(burst + 1, rate, period), burst + 1, &ops)?;
        check_rate_bound(&admitted, burst + 1, rate, period)?;
    }
}

/// The nginx model reproduces the observed nginx 1.22 example on its own.
#[test]
fn nginx_model_reproduces_eight_parallel_requests() {
    const MS: u64 = 1_000_000;
    let cases = [
        (DelayMode::Delay, vec![0, 100, 200, 300, 400, 500]),
        (DelayMode::NoDelay, vec![0; 6]),
        (DelayMode::DelayAfter(2), vec![0, 0, 0, 100, 200, 300]),
    ];
    for (mode, delays) in cases {
        let mut model = NginxModel::new(10, 1_000 * MS, 5, mode);
        let seen: Vec<Seen> = (0..8).map(|_| model.decide(START, 1)).collect();
        let admitted: Vec<u64> = seen
            .iter()
            .filter(|s| s.outcome == tollgate_core::Outcome::Allowed)
            .map(|s| s.delay / MS)
            .collect();
        assert_eq!(admitted, delays, "{mode:?}");
        assert_eq!(seen.len() - admitted.len(), 2, "{mode:?}");
        // The rejected ones may retry when one request has drained.
        assert_eq!(seen[6].retry_after, Some(100 * MS), "{mode:?}");
    }
}

/// The bucket model reproduces the classic 5-token, 2-per-second example on its own.
#[test]
fn bucket_model_reproduces_the_classic_example() {
    const MS: u64 = 1_000_000;
    let mut model = BucketModel::new(5, 2, 1_000 * MS);
    for _ in 0..5 {
        assert_eq!(
            model.decide(START, 1).outcome,
            tollgate_core::Outcome::Allowed
        );
    }
    let d = model.decide(START + 100 * MS, 3);
    assert_eq!(d.retry_after, Some(1_400 * MS));
    assert_eq!(d.reset_after, 2_400 * MS);
}
