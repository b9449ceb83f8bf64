//! Random traffic, parameter strategies and small helpers shared by the property tests.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate_core::{
    Decision, DelayMode, FixedWindow, Gcra, LeakyBucket, LogState, Outcome, SlidingLog,
    SlidingWindow, Timestamp, TokenBucket, WordAlgorithm,
};

/// A realistic Unix time in nanoseconds (14 November 2023).
pub const START: u64 = 1_700_000_000_000_000_000;

/// The proptest configuration of every property here: `cases` runs (or `PROPTEST_CASES`), nothing written to disk.
pub fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Converts a model's exact value to the `u64` a decision reports.
pub fn n64(x: impl TryInto<u64>) -> u64 {
    x.try_into().ok().expect("model value fits in u64")
}

/// The smallest `x` in `lo..=hi` for which `pred` holds, given that it holds at `hi` and stays true once true.
pub fn earliest(lo: u64, hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    assert!(
        lo <= hi && pred(hi),
        "search range {lo}..={hi} holds no answer"
    );
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The parts of a decision the models predict, all times in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Allowed, denied or exceeds.
    pub outcome: Outcome,
    /// The limit reported.
    pub limit: u64,
    /// Units left after the request.
    pub remaining: u64,
    /// Time until the key is fresh again.
    pub reset_after: u64,
    /// For a denied request, the exact wait until the same request passes.
    pub retry_after: Option<u64>,
    /// For an admitted request through a shaper, how long to hold it.
    pub delay: u64,
}

impl Seen {
    /// What a real decision says.
    pub fn of(d: &Decision) -> Self {
        Seen {
            outcome: d.outcome(),
            limit: d.limit(),
            remaining: d.remaining(),
            reset_after: d.reset_after_nanos(),
            retry_after: d
                .retry_after()
                .map(|r| u64::try_from(r.as_nanos()).expect("retry fits in u64")),
            delay: d.delay_nanos(),
        }
    }

    /// An admitted request (or a refund).
    pub fn allowed(limit: u64, remaining: u64, reset_after: u64) -> Self {
        Seen {
            outcome: Outcome::Allowed,
            limit,
            remaining,
            reset_after,
            retry_after: None,
            delay: 0,
        }
    }

    /// A request denied for now, which passes after `retry_after` ns.
    pub fn denied(limit: u64, remaining: u64, reset_after: u64, retry_after: u64) -> Self {
        Seen {
            outcome: Outcome::Denied,
            retry_after: Some(retry_after),
            ..Seen::allowed(limit, remaining, reset_after)
        }
    }

    /// A request that can never pass.
    pub fn exceeds(limit: u64, remaining: u64, reset_after: u64) -> Self {
        Seen {
            outcome: Outcome::Exceeds,
            ..Seen::allowed(limit, remaining, reset_after)
        }
    }

    /// The same answer with a shaper's delay.
    pub fn with_delay(self, delay: u64) -> Self {
        Seen { delay, ..self }
    }
}

/// Something that decides requests for one key and keeps that key's state.
pub trait Limiter {
    /// Decides a request of `cost` units at `now` (ns since the epoch).
    fn decide(&mut self, now: u64, cost: u64) -> Seen;
    /// Gives back `amount` units at `now`.
    fn refund(&mut self, now: u64, amount: u64) -> Seen;
}

/// A word algorithm together with one key's state, as a store would hold it.
#[derive(Clone, Debug)]
pub struct Keyed<A> {
    /// The algorithm.
    pub alg: A,
    /// The key's current state (0 when fresh).
    pub state: u64,
}

impl<A: WordAlgorithm> Keyed<A> {
    /// A fresh key of `alg`.
    pub fn new(alg: A) -> Self {
        Keyed { alg, state: 0 }
    }
}

impl<A: WordAlgorithm> Limiter for Keyed<A> {
    fn decide(&mut self, now: u64, cost: u64) -> Seen {
        let (d, new) = self
            .alg
            .decide(self.state, Timestamp::from_nanos(now), cost);
        if let Some(s) = new {
            self.state = s;
        }
        Seen::of(&d)
    }

    fn refund(&mut self, now: u64, amount: u64) -> Seen {
        let (d, new) = self
            .alg
            .refund(self.state, Timestamp::from_nanos(now), amount);
        if let Some(s) = new {
            self.state = s;
        }
        Seen::of(&d)
    }
}

/// A sliding log together with one key's log.
#[derive(Clone, Debug)]
pub struct Logged {
    /// The algorithm.
    pub log: SlidingLog,
    /// The key's log.
    pub state: LogState,
}

impl Logged {
    /// A fresh key of `log`.
    pub fn new(log: SlidingLog) -> Self {
        Logged {
            log,
            state: LogState::default(),
        }
    }
}

impl Limiter for Logged {
    fn decide(&mut self, now: u64, cost: u64) -> Seen {
        Seen::of(
            &self
                .log
                .decide(&mut self.state, Timestamp::from_nanos(now), cost),
        )
    }

    fn refund(&mut self, now: u64, amount: u64) -> Seen {
        Seen::of(
            &self
                .log
                .refund(&mut self.state, Timestamp::from_nanos(now), amount),
        )
    }
}

/// The time scales of one configuration, which the random gaps are measured in.
#[derive(Clone, Copy, Debug)]
pub struct Scales {
    /// One unit's interval, or one window.
    pub short: u64,
    /// A full refill, or a few windows.
    pub long: u64,
}

impl Scales {
    /// Scales for a meter of `capacity` units refilled `count` per `period_ns`.
    pub fn meter(capacity: u64, count: u64, period_ns: u64) -> Self {
        let short = period_ns.div_ceil(count);
        Scales {
            short,
            long: short * capacity,
        }
    }

    /// Scales for windows of `window_ns`.
    pub fn window(window_ns: u64) -> Self {
        Scales {
            short: window_ns,
            long: 2 * window_ns,
        }
    }
}

/// How far the clock moves before an operation.
#[derive(Clone, Copy, Debug)]
pub enum Gap {
    /// No time passes.
    Zero,
    /// A few nanoseconds.
    Nanos(u64),
    /// Thousandths of the short scale (sub-interval up to a few intervals).
    Scaled(u64),
    /// A long idle: whole long scales plus thousandths of one.
    Idle(u64, u64),
    /// To the last denial's retry-after, moved by `d − 1` ns.
    Retry(u8),
    /// To the last decision's reset-after, moved by `d − 1` ns.
    Reset(u8),
    /// To the next epoch-aligned multiple of the short scale, moved by `d − 1` ns.
    Boundary(u8),
}

/// An amount of units, resolved against a configuration's capacity.
#[derive(Clone, Copy, Debug)]
pub enum Amount {
    /// One unit.
    One,
    /// `capacity + d − 1` units.
    Near(u8),
    /// `x mod (capacity + 3)` units: anything in `0..=capacity + 2`.
    Any(u64),
}

impl Amount {
    /// The number of units for a configuration of `capacity`.
    pub fn resolve(self, capacity: u64) -> u64 {
        match self {
            Amount::One => 1,
            Amount::Near(d) => (capacity + u64::from(d)).saturating_sub(1),
            Amount::Any(x) => x % (capacity + 3),
        }
    }
}

/// One operation of random traffic.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// A request after `gap`.
    Decide(Gap, Amount),
    /// A refund after `gap`.
    Refund(Gap, Amount),
}

/// One operation at its instant, with the amount resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A request of `cost` units at `now`.
    Decide { now: u64, cost: u64 },
    /// A refund of `amount` units at `now`.
    Refund { now: u64, amount: u64 },
}

impl Event {
    /// The instant of the event.
    pub fn now(&self) -> u64 {
        match *self {
            Event::Decide { now, .. } | Event::Refund { now, .. } => now,
        }
    }
}

/// The clock of one run, which never goes backwards.
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    now: u64,
    retry: u64,
    reset: u64,
}

impl Timeline {
    /// A timeline starting at `start`.
    pub fn new(start: u64) -> Self {
        Timeline {
            now: start,
            retry: 0,
            reset: 0,
        }
    }

    /// Moves the clock by `gap` and returns the new time.
    pub fn advance(&mut self, gap: Gap, scales: Scales) -> u64 {
        let now = u128::from(self.now);
        let short = u128::from(scales.short);
        let long = u128::from(scales.long);
        let target = match gap {
            Gap::Zero => now,
            Gap::Nanos(n) => now + u128::from(n),
            Gap::Scaled(per_mille) => now + short * u128::from(per_mille) / 1000,
            Gap::Idle(k, per_mille) => {
                now + long * u128::from(k) + long * u128::from(per_mille) / 1000
            }
            Gap::Retry(d) => (now + u128::from(self.retry) + u128::from(d)).saturating_sub(1),
            Gap::Reset(d) => (now + u128::from(self.reset) + u128::from(d)).saturating_sub(1),
            Gap::Boundary(d) => ((now / short + 1) * short + u128::from(d)).saturating_sub(1),
        };
        self.now = n64(target.max(now));
        self.now
    }

    /// Remembers the retry-after and reset-after of a decision, for later gaps.
    pub fn observe(&mut self, seen: &Seen) {
        if let Some(r) = seen.retry_after {
            self.retry = r;
        }
        self.reset = seen.reset_after;
    }
}

/// Runs `ops` from `start`, handing each event to `step`, which answers with the real decision.
pub fn drive(
    start: u64,
    scales: Scales,
    capacity: u64,
    ops: &[Op],
    mut step: impl FnMut(usize, Event) -> Result<Seen, TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut clock = Timeline::new(start);
    for (i, op) in ops.iter().enumerate() {
        let event = match *op {
            Op::Decide(gap, cost) => Event::Decide {
                now: clock.advance(gap, scales),
                cost: cost.resolve(capacity),
            },
            Op::Refund(gap, amount) => Event::Refund {
                now: clock.advance(gap, scales),
                amount: amount.resolve(capacity),
            },
        };
        let seen = step(i, event)?;
        clock.observe(&seen);
    }
    Ok(())
}

/// Sends `event` to `limiter`.
pub fn apply(limiter: &mut impl Limiter, event: Event) -> Seen {
    match event {
        Event::Decide { now, cost } => limiter.decide(now, cost),
        Event::Refund { now, amount } => limiter.refund(now, amount),
    }
}

/// Runs `ops` through `real` and `model` side by side and fails at the first differing answer.
pub fn compare(
    real: &mut impl Limiter,
    model: &mut impl Limiter,
    start: u64,
    scales: Scales,
    capacity: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    drive(start, scales, capacity, ops, |i, event| {
        let got = apply(real, event);
        let want = apply(model, event);
        prop_assert_eq!(
            got,
            want,
            "op #{} {:?}, {} ns after start",
            i,
            event,
            event.now() - start
        );
        Ok(got)
    })
}

/// Runs `ops` through `real` and returns the `(time, units)` of every admitted request that cost something.
pub fn admitted(
    real: &mut impl Limiter,
    start: u64,
    scales: Scales,
    capacity: u64,
    ops: &[Op],
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let mut out = Vec::new();
    drive(start, scales, capacity, ops, |_, event| {
        let seen = apply(real, event);
        if let Event::Decide { now, cost } = event
            && cost > 0
            && seen.outcome == Outcome::Allowed
        {
            out.push((now, cost));
        }
        Ok(seen)
    })?;
    Ok(out)
}

/// Sums admitted units per distinct instant, in time order.
pub fn per_instant(admitted: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(t, units) in admitted {
        match out.last_mut() {
            Some((last, sum)) if *last == t => *sum += units,
            _ => out.push((t, units)),
        }
    }
    out
}

/// A time gap.
pub fn gap() -> impl Strategy<Value = Gap> {
    prop_oneof![
        4 => Just(Gap::Zero),
        2 => (1u64..=3).prop_map(Gap::Nanos),
        6 => (0u64..=1500).prop_map(Gap::Scaled),
        1 => (1u64..=5, 0u64..1000).prop_map(|(k, pm)| Gap::Idle(k, pm)),
        2 => (0u8..=2).prop_map(Gap::Retry),
        1 => (0u8..=2).prop_map(Gap::Reset),
        2 => (0u8..=2).prop_map(Gap::Boundary),
    ]
}

/// A cost or refund amount, mostly one unit.
pub fn amount() -> impl Strategy<Value = Amount> {
    prop_oneof![
        5 => Just(Amount::One),
        2 => (0u8..=3).prop_map(Amount::Near),
        3 => (0u64..=22).prop_map(Amount::Any),
    ]
}

/// Random traffic of up to 80 operations, with occasional refunds when `refunds` is set.
pub fn ops(refunds: bool) -> BoxedStrategy<Vec<Op>> {
    let decide = (gap(), amount()).prop_map(|(g, a)| Op::Decide(g, a));
    let op = if refunds {
        prop_oneof![
            10 => decide,
            1 => (gap(), amount()).prop_map(|(g, a)| Op::Refund(g, a)),
        ]
        .boxed()
    } else {
        decide.boxed()
    };
    prop::collection::vec(op, 1..=80).boxed()
}

/// A start time: the realistic [`START`], or up to about three hours later.
pub fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(START),
        3 => (0u64..=10_000_000_000_000).prop_map(|off| START + off),
    ]
}

/// A window or refill period in nanoseconds, from a few ns (all rounding) to a few seconds.
pub fn period_ns() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => 1u64..=50,
        2 => prop::sample::select(vec![
            1_000_000u64,
            3_000_000,
            7_000_000,
            100_000_000,
            1_000_000_000,
            3_000_000_000,
        ]),
        3 => 1_000_000u64..=5_000_000_000,
    ]
}

/// `(capacity, count, period_ns)` for a token bucket or GCRA: `count` per period, never above one per ns.
pub fn meter_params() -> impl Strategy<Value = (u64, u64, u64)> {
    (1u64..=20, 1u64..=10, period_ns())
        .prop_map(|(cap, count, period)| (cap, count.min(period), period))
}

/// `(rate, period_ns, burst, mode)` for a leaky bucket.
pub fn leaky_params() -> impl Strategy<Value = (u64, u64, u64, DelayMode)> {
    (1u64..=10, period_ns(), 0u64..=20, 0u8..=2, 0u64..=20).prop_map(
        |(rate, period, burst, sel, after)| {
            let mode = match sel {
                0 => DelayMode::NoDelay,
                1 => DelayMode::Delay,
                _ => DelayMode::DelayAfter(after % (burst + 1)),
            };
            (rate.min(period), period, burst, mode)
        },
    )
}

/// `(limit, window_ns)` for a window algorithm; `min_limit` is 0 for the fixed window, 1 otherwise.
pub fn window_params(min_limit: u64) -> impl Strategy<Value = (u64, u64)> {
    (min_limit..=20, period_ns())
}

/// A token bucket of `cap` tokens, `count` per `period_ns`.
pub fn token_bucket(cap: u64, count: u64, period_ns: u64) -> TokenBucket {
    TokenBucket::new(cap, count, Duration::from_nanos(period_ns)).expect("valid token bucket")
}

/// A GCRA of `limit` per `period_ns` with bursts of `burst`.
pub fn gcra(burst: u64, limit: u64, period_ns: u64) -> Gcra {
    Gcra::new(limit, Duration::from_nanos(period_ns), burst).expect("valid GCRA")
}

/// A leaky bucket of `rate` per `period_ns`.
pub fn leaky_bucket(rate: u64, period_ns: u64, burst: u64, mode: DelayMode) -> LeakyBucket {
    LeakyBucket::new(rate, Duration::from_nanos(period_ns), burst, mode)
        .expect("valid leaky bucket")
}

/// A fixed window of `limit` per `window_ns`.
pub fn fixed_window(limit: u64, window_ns: u64) -> FixedWindow {
    FixedWindow::new(limit, Duration::from_nanos(window_ns)).expect("valid fixed window")
}

/// A sliding window counter of `limit` per `window_ns`.
pub fn sliding_window(limit: u64, window_ns: u64) -> SlidingWindow {
    SlidingWindow::new(limit, Duration::from_nanos(window_ns)).expect("valid sliding window")
}

/// A sliding log of `limit` per `window_ns`.
pub fn sliding_log(limit: u64, window_ns: u64) -> SlidingLog {
    SlidingLog::new(limit, Duration::from_nanos(window_ns)).expect("valid sliding log")
}
