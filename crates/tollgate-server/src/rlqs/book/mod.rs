//! The quota book: every bucket the connected Envoys report, each shared bucket's rate split among its reporters, and the assignments to send when the split changes.
//!
//! A stream reports usage per bucket; the book reads each bucket id against
//! the rules ([`super::bucket`]) and, for a shared bucket (same rule
//! counter, any number of Envoys), records the reporter's demand per window
//! `d = (allowed + denied) × W / max(elapsed, 1 s)`, `elapsed` on the
//! service's clock since that Envoy's last report of the bucket, or the
//! report's own `time_elapsed` if that is longer (Envoy 1.40 truncates it
//! to whole seconds; a report read late leaves the next a short gap here),
//! and splits the rate
//! max-min fairly ([`tollgate_core::fair_share`]; the claims and the part
//! of the rate left in the counter: `QuotaBook::rebalance`). Each Envoy
//! gets a token bucket of its share `s`: `max_tokens = ⌊burst × s / R⌋`
//! (at least 1; less for a grown share until its full bucket is paid),
//! `tokens_per_fill = ⌊s × F / W⌋` every `F = ⌈W⌉` whole
//! seconds (Envoy 1.40 reads the fill interval in whole seconds), so its
//! rate is at most `s` per window.
//!
//! Every change of a share is sent once its fresh bucket is paid for from
//! the shared budget ([`Changes`]): a fall at once, a growth at the next
//! payment round that pays its extra refills and a fresh bucket of two
//! tokens or more (or within a tenth of its rate when the round pays
//! less; its full bucket, `max_tokens` above, follows at a later round
//! once paid); a share at deny-all is retried as a first assignment; a move of less than a tenth (of
//! the share, or of an equal part), up or down, keeps the assignment in
//! force ([`tollgate_core::fair_share::steady_shares`]; Envoy keeps a token
//! bucket's state only while its settings stay the same, and restarts it
//! full on a change). So the rates in force never sum past the rule's, and
//! an Envoy whose outbox is full (a client not reading) catches up at its
//! next report. Every report is answered with the reporter's assignments,
//! which renews their time to live, and every payment round sends a
//! stream's assignments again, unchanged, before they would lapse
//! (`renewal`): a time to live shorter than Envoy's 5 s report interval
//! holds on a live stream. A stream that ends gives its shares
//! back: its prepaid refills return to the balance, and the others grow at
//! the next round.
//!
//! Every operation costs in proportion to what it changes, never to a
//! stream's buckets times its changes: a report reads its buckets against
//! the rules before the book is locked, and each stream indexes its
//! buckets by counter (`Stream::on_counter`), so how many of its buckets
//! share a counter, and which, is one lookup.

mod changes;
mod counter;
mod demand;
mod dues;
mod envoy_bucket;
mod fleet;
mod options;
mod quota_book;
mod renewal;
mod stream;
mod top_up;

pub use changes::Changes;
pub use dues::{Dues, Payment};
pub use fleet::{CLAIM_TTL, fleet_split};
pub use options::{
    DEFAULT_ASSIGNMENT_TTL, DEFAULT_MAX_BUCKETS, DEFAULT_MAX_STREAM_BUCKETS, RlqsOptions, RlqsStats,
};
pub use quota_book::QuotaBook;
pub use stream::{Outbox, StreamId};

#[cfg(test)]
mod tests;
