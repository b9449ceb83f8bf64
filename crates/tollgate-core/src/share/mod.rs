//! Shares: a key's token bucket split between the instances that use it, each deciding locally within its part, rebalanced by demand in batched calls.
//!
//! A fleet of instances (the *holders*) enforces one token bucket per key,
//! rate `r` and burst `b`, kept by one *authority* (the store). Instead of
//! one store call per request (exact) or per lease, each holder `i` holds a
//! *share* `(rᵢ, bᵢ)` of the key and decides requests against its own
//! sub-bucket of that share, with no call, while its demand fits. The
//! authority keeps, per key, the *pool* — the unallocated part, itself a
//! token bucket of `(r − Σ rᵢ, b − Σ bᵢ)` with a level refilled lazily —
//! and the *bookings* `rᵢ, bᵢ` with each holder's reported demand; and the
//! *membership*: per holder an incarnation and a registration expiry.
//!
//! # The protocol
//!
//! * [`Holder`] (`holder.rs`): sub-buckets, demand per key (arrivals,
//!   admitted or not, smoothed over periods), a dirty list, at most one call
//!   in flight; a call every sync interval (a heartbeat), sooner (after the
//!   batch interval) when a request waits for a key's first share or a
//!   shrink waits to be booked. A key is reported when first used, when its
//!   demand leaves a band around the last reported (`> 2d + 1/s` or
//!   `< (d − 1/s)/2`), when shrunk, and when released after being idle.
//! * [`Authority`] (`authority.rs`): takes a call, books what it reports,
//!   recomputes the key's targets and grants toward the caller's target what
//!   the pool has; holders whose target changed hear it at their next call.
//! * The messages (`message.rs`): one [`SyncCall`] carries many keys, one
//!   [`SyncReply`] answers them.
//! * Starter slots ([`StarterPolicy`], `starter.rs`, off by default): every
//!   key keeps `S` small parts `s(ℓ)` of its limit out of its pool (the
//!   *reserve* `R(ℓ) = S·s(ℓ)`); each of the first `S` registered holders
//!   owns one slot and adds `s(ℓ)` to its sub-bucket of every key, so a
//!   key's first use there is decided at once, with no call.
//!
//! # The split
//!
//! A holder wants `wᵢ = max(h·dᵢ, f)`: `h` times its demand `dᵢ` (`h` = the
//! headroom, 2 by default) and at least the floor `f = r / (m·k)` for `m`
//! registered members (`k` = 2 by default; a newcomer, whose demand is not
//! known yet, wants `f`). The rates are split max-min fair by
//! [`fair_shares`](crate::fair_share::fair_shares) with the leftover
//! unassigned: a holder wanting less than an equal part of what is left
//! gets all it wants, the others split the rest equally (so noise in the
//! demands of busy holders does not move their shares); a booking within a
//! tenth of its fair share is kept while the targets then still fit in the
//! limit (otherwise all fall to their fair shares, so no holder is kept
//! below its share by the others' hysteresis); bursts follow rates in
//! proportion. What nobody wants
//! stays in the pool, so a newcomer's first call is granted at once from it
//! (and its tokens) rather than waiting for the others to shrink. Targets
//! are wishes: a grant is at most what the pool has, so targets never
//! decide safety.
//!
//! # The rules that keep the fleet inside the limit
//!
//! 1. **Grant before use.** The authority books a grant (the pool's rate
//!    and capacity fall, at most the granted burst leaves its level as
//!    tokens) before replying; the holder puts it in force on receipt.
//! 2. **Shrink before release.** A holder shrinks its sub-bucket (tokens
//!    above the new capacity leave it) before the call that reports it; the
//!    authority returns the difference to the pool on receipt, with the
//!    tokens the call carried.
//! 3. **The holder's word on what is in force.** Each report carries what
//!    the holder has in force; the authority books `min(booked, in force)`
//!    and returns the rest (a grant whose reply was lost) with no tokens. A
//!    holder accepts only the reply to its latest call, so nothing booked
//!    before that call can still come into force.
//! 4. **Lapse returns capacity with 0 tokens.** A holder uses its shares
//!    only until `t_send + ttl − margin` of its last call the authority
//!    took; the authority reclaims a registration at `t_receipt + ttl ≥`
//!    that deadline. A SIGKILLed or partitioned holder's shares therefore
//!    come back after they stop being used, never while they still can be.
//!    A call from a holder whose registration was reclaimed is answered
//!    *lapsed* (only a holder with no registration may register), and the
//!    holder drops every share: a late heartbeat cannot revive shares the
//!    pool already took back.
//! 5. **A starter slot has one owner, whose part of every key starts
//!    empty.** Every pool keeps the reserve out (`pool + Σ booked + R ≤
//!    ℓ`). The authority gives a slot to one registered holder at a time
//!    and frees it only when that registration ends (reclaim, leave, a new
//!    incarnation: after the owner's last possible use, by rule 4). The
//!    owner puts the slot's part of a key in force from when it heard of
//!    the slot, at level 0 then, refilling at `s(ℓ).rate`; it forgets a key
//!    decided on that part alone only when the part is full, so a key it
//!    meets again starts at most at the level the part had meanwhile. Its
//!    reports carry only the booked part as in force; the slot's part
//!    leaves with the registration (and any call of a holder that left).
//!
//! # Why no admitted stream can pass the limit
//!
//! Let `C(t)` be the level of an exact bucket `(r, b)`, full at the start,
//! fed only the admitted requests, each at the time it was decided; and let
//! `L(t)` be the pool's level plus every holder's level plus the tokens in
//! flight in messages, where a slot owner that keeps no state for the key
//! counts its slot's part as a bucket of `s(ℓ)` starting at 0 when it heard
//! of the slot (or at the full level it had when forgotten), refilled and
//! capped like any other. Then `L ≤ C` at all times, by induction:
//!
//! * At the start the pool is full and alone: `L = b = C`.
//! * An admission of `c` from holder `i` needs `ℓᵢ ≥ c`; `L` and `C` both
//!   fall by `c`, and `C ≥ L ≥ ℓᵢ ≥ c`, so the exact bucket admits it too.
//! * Moving tokens (grant, release, return) never adds to `L`; a lost
//!   message or a lapse only removes from it. Putting a slot's part of a
//!   key into a sub-bucket moves the counted bucket there, at most its
//!   level (rule 5); a new owner's parts enter at 0.
//! * Over a time step `Δ`, each bucket gains at most `rate·Δ` and stays at
//!   most its capacity. In force at any instant, `r_pool + Σ rᵢ + Σ
//!   owned slots' s(ℓ).rate ≤ r` (rules 1–5: a rate enters force only
//!   after it left the pool, and returns to the pool only after it left
//!   force; the reserve never enters the pool, and a slot is in force at
//!   one owner at most), so `L` gains at most `r·Δ`; and `b_pool + Σ bᵢ +
//!   Σ owned slots' s(ℓ).burst + capacity in flight ≤ b` with the tokens in flight at
//!   most the capacity in flight (a grant moves at most the burst it
//!   grants; a shrink hands back at most the capacity it gives up), so
//!   `L ≤ b`. Hence `L(t+Δ) ≤ min(C(t) + r·Δ, b) = C(t+Δ)`.
//!
//! So the exact bucket would admit every request the fleet admits:
//! over-admission is 0, whatever the delays, losses, crashes and store
//! errors (a holder that cannot reach the store keeps deciding within its
//! shares until its deadline, then has nothing). The price is
//! under-admission: tokens stranded in one holder's sub-bucket while another
//! is empty, shares lost with a message until the next call, and capacity
//! kept from a lapsed holder until its registration ends.
//!
//! Times are the injected clock's ([`Timestamp`](crate::Timestamp)); the
//! argument assumes the holders' and the authority's clocks advance at the
//! same rate within the margin. [`ConformanceChecker`] is the exact bucket
//! of the argument, used by the tests and the simulator to count what the
//! fleet admitted that it would not have.

mod authority;
mod bucket;
mod holder;
#[cfg(test)]
mod interleavings;
mod message;
mod starter;
#[cfg(test)]
mod starter_tests;
#[cfg(test)]
mod tests;

pub use authority::{Authority, AuthorityPolicy, BookRecord, HoldingRecord, MemberRecord};
pub use bucket::{ConformanceChecker, MILLI_PER_TOKEN, PICO_PER_TOKEN, Share, ShareBucket};
pub use holder::{Holder, HolderPolicy, LEAVE_KEYS_PER_CALL, Verdict};
pub use message::{HolderId, KeyAnswer, KeyReport, Leaving, SyncCall, SyncReply};
pub use starter::StarterPolicy;
