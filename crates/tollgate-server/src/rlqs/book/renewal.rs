//! Renewing assignments before they lapse: each payment round sends a stream whose last assignment would lapse before the round after next all its assignments again, as they are.
//!
//! Envoy 1.40 drops an assignment its time to live after it received it
//! (a timer restarted by every response that names the bucket, the
//! service's own pushes included) and applies `no_assignment_behavior`,
//! and it reports only every 5 s. A renewal keeps a time to live shorter
//! than that report interval from lapsing on a live stream; an unchanged
//! token bucket is carried over by Envoy with its tokens (it compares the
//! bucket's settings), so a renewal hands out nothing new and costs the
//! counter nothing. The short time to live is what bounds how long a
//! departed stream's shares stay reserved (the last renewal, the time to
//! live and a round; see `QuotaBook::close`).
//!
//! A stream is renewed while its assignments would lapse before two more
//! rounds and half a tick: so one round may be missed (late by up to a
//! tick and a half, the machine stalled) before an assignment lapses,
//! with a time to live of three ticks or more.

use std::time::Duration;

use tollgate_core::Timestamp;

use super::counter::Inner;
use super::quota_book::QuotaBook;
use super::stream::StreamId;

impl QuotaBook {
    /// The streams a round at `now`, `tick` before the next, renews.
    pub(super) fn renewals(&self, inner: &Inner, now: Timestamp, tick: Duration) -> Vec<StreamId> {
        let ttl = self.options.assignment_ttl;
        inner
            .streams
            .iter()
            .filter(|(_, s)| s.sent.is_some_and(|sent| renewal_due(sent, ttl, now, tick)))
            .map(|(&id, _)| id)
            .collect()
    }
}

/// Whether assignments sent at `sent` with a time to live `ttl` would
/// lapse before two more rounds `tick` apart and half a tick from `now`.
pub(super) fn renewal_due(sent: Timestamp, ttl: Duration, now: Timestamp, tick: Duration) -> bool {
    sent.saturating_add(ttl) < now.saturating_add(tick * 2 + tick / 2)
}
