//! The messages between holders and the authority: one call carries many keys, one reply answers them.
//!
//! A holder has at most one call in flight. The authority answers a call
//! with one reply; the holder accepts only the reply to its latest call
//! (same incarnation and sequence number), so a late reply, or one to a
//! call it gave up on, changes nothing. A lost call or reply only loses the
//! tokens it carried (they are never created twice) and leaves capacity
//! booked to the holder until the holder's next call reports what it has in
//! force.

use super::{Share, StarterPolicy};

/// Who a holder is: an instance id, stable for its life.
pub type HolderId = u64;

/// One batched call from a holder to the authority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncCall<K> {
    /// The calling holder.
    pub holder: HolderId,
    /// Bumped whenever the holder dropped all its shares (a lapse): the
    /// authority then reclaims whatever it still books to an older one.
    pub incarnation: u64,
    /// Bumped by every call; the authority ignores a call older than the
    /// last one it answered.
    pub seq: u64,
    /// The holder has no registration (its first call, or its first since
    /// a lapse): only such a call may register it. Any other call from a
    /// holder the authority does not know is answered `lapsed`.
    pub registering: bool,
    /// Whether the call is part of the holder's leave.
    pub leaving: Leaving,
    /// The keys this call is about.
    pub reports: Vec<KeyReport<K>>,
}

/// Whether a call is part of a holder's leave (a graceful shutdown).
///
/// A leave gives back every key the holder holds. A leave of more keys
/// than one call should carry is split over several calls, sent one after
/// the other: each [`Leaving::Part`] gives back the keys it reports and
/// leaves the registration in place, and the [`Leaving::Last`] one ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaving {
    /// An ordinary call.
    No,
    /// A part of a leave: it only gives back the keys it reports (no
    /// grant, no answer, no starter slot, and it never registers).
    Part,
    /// The leave's last call: gives back the keys it reports, then ends the
    /// registration (its starter slot with it).
    Last,
}

/// What a holder says about one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyReport<K> {
    /// The key.
    pub key: K,
    /// The key's whole limit, from the holder's configuration.
    pub limit: Share,
    /// The share the holder has in force now (already shrunk, if it shrank).
    pub in_force: Share,
    /// Pico-tokens the holder removed from its bucket when it shrank, handed back to the pool.
    pub returned: u128,
    /// The holder's demand for the key in milli-tokens per second
    /// (arrivals, admitted or not); `None` before it has measured any.
    pub demand: Option<u64>,
    /// The holder is done with the key (`in_force` is zero): forget it.
    pub release: bool,
}

/// The authority's reply to one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncReply<K> {
    /// The holder called.
    pub holder: HolderId,
    /// The call's incarnation.
    pub incarnation: u64,
    /// The call's sequence number.
    pub seq: u64,
    /// Whether the authority took the call (false: it was older than one
    /// already answered, or the holder's registration has lapsed).
    pub accepted: bool,
    /// The authority reclaimed the holder's registration (its shares are
    /// back in the pools): the holder must drop every share it holds.
    pub lapsed: bool,
    /// The holder owns a starter slot under this policy: it may add one
    /// slot's part of every key to its own, starting empty on receipt.
    pub starter: Option<StarterPolicy>,
    /// One answer per reported key (except released ones), plus keys whose target changed.
    pub answers: Vec<KeyAnswer<K>>,
}

/// The authority's word on one key to one holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAnswer<K> {
    /// The key.
    pub key: K,
    /// What the authority books to the holder now: the holder may put this in force on receipt.
    pub booked: Share,
    /// What the holder should hold: if below `booked`, it shrinks to it and reports.
    pub target: Share,
    /// Pico-tokens moved from the pool with a grant (at most the burst granted by this answer).
    pub tokens: u128,
    /// The pool has at least a sixteenth of the key's rate that nobody holds: a holder that runs out should say so.
    pub spare: bool,
}
