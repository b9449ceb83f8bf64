//! Property tests of the sliding log against a plain list of every admitted request.

use crate::common::*;
use proptest::prelude::*;

/// The sliding log as a list of every admitted `(time, cost)`, never pruned.
#[derive(Clone, Debug)]
struct LogModel {
    limit: u128,
    window: u64,
    admitted: Vec<(u64, u128)>,
}

impl LogModel {
    fn new(limit: u64, window: u64) -> Self {
        LogModel {
            limit: u128::from(limit),
            window,
            admitted: Vec::new(),
        }
    }

    /// Whether a request admitted at `at` still counts at `t`: `at` is in `(t − W, t]`.
    fn counts_at(&self, at: u64, t: u64) -> bool {
        u128::from(at) + u128::from(self.window) > u128::from(t)
    }

    /// The units admitted in `(t − W, t]`.
    fn used(&self, t: u64) -> u128 {
        self.admitted
            .iter()
            .filter(|&&(at, _)| self.counts_at(at, t))
            .map(|&(_, cost)| cost)
            .sum()
    }

    fn remaining(&self, t: u64) -> u64 {
        n64(self.limit - self.used(t))
    }

    /// Time until the newest request that still counts leaves the window.
    fn reset_after(&self, t: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(at, cost)| cost > 0 && self.counts_at(at, t))
            .map(|&(at, _)| at + self.window - t)
            .max()
            .unwrap_or(0)
    }

    /// The first instant from `t` on when `n` units fit: the count only drops when an entry leaves.
    fn pass_at(&self, t: u64, n: u64) -> u64 {
        let mut candidates: Vec<u64> = vec![t];
        candidates.extend(
            self.admitted
                .iter()
                .map(|&(at, _)| at + self.window)
                .filter(|&leave| leave > t),
        );
        candidates.sort_unstable();
        candidates
            .into_iter()
            .find(|&c| self.used(c) + u128::from(n) <= self.limit)
            .expect("everything has left the window eventually")
    }
}

impl Limiter for LogModel {
    fn decide(&mut self, now: u64, cost: u64) -> Seen {
        let limit = n64(self.limit);
        if u128::from(cost) > self.limit {
            return Seen::exceeds(limit, self.remaining(now), self.reset_after(now));
        }
        if self.used(now) + u128::from(cost) <= self.limit {
            if cost > 0 {
                self.admitted.push((now, u128::from(cost)));
            }
            Seen::allowed(limit, self.remaining(now), self.reset_after(now))
        } else {
            let wait = self.pass_at(now, cost) - now;
            Seen::denied(limit, self.remaining(now), self.reset_after(now), wait)
        }
    }

    /// Refunds take units back from the newest requests first.
    fn refund(&mut self, now: u64, amount: u64) -> Seen {
        let mut left = u128::from(amount);
        while left > 0
            && let Some((_, cost)) = self.admitted.last_mut()
        {
            let take = left.min(*cost);
            *cost -= take;
            left -= take;
            if *cost == 0 {
                self.admitted.pop();
            }
        }
        Seen::allowed(n64(self.limit), self.remaining(now), self.reset_after(now))
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// The sliding log answers exactly like the list of every admitted request, refunds included.
    #[test]
    fn sliding_log_matches_model((limit, window) in window_params(1), start in start(), ops in ops(true)) {
        let mut real = Logged::new(sliding_log(limit, window));
        let mut model = LogModel::new(limit, window);
        compare(&mut real, &mut model, start, Scales::window(window), limit, &ops)?;
    }

    /// The sliding log never admits more than `limit` units in any window `(t − W, t]`.
    #[test]
    fn sliding_log_admits_at_most_limit_in_any_window((limit, window) in window_params(1), start in start(), ops in ops(false)) {
        let mut real = Logged::new(sliding_log(limit, window));
        let admitted = admitted(&mut real, start, Scales::window(window), limit, &ops)?;
        for &(t, _) in &admitted {
            let inside: u64 = admitted
                .iter()
                .filter(|&&(s, _)| s <= t && s + window > t)
                .map(|&(_, units)| units)
                .sum();
            prop_assert!(inside <= limit, "{} units in the window ending at {}", inside, t);
        }
    }
}
