//! Epoch-aligned windows on a real clock: how long a test waits so that what it sends falls inside one window.
//!
//! A fixed window resets at every multiple of its length since the Unix
//! epoch, on whichever clock decides: the system clock for the in-memory
//! store, Redis's `TIME` for Redis. A test that fills a window and expects the
//! next request denied would see a fresh window if it ran across a reset, so
//! it first waits until the reset is more than `margin` away (at most
//! `margin` and a little more, and only when it is that close).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long to wait, at `now` since the epoch, until the end of the current
/// `window` is more than `margin` away: zero when it already is, else the
/// rest of the window plus [`PAST_RESET`].
#[must_use]
pub fn wait_before_window_end(now: Duration, window: Duration, margin: Duration) -> Duration {
    let length = window.as_nanos().max(1);
    let left = Duration::from_nanos(
        u64::try_from(length - now.as_nanos() % length).expect("a window under 584 years"),
    );
    if left > margin {
        Duration::ZERO
    } else {
        left + PAST_RESET
    }
}

/// How far past a reset a wait ends, so that clocks read a few milliseconds
/// apart (the test's, the server's, Redis's) all agree the window changed.
pub const PAST_RESET: Duration = Duration::from_millis(50);

/// Blocks until the system clock's current `window` has more than `margin` left
/// (see [`wait_before_window_end`]); for a server on the in-memory store.
pub fn wait_clear_of_window_end(window: Duration, margin: Duration) {
    #[expect(
        clippy::disallowed_methods,
        reason = "the server under test reads the same system clock"
    )]
    let now = SystemTime::now();
    let now = now
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    std::thread::sleep(wait_before_window_end(now, window, margin));
}

/// One hour, the window of most tests' "used up" rules.
pub const HOUR: Duration = Duration::from_secs(3600);

/// One day, the window of tests whose counts must not reset at midnight (UTC).
pub const DAY: Duration = Duration::from_secs(86_400);

/// How far from midnight a test counting in one day's window starts: longer
/// than any such test runs.
pub const DAY_MARGIN: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_only_inside_the_margin_and_then_just_past_the_reset() {
        let minute = Duration::from_secs(60);
        let margin = Duration::from_secs(10);
        let at = Duration::from_secs;
        assert_eq!(
            wait_before_window_end(at(120), minute, margin),
            Duration::ZERO
        );
        assert_eq!(
            wait_before_window_end(at(169) + Duration::from_millis(999), minute, margin),
            Duration::ZERO
        );
        assert_eq!(
            wait_before_window_end(at(170), minute, margin),
            at(10) + PAST_RESET
        );
        assert_eq!(
            wait_before_window_end(at(179) + Duration::from_millis(900), minute, margin),
            Duration::from_millis(100) + PAST_RESET
        );
    }
}
