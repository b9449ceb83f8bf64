//! The decision engine: RLS v3 requests in, one status per descriptor out.
//!
//! It decides on the protocol crate's plain-Rust RLS model
//! ([`tollgate_protocol::rls::model`]), so the gRPC and HTTP layers only map
//! their wire types onto it. Its one verb, [`Engine::check`], answers with
//! envoyproxy/ratelimit's semantics:
//!
//! * An unknown domain or an unmatched descriptor is OK with no limit and
//!   `limit_remaining` 0; an `unlimited` rule is OK with `limit_remaining`
//!   `u32::MAX` and touches no counter. `replaces` is resolved across the
//!   whole request ([`RuleSet::resolve`](tollgate_rules::RuleSet::resolve)).
//! * Hits: the descriptor's `hits_addend` when present (0 checks without
//!   consuming), else the request's `hits_addend`, where 0 means 1.
//!   `is_negative_hits` gives the hits back instead of consuming them, and is
//!   always OK.
//! * A descriptor `limit` override counts in a fixed window of
//!   `requests_per_unit` per `unit × unit_multiplier` (only in a known
//!   domain, as upstream), with no name and no shadow mode.
//! * Every limit of the matched rule is checked; the descriptor is
//!   OVER_LIMIT when any of them denies. The status reports the most
//!   restrictive limit: a denying one (one that can never pass first, then
//!   the longest `retry_after`), else the one with the least remaining
//!   (the first on ties).
//! * When one limit denies, what the other limits of the same descriptor
//!   consumed in this call is given back, so a denied request costs nothing
//!   against them. Fixed-window limits are the exception: like upstream they
//!   count denied requests, so they keep the hits (and a fixed window that
//!   denies keeps them too). Between the check and the give-back another
//!   call may see the hits as consumed; it errs on the strict side.
//! * A `shadow_mode` rule that is over the limit reports OK (remaining stays
//!   0, `current_limit` kept, no `retry_after`); global shadow mode makes the
//!   overall code OK and leaves the statuses as they are. The overall code
//!   is OVER_LIMIT when any status is, and never UNKNOWN.
//!
//! A request is first *planned*: every counter it touches (key, algorithm,
//! hits, and its descriptor as the all-or-nothing group). The counters then
//! go to the store behind the [`CounterStore`](tollgate_store::CounterStore)
//! interface in one batch, and the decisions become statuses.
//!
//! * In memory ([`Engine::new`]), [`Engine::check`] answers at once
//!   ([`Decided::Ready`]); the batch is
//!   [`MemoryCounters`](tollgate_store::MemoryCounters): one
//!   `MemoryStore` per distinct algorithm, built when the engine is, so the
//!   hot path takes no lock; [`Engine::with_rules`] keeps the stores of
//!   algorithms that still exist, so counters survive a reload, and keeps
//!   the stores of algorithms that went away for a while in case they come
//!   back (a rule missing from a half-written file). A limit whose rate
//!   alone changed (same algorithm and window) is another algorithm with
//!   its own store, and its counters are copied into it, re-encoded, so the
//!   count carries on as upstream's does (its keys ignore the limit); another
//!   window or algorithm starts from a fresh counter. Overrides create their
//!   stores on first use, under a read-mostly lock.
//! * In Redis ([`Engine::with_remote`]), [`Engine::check`] hands back the
//!   store's call ([`Decided::NeedsStore`]); awaited, the batch is one
//!   script call, and its [`StoreAnswer`] says whether the store counted the
//!   request or failed and each rule's `on_store_error` answered (see
//!   [`crate::store`]). [`Engine::decide`] is the verb with the call awaited,
//!   whatever the store. A rule with a lease period (its
//!   `lease`, else `--lease-period`) is answered from this instance's quota
//!   leases when they cover the whole request, with no call at all.
//!   Descriptor `limit` overrides are always exact.

mod check;
mod error;
mod limit_history;
mod options;
mod overrides;
mod plan;
mod response;
mod setup;
mod status;
mod store_call;
mod upstream_keys;

pub use check::Decided;
pub use error::EngineError;
pub use options::EngineOptions;
pub use setup::Engine;
pub use store_call::{STORE_DOWN_RETRY_AFTER, StoreAnswer, StoreCall};
pub use upstream_keys::keeps_own_keys;
