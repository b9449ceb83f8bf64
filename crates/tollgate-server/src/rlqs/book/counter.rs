//! What the book keeps per shared rule counter (its rate, the Envoys reporting on it, what their shares prepaid) and per report read against the rules.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use tollgate_core::Timestamp;

use super::super::bucket::{Policy, Rate};
use super::super::payment::Balance;
use super::changes::BucketKey;
use super::stream::{Stream, StreamId};

/// A reported bucket read against the rules (before the book is locked).
pub(super) struct Reading {
    pub(super) id: BucketId,
    pub(super) key: BucketKey,
    pub(super) policy: Policy,
    /// Requests the report counts (allowed and denied).
    pub(super) arrived: u64,
    /// Of them, denied.
    pub(super) denied: u64,
    /// The time the report says it covers (Envoy's `time_elapsed`, whole
    /// seconds cut short; zero when absent).
    pub(super) elapsed: Duration,
}

/// A reporter of a shared bucket.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reporter {
    /// Its demand per window; `None` before a report that shows its rate
    /// ([`super::demand`]: the rate after a fall the report shows).
    pub(super) demand: Option<u64>,
    /// Its refusals per window over its last report's interval.
    pub(super) refused: u64,
    /// Whether its last report showed its share holding it back: it then
    /// claims the whole rate ([`super::demand`]).
    pub(super) hungry: bool,
    /// Since when the share in force has held (none while it has no
    /// share, or deny-all): only a report of an interval it spent with one
    /// share says what the split held back; before, it was refused by
    /// Envoy's `no_assignment_behavior`, a cut, or a share the service was
    /// still paying in (a cold start), and its average is its demand.
    pub(super) held_since: Option<Timestamp>,
    /// The share in force at that Envoy (last sent).
    pub(super) share: Option<u64>,
    /// The `max_tokens` of the token bucket in force at that Envoy (0: none,
    /// or deny-all): a grown share may go out with a smaller bucket than
    /// its full `⌊burst × s / R⌋`, raised at a later round once paid
    /// ([`super::changes`]).
    pub(super) tokens: u64,
    /// The share the split gives it; where it differs from `share`, a
    /// change waiting for its fresh bucket to be paid for (at a report, a
    /// close or a tick).
    pub(super) wanted: u64,
    /// Set once its stream ended while its Envoy may still enforce the
    /// share last sent (see [`Departed`]).
    pub(super) departed: Option<Departed>,
}

impl Reporter {
    /// Puts `share` in force at `now`, in token buckets of `tokens`.
    pub(super) fn set_share(&mut self, share: u64, tokens: u64, now: Timestamp) {
        self.tokens = if share == 0 { 0 } else { tokens.max(1) };
        if share == 0 {
            self.held_since = None;
        } else if self.share != Some(share) {
            self.held_since = Some(now);
        }
        self.share = Some(share);
    }
}

/// A reporter whose stream ended: its Envoy keeps enforcing the last
/// assignment it got until that assignment's time to live runs out (or it
/// reconnects; Envoy 1.40 then falls back to its `no_assignment_behavior`,
/// `reuse_last_assignment` or not), so its share stays in force — paid
/// every round, held out of the split — until then.
#[derive(Clone, Copy, Debug)]
pub(super) struct Departed {
    /// When the last assignment sent to it lapses.
    pub(super) until: Timestamp,
    /// Its buckets on the counter (each enforces the share).
    pub(super) buckets: u64,
}

/// A rule counter's budget and the Envoys sharing it.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) rate: Rate,
    pub(super) reporters: BTreeMap<StreamId, Reporter>,
    /// Units paid and not yet spent on fresh buckets or refills, in unit·ns ([`super::super::payment`]).
    pub(super) balance: Balance,
    /// The instant the refills of the shares in force are paid through
    /// (none before the first payment).
    pub(super) covered: Option<Timestamp>,
    /// The instant of the last round that paid them (none before one).
    pub(super) last_round: Option<Timestamp>,
    /// Held while the counter is in the book: a payment for it is owed only then.
    pub(super) owed: Arc<()>,
    /// The domain and a bucket (as a descriptor) of the latest report on
    /// this counter: what the service checks to take units of its budget.
    pub(super) domain: String,
    pub(super) entries: Vec<(String, String)>,
    /// What the Envoys of the other `tollgate serve` instances on the same
    /// store claim of this counter, one claim each (an instance of the
    /// earlier release: one of their total), sorted, as last heard from the
    /// claims board (empty: none, or no shared store); see [`super::fleet`].
    pub(super) fleet: Vec<u64>,
    /// What this instance may take of the counter while other instances'
    /// Envoys share it, in unit·ns: the rate their fair shares leave,
    /// accrued each round (at most a window's worth) and spent by the
    /// refills of its shares in force, then by its growths, which take no
    /// more than is left; see [`super::changes`]. Unused without other
    /// instances.
    pub(super) spare: u128,
}

#[derive(Debug, Default)]
pub(super) struct Inner {
    pub(super) streams: HashMap<StreamId, Stream>,
    pub(super) shared: HashMap<Vec<u8>, Shared>,
    pub(super) buckets: usize,
    pub(super) next: StreamId,
}
