//! The clients of a closed-loop lane: what they do with a 429 (retry at once, honour Retry-After with jitter, throttle themselves), in virtual time.
//!
//! A lane whose [`ClientBehavior`] is not `Once` feeds refusals back as
//! arrivals: a refused request comes back after the behaviour's wait, as a
//! new decision on the same limit, until it passes or has been retried
//! `max_retries` times (then the client gives up). The waits come from
//! `tollgate-client`, the library an application would use:
//!
//! * *retry at once*: a fixed short wait, ignoring `Retry-After`;
//! * *honour Retry-After*: [`RetryJitter::delay`] with the client's default,
//!   the server's wait `T` spread over `[T, 2T]`, and then the client's
//!   [`Pacer`] (one per client key, fed every answer's remaining, reset,
//!   limit and window): once the limit said nothing remains, retries leave
//!   no faster than the limit admits (`window / limit` apart) until a window
//!   after the reset. New requests are the scenario's offered load and are
//!   not paced;
//! * *Retry-After plus additive jitter*: [`RetryJitter::Additive`], the
//!   server's wait plus `U(0, 100 ms · 2ⁿ)`, no pacing (the client before
//!   proportional jitter and pacing);
//! * *adaptive*: as *honour Retry-After*, behind an [`AdaptiveThrottle`] per client key,
//!   which drops a new request before it is sent with the SRE book's
//!   probability; a dropped request is not retried.
//!
//! Retries are kept in a heap ordered by time, and decided in time order
//! between the scenario's own arrivals. The jitter and the throttle's draws
//! come from one generator seeded by the scenario's seed, so a run is
//! repeatable.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tollgate_client::{AdaptiveThrottle, ExponentialBackoff, Pacer, RetryJitter, ServerHints};
use tollgate_core::{Decision, Timestamp};

use super::ClientBehavior;

/// A refused request waiting to be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Retry {
    /// When it is sent again (virtual nanoseconds).
    pub(super) at_ns: u64,
    /// Its position in the run (the original arrival's index).
    pub(super) arrival: u64,
    /// Its client (key).
    pub(super) client: u64,
    /// The retry's number, from 1.
    pub(super) attempt: u32,
    /// Whether `at_ns` is a start its client's pacer already gave it.
    pub(super) paced: bool,
}

/// What a closed-loop lane's clients do, and what they did this tick and in all.
#[derive(Debug)]
pub(super) struct ClientSide {
    behavior: ClientBehavior,
    jitter: RetryJitter,
    throttles: HashMap<u64, AdaptiveThrottle>,
    pacers: HashMap<u64, Pacer>,
    /// The run's start (virtual time 0) and the limit's window, for the pacers.
    start: Timestamp,
    window: Duration,
    rng: ChaCha8Rng,
    pending: BinaryHeap<Reverse<Retry>>,
    /// Retries sent (decided) this tick and in all.
    pub(super) tick_retries: u64,
    pub(super) retries: u64,
    /// New requests the adaptive throttle dropped this tick and in all.
    pub(super) tick_dropped: u64,
    pub(super) dropped: u64,
    /// Requests given up after their last retry was refused.
    pub(super) gave_up: u64,
}

/// What a client does with a new request.
pub(super) enum Send {
    /// Send it.
    Go,
    /// The adaptive throttle dropped it.
    Dropped,
}

impl ClientSide {
    /// Clients that behave as `behavior` against a limit over `window`, in a
    /// run starting at `start`, their draws seeded by `seed`.
    pub(super) fn new(
        behavior: ClientBehavior,
        seed: u64,
        start: Timestamp,
        window: Duration,
    ) -> Self {
        let jitter = match behavior {
            ClientBehavior::RetryAfterPlusAdditiveJitter { .. } => {
                RetryJitter::additive(ExponentialBackoff::default())
            }
            _ => RetryJitter::default(),
        };
        ClientSide {
            behavior,
            jitter,
            throttles: HashMap::new(),
            pacers: HashMap::new(),
            start,
            window,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_C11E_4715),
            pending: BinaryHeap::new(),
            tick_retries: 0,
            retries: 0,
            tick_dropped: 0,
            dropped: 0,
            gave_up: 0,
        }
    }

    /// Starts a tick's counts.
    pub(super) fn begin_tick(&mut self) {
        self.tick_retries = 0;
        self.tick_dropped = 0;
    }

    /// Whether `client` sends a new request at `at` (the adaptive throttle may drop it).
    pub(super) fn admit_new(&mut self, client: u64, at: Timestamp) -> Send {
        let ClientBehavior::Adaptive { k, .. } = self.behavior else {
            return Send::Go;
        };
        let u: f64 = self.rng.random();
        let throttle = self
            .throttles
            .entry(client)
            .or_insert_with(|| AdaptiveThrottle::new(k, AdaptiveThrottle::DEFAULT_WINDOW));
        if throttle.try_request(at, u) {
            Send::Go
        } else {
            self.tick_dropped += 1;
            self.dropped += 1;
            Send::Dropped
        }
    }

    /// Whether these clients read the limit's headers (and so pace themselves).
    fn reads_headers(&self) -> bool {
        matches!(
            self.behavior,
            ClientBehavior::HonourRetryAfter { .. } | ClientBehavior::Adaptive { .. }
        )
    }

    /// The next retry due before `end_ns`, taken off the heap. A retry its
    /// client's pacer holds back goes back on the heap at the start it got.
    pub(super) fn next_due(&mut self, end_ns: u64) -> Option<Retry> {
        loop {
            let due = match self.pending.peek() {
                Some(Reverse(retry)) if retry.at_ns < end_ns => *retry,
                _ => return None,
            };
            self.pending.pop();
            if !due.paced
                && self.reads_headers()
                && let Some(pacer) = self.pacers.get_mut(&due.client)
            {
                let at = self.start.saturating_add(Duration::from_nanos(due.at_ns));
                let start_ns = pacer.reserve(at).saturating_since(self.start).as_nanos();
                let start_ns = u64::try_from(start_ns).unwrap_or(u64::MAX);
                if start_ns > due.at_ns {
                    self.pending.push(Reverse(Retry {
                        at_ns: start_ns,
                        paced: true,
                        ..due
                    }));
                    continue;
                }
            }
            self.tick_retries += 1;
            self.retries += 1;
            return Some(due);
        }
    }

    /// Learns what the limit answered to attempt `attempt` (0: the first
    /// send) of a request at `at_ns` (virtual nanoseconds since the start):
    /// an accept for the throttle, or a retry scheduled (or the request given up).
    pub(super) fn answered(
        &mut self,
        decision: &Decision,
        arrival: u64,
        client: u64,
        at: Timestamp,
        at_ns: u64,
        attempt: u32,
    ) {
        if self.reads_headers() {
            let hints = ServerHints {
                retry_after: decision.retry_after(),
                remaining: Some(decision.remaining()),
                reset: Some(decision.reset_after()),
                limit: Some(decision.limit()),
                window: Some(self.window),
            };
            self.pacers
                .entry(client)
                .or_insert_with(|| Pacer::new(Pacer::DEFAULT_SLOW_DOWN_BELOW))
                .observe(at, &hints);
        }
        if decision.is_allowed() {
            // The throttle counts an application request accepted when any of its tries is.
            if let Some(throttle) = self.throttles.get_mut(&client) {
                throttle.record_accept(at);
            }
            return;
        }
        let (max_retries, wait) = match self.behavior {
            ClientBehavior::Once => return,
            ClientBehavior::RetryAtOnce {
                max_retries,
                delay_ns,
            } => (max_retries, Duration::from_nanos(delay_ns)),
            ClientBehavior::HonourRetryAfter { max_retries }
            | ClientBehavior::RetryAfterPlusAdditiveJitter { max_retries }
            | ClientBehavior::Adaptive { max_retries, .. } => {
                let told = decision.retry_after().unwrap_or_default();
                (max_retries, self.jitter.delay(attempt, told, &mut self.rng))
            }
        };
        if attempt >= max_retries {
            self.gave_up += 1;
            return;
        }
        let wait_ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.pending.push(Reverse(Retry {
            at_ns: at_ns.saturating_add(wait_ns),
            arrival,
            client,
            attempt: attempt + 1,
            paced: false,
        }));
    }
}
