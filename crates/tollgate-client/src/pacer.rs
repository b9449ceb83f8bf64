//! [`Pacer`]: when the next request may start, from what the server said, so a client slows down before it runs out.
//!
//! The pacer keeps one instant, `not_before`, and one `spacing`:
//!
//! * each request **reserves** a start `max(now, not_before)` and moves
//!   `not_before` one `spacing` past it, so concurrent callers of one client
//!   queue up one `spacing` apart instead of leaving together;
//! * an answer with `remaining = r` and a reset `t` away sets
//!   `spacing = t / r` once `r ≤ slow_down_below`: the `r` requests left are
//!   spread over the time to the reset instead of spent at once; with more
//!   left, `spacing` is zero (no pacing);
//! * `r = 0` or a `Retry-After` (any status) pushes `not_before` to at
//!   least `now + wait`: **no request leaves sooner than the server said**;
//! * `r = 0` also **spreads what waits across the reset**: from then until a
//!   whole window after the reset, `spacing` is at least the server's own
//!   rate, `window / limit` (`RateLimit-Policy`'s `w` and `q`; without a
//!   window, `reset / limit`), so what queued up behind the reset leaves at
//!   the pace the server admits instead of all at the reset. An answer with
//!   plenty left ends this only once that period is over.
//!
//! A pure state machine: the caller passes `now` and sleeps until the start
//! it is given.

use std::time::Duration;

use tollgate_core::Timestamp;

use crate::hints::ServerHints;

/// The start times of a client's requests.
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::{Pacer, ServerHints};
/// use tollgate_core::Timestamp;
///
/// let mut pacer = Pacer::new(Pacer::DEFAULT_SLOW_DOWN_BELOW);
/// let now = Timestamp::from_nanos(1_000_000_000_000);
/// let left = |remaining, reset_secs| ServerHints {
///     remaining: Some(remaining),
///     reset: Some(Duration::from_secs(reset_secs)),
///     ..ServerHints::default()
/// };
/// // Plenty left: requests leave at once.
/// pacer.observe(now, &left(50, 8));
/// assert_eq!(pacer.reserve(now), now);
/// assert_eq!(pacer.reserve(now), now);
/// // 4 left for the next 8 s: one every 2 s, even when all are ready now.
/// pacer.observe(now, &left(4, 8));
/// assert_eq!(pacer.spacing(), Duration::from_secs(2));
/// assert_eq!(pacer.reserve(now), now);
/// assert_eq!(pacer.reserve(now), now.saturating_add(Duration::from_secs(2)));
/// // A Retry-After: nothing leaves sooner than the server said.
/// let wait = ServerHints { retry_after: Some(Duration::from_secs(30)), ..ServerHints::default() };
/// pacer.observe(now, &wait);
/// assert!(pacer.reserve(now) >= now.saturating_add(Duration::from_secs(30)));
/// ```
#[derive(Clone, Debug)]
pub struct Pacer {
    slow_down_below: u64,
    not_before: Timestamp,
    spacing: Duration,
    /// Until then, `spacing` stays at least `server_spacing` (after an `r = 0`).
    paced_until: Timestamp,
    server_spacing: Duration,
}

impl Pacer {
    /// The `remaining` at or below which requests are spaced out, by default.
    pub const DEFAULT_SLOW_DOWN_BELOW: u64 = 5;

    /// A pacer that spaces requests once `remaining` is at most `slow_down_below`.
    pub fn new(slow_down_below: u64) -> Self {
        Pacer {
            slow_down_below,
            not_before: Timestamp::EPOCH,
            spacing: Duration::ZERO,
            paced_until: Timestamp::EPOCH,
            server_spacing: Duration::ZERO,
        }
    }

    /// The earliest start of the next request.
    pub fn not_before(&self) -> Timestamp {
        self.not_before
    }

    /// The current spacing between starts.
    pub fn spacing(&self) -> Duration {
        self.spacing
    }

    /// Reserves the next start for a request ready at `now`.
    pub fn reserve(&mut self, now: Timestamp) -> Timestamp {
        let start = now.max(self.not_before);
        self.not_before = start.saturating_add(self.spacing);
        start
    }

    /// Nothing may start before `at`.
    pub fn hold_until(&mut self, at: Timestamp) {
        self.not_before = self.not_before.max(at);
    }

    /// Takes in an answer's hints, received at `now`.
    pub fn observe(&mut self, now: Timestamp, hints: &ServerHints) {
        if let (Some(remaining), Some(reset)) = (hints.remaining, hints.reset) {
            if remaining == 0
                && let Some(server_spacing) = hints.server_spacing()
            {
                self.server_spacing = server_spacing;
                let period = reset.saturating_add(hints.window.unwrap_or(reset));
                self.paced_until = self.paced_until.max(now.saturating_add(period));
            } else if now >= self.paced_until {
                self.server_spacing = Duration::ZERO;
            }
            let near_zero = if remaining == 0 || remaining > self.slow_down_below {
                Duration::ZERO
            } else {
                reset / u32::try_from(remaining).unwrap_or(u32::MAX)
            };
            self.spacing = near_zero.max(self.server_spacing);
        }
        if let Some(wait) = hints.must_wait() {
            self.hold_until(now.saturating_add(wait));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_secs(1_000);
    const SEC: Duration = Duration::from_secs(1);

    fn hints(remaining: u64, reset_s: u64) -> ServerHints {
        ServerHints {
            remaining: Some(remaining),
            reset: Some(Duration::from_secs(reset_s)),
            ..ServerHints::default()
        }
    }

    #[test]
    fn plenty_left_means_no_pacing() {
        let mut p = Pacer::new(5);
        p.observe(T0, &hints(50, 10));
        assert_eq!(p.reserve(T0), T0);
        assert_eq!(p.reserve(T0), T0);
    }

    #[test]
    fn near_zero_the_rest_is_spread_over_the_time_to_reset() {
        let mut p = Pacer::new(5);
        p.observe(T0, &hints(4, 2));
        let starts: Vec<Timestamp> = (0..4).map(|_| p.reserve(T0)).collect();
        let half = Duration::from_millis(500);
        assert_eq!(
            starts,
            [
                T0,
                T0.saturating_add(half),
                T0.saturating_add(2 * half),
                T0.saturating_add(3 * half)
            ]
        );
    }

    #[test]
    fn nothing_left_or_retry_after_holds_every_start() {
        let mut p = Pacer::new(5);
        p.observe(T0, &hints(0, 3));
        assert_eq!(p.reserve(T0), T0.saturating_add(3 * SEC));
        let told = ServerHints {
            retry_after: Some(7 * SEC),
            ..ServerHints::default()
        };
        p.observe(T0, &told);
        assert_eq!(p.reserve(T0), T0.saturating_add(7 * SEC));
        // An earlier hint never pulls the start back.
        p.observe(T0, &hints(0, 1));
        assert!(p.not_before() >= T0.saturating_add(7 * SEC));
    }

    #[test]
    fn what_waits_for_the_reset_leaves_at_the_servers_rate_for_a_window() {
        let mut p = Pacer::new(5);
        // 50 per 10 s, with `remaining` left and `reset_s` to the reset.
        let policy = |remaining, reset_s| ServerHints {
            limit: Some(50),
            window: Some(10 * SEC),
            ..hints(remaining, reset_s)
        };
        p.observe(T0, &policy(0, 4));
        let reset = T0.saturating_add(4 * SEC);
        let starts: Vec<Timestamp> = (0..4).map(|_| p.reserve(T0)).collect();
        let step = Duration::from_millis(200);
        assert_eq!(
            starts,
            (0..4)
                .map(|i| reset.saturating_add(step * i))
                .collect::<Vec<_>>()
        );
        // Plenty left in the new window does not release the queue at once ...
        p.observe(reset.saturating_add(SEC), &policy(45, 9));
        assert_eq!(p.spacing(), step);
        // ... until a whole window after the reset has passed.
        p.observe(reset.saturating_add(10 * SEC), &policy(45, 9));
        assert_eq!(p.spacing(), Duration::ZERO);
    }
}
