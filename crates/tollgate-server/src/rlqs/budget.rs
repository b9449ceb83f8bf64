//! Paying for the quota service's shares from the shared budget: units taken by checking a bucket's descriptor through the engine, as an RLS caller's would be, in whichever store holds the counters.
//!
//! [`pay_and_apply`] pays for the fresh buckets of changed assignments
//! before they are sent; [`pay_every`] pays for the shares in force every
//! [`PAY_TICK`] (and tops the balances up half a tick before each round,
//! [`top_up`]), for the time that passed since the last round paid
//! through (see `book::changes` for what each covers, [`super::payment`]
//! for the arithmetic).
//!
//! The book's part of each runs on a blocking thread ([`with_book`]), and
//! the payments yield to the runtime every [`PAYMENTS_PER_YIELD`]: a tick
//! over tens of thousands of counters in memory never holds a worker for
//! long. A payment whose counter left the book meanwhile (its last stream
//! closed) is skipped.
//!
//! The engine decides in memory, on Redis, or from this instance's leases
//! (it picks, as for RLS). Every limit the descriptor matches is charged, so
//! a rule with several limits stays all-or-nothing.
//!
//! A fixed window counts a denied request's hits (upstream's counting), so
//! asking for more than remains would spend the window for everyone. The
//! take therefore first reads what remains with a check that consumes
//! nothing (hits 0), then asks for at most that; if another caller spent it
//! in between, the take is denied and counts 0 units for the share (the
//! strict side: the others may lose those units, nobody gains any). When
//! the store fails, the rule's `on_store_error` answers for it as it does
//! for RLS callers: with `deny` a share gets nothing; with `allow` or
//! `local` it is handed out as if paid (the budget is not shared while the
//! store is down, for anyone).

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Clock, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest, RateLimitResponse};

use crate::engine::StoreAnswer;

use super::book::{CLAIM_TTL, Changes, Payment, QuotaBook};
use super::off_runtime::with_book;
use crate::engine::{Engine, EngineError};
use crate::reload::LiveEngine;

/// How often the shares in force are paid for from the shared budget.
pub const PAY_TICK: Duration = Duration::from_secs(1);

/// Payments taken between two yields to the runtime (each is one or two
/// decisions, a few microseconds in memory).
pub const PAYMENTS_PER_YIELD: usize = 16;

/// Pays every shared counter's shares in force, at `now`, from the instant
/// the last round paid through to a `tick` ahead ([`QuotaBook::dues`]); the
/// shares the units do not cover are cut ([`QuotaBook::settle`]) and sent.
pub async fn pay_round<C: Clock>(
    engine: &LiveEngine<C>,
    book: &Arc<QuotaBook>,
    now: Timestamp,
    tick: Duration,
) {
    exchange_claims(engine, book, now).await;
    let dues = with_book(book, move |book| book.dues(now, tick)).await;
    let taken = take_all(engine, &dues.payments).await;
    let cuts = with_book(book, move |book| book.settle(dues, &taken)).await;
    pay_and_apply(engine, book, cuts).await;
}

/// Pays for the shares in force every `tick`, from now on (the first
/// round at once), each round at the time `clock` reads; a round that runs
/// late delays the next and pays for the time that passed.
///
/// `clock` must follow the time the Envoys' token buckets refill in, real
/// elapsed time (`tollgate serve` gives a [`tollgate_core::MonotonicClock`]):
/// not the decisions' clock, which holds still for as long as the wall
/// clock was stepped back, while the Envoys' buckets go on refilling.
///
/// After the first, the rounds run at one phase of each whole tick of
/// `clock` (a monotonic clock anchored to the wall clock, so of each
/// second), in its middle quarter ([`round_phase`], [`next_at_phase`]): a
/// fixed window of a second or more starts on a whole second, so a round
/// that runs up to 3/8 of a tick early or late still pays in the window it
/// was meant for. At any phase, a round delayed past a window's
/// end and the next one on time would both pay in one window, and that
/// window's other rounds (of this instance or another) would come short and
/// cut shares in use though the counter pays every share in force each
/// second. The phase differs between instances (it follows the book's
/// random id), so that their reads and takes of the counter seldom meet.
pub async fn pay_every<C: Clock, R: Clock>(
    engine: Arc<LiveEngine<C>>,
    book: Arc<QuotaBook>,
    tick: Duration,
    clock: R,
) {
    let phase = round_phase(book.instance(), tick);
    loop {
        pay_round(&engine, &book, clock.now(), tick).await;
        let now = clock.now();
        let next = next_at_phase(now, tick, phase);
        // Half a tick before the next round, a top-up ([`top_up`]).
        let half = u64::try_from((tick / 2).as_nanos()).unwrap_or(u64::MAX);
        let top_up_at = Timestamp::from_nanos(next.as_nanos().saturating_sub(half));
        if top_up_at > now {
            tokio::time::sleep(top_up_at.saturating_since(now)).await;
            top_up(&engine, &book, clock.now(), tick).await;
        }
        let now = clock.now();
        tokio::time::sleep(next.saturating_since(now)).await;
    }
}

/// Takes half a `tick` of the refills of the shares in force into each
/// counter's balance, at `now` between two rounds
/// ([`QuotaBook::top_up`]): a counter that holds about one tick of its
/// rate (a token bucket whose burst is a window of it) then never reaches
/// its cap between rounds, and a late round finds what it owes.
pub async fn top_up<C: Clock>(
    engine: &LiveEngine<C>,
    book: &Arc<QuotaBook>,
    now: Timestamp,
    tick: Duration,
) {
    let dues = with_book(book, move |book| book.top_up(now, tick)).await;
    let taken = take_all(engine, &dues.payments).await;
    with_book(book, move |book| book.credit(dues, &taken)).await;
}

/// The phase of an instance's rounds within each `tick`: in its middle quarter, by the instance's id.
pub fn round_phase(instance: u64, tick: Duration) -> Duration {
    let quarter = u64::try_from(tick.as_nanos() / 4)
        .unwrap_or(u64::MAX)
        .max(1);
    tick * 3 / 8 + Duration::from_nanos(instance % quarter)
}

/// The first instant after `now` that is `phase` past a whole number of ticks.
pub fn next_at_phase(now: Timestamp, tick: Duration, phase: Duration) -> Timestamp {
    let tick = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
    let phase = u64::try_from(phase.as_nanos()).unwrap_or(u64::MAX) % tick;
    let at = now.as_nanos();
    let next = at - at % tick + phase;
    Timestamp::from_nanos(if next > at {
        next
    } else {
        next.saturating_add(tick)
    })
}

/// With the counters in Redis, publishes what each of this instance's
/// Envoys claims of each shared counter on the claims board and hears the
/// other instances' Envoys' claims ([`super::book`]'s fleet split); the shares that fall
/// are paid and sent at once. Nothing without a shared store; a board that
/// cannot be reached leaves the claims last heard (the split's fairness
/// waits, the limit does not: every share is still paid from the counter).
async fn exchange_claims<C: Clock>(engine: &LiveEngine<C>, book: &Arc<QuotaBook>, now: Timestamp) {
    let Some(redis) = engine.engine().remote().and_then(|remote| remote.redis()) else {
        return;
    };
    let claims = with_book(book, QuotaBook::claims).await;
    if claims.is_empty() {
        return;
    }
    let Ok(others) = redis
        .exchange_claims(book.instance(), CLAIM_TTL, &claims)
        .await
    else {
        return;
    };
    let heard: Vec<(Vec<u8>, Vec<u64>)> = claims
        .into_iter()
        .map(|(counter, _)| counter)
        .zip(others)
        .collect();
    let changes = with_book(book, move |book| book.hear(heard, now)).await;
    pay_and_apply(engine, book, changes).await;
}

/// Takes what `changes` cost and sends them ([`QuotaBook::apply`]).
pub async fn pay_and_apply<C: Clock>(
    engine: &LiveEngine<C>,
    book: &Arc<QuotaBook>,
    changes: Changes,
) {
    let taken = take_all(engine, &changes.payments).await;
    with_book(book, move |book| book.apply(changes, &taken)).await;
}

/// Takes each payment's units (none for a counter no longer in the book); the units each got.
async fn take_all<C: Clock>(engine: &LiveEngine<C>, payments: &[Payment]) -> Vec<u64> {
    let engine = engine.engine();
    let mut taken = Vec::with_capacity(payments.len());
    for (i, payment) in payments.iter().enumerate() {
        if i % PAYMENTS_PER_YIELD == PAYMENTS_PER_YIELD - 1 {
            tokio::task::yield_now().await;
        }
        let units = if payment.is_owed() {
            take_units(&engine, &payment.domain, &payment.entries, payment.units).await
        } else {
            0
        };
        taken.push(units);
    }
    taken
}

/// Takes up to `units` of the budget of `entries` in `domain`; the units taken.
pub async fn take_units<C: Clock>(
    engine: &Engine<C>,
    domain: &str,
    entries: &[(String, String)],
    units: u64,
) -> u64 {
    if units == 0 {
        return 0;
    }
    let ask = |hits: u64| RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![Descriptor {
            entries: entries.to_vec(),
            hits_addend: Some(hits),
            ..Descriptor::default()
        }],
        hits_addend: 0,
    };
    // With the store failing, each answer is the rule's `on_store_error`
    // one, as an RLS caller's: `allow` and `local` hand the share out as if
    // paid (`local` counts it in memory), `deny` takes nothing. The read of
    // what remains counts nothing, so where it fails the take is asked once
    // for its own answer.
    let remaining =
        match answer(engine, &ask(0)).await {
            Ok(StoreAnswer::Counted(response)) if passed(&response) => remaining(&response),
            Ok(StoreAnswer::StoreFailed { .. }) => {
                return match answer(engine, &ask(units)).await {
                    Ok(
                        StoreAnswer::Counted(r) | StoreAnswer::StoreFailed { on_store_error: r },
                    ) if passed(&r) => units,
                    _ => 0,
                };
            }
            _ => 0,
        };
    let units = units.min(remaining);
    if units == 0 {
        return 0;
    }
    match answer(engine, &ask(units)).await {
        Ok(StoreAnswer::Counted(r) | StoreAnswer::StoreFailed { on_store_error: r })
            if passed(&r) =>
        {
            units
        }
        _ => 0,
    }
}

/// The engine's answer to `ask`, counted or given by `on_store_error`.
async fn answer<C: Clock>(
    engine: &Engine<C>,
    ask: &RateLimitRequest,
) -> Result<StoreAnswer, EngineError> {
    Ok(engine.check(ask)?.store_answer().await)
}

/// What remains of the tightest limit a response reports (none: nothing limits it).
fn remaining(response: &RateLimitResponse) -> u64 {
    response
        .statuses
        .iter()
        .filter(|s| s.current_limit.is_some())
        .map(|s| u64::from(s.limit_remaining))
        .min()
        .unwrap_or(u64::MAX)
}

/// Whether every limit passed, and not only by shadow mode (a rule's or the global one).
fn passed(response: &RateLimitResponse) -> bool {
    response.overall == Code::Ok
        && response
            .statuses
            .iter()
            .all(|s| s.code == Code::Ok && !s.shadowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_run_at_their_phase_in_the_middle_quarter_of_each_tick() {
        let at = |millis: u64| Timestamp::from_millis(1_000_000 + millis);
        let half = Duration::from_millis(500);
        assert_eq!(next_at_phase(at(0), PAY_TICK, half), at(500));
        assert_eq!(next_at_phase(at(499), PAY_TICK, half), at(500));
        // At the phase, or past it: the next second's.
        assert_eq!(next_at_phase(at(500), PAY_TICK, half), at(1_500));
        assert_eq!(next_at_phase(at(980), PAY_TICK, half), at(1_500));
        for instance in [0, 1, 499_999_999, 500_000_000, u64::MAX] {
            let phase = round_phase(instance, PAY_TICK);
            assert!(
                (Duration::from_millis(375)..Duration::from_millis(625)).contains(&phase),
                "{phase:?}"
            );
        }
    }
}
