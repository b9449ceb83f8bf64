//! How many payment rounds a grown share takes to reach its Envoy after both Envoys start together, after a demand flip and after an Envoy dies (the service's rounds, top-ups and reports on an injected clock, a real in-memory counter of 40 a second): one, the round after the reports or the lapse, at its new rate in the bucket paid so far; its full bucket follows once paid.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tollgate_core::{Clock, ManualClock, Timestamp};
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_server::rlqs::{QuotaBook, RlqsOptions, pay_and_apply, pay_round, top_up};
use tollgate_server::{Engine, EngineOptions, LiveEngine};

type Outbox = mpsc::Receiver<Result<RateLimitQuotaResponse, tonic::Status>>;

const TICK: Duration = Duration::from_secs(1);
const START: u64 = 1_700_000_000;

/// The phases: one tenant of 40 a second, two Envoys reporting
/// every 5 s (200 ms after a whole second, as Envoy's own timer falls),
/// the service's rounds at the middle of each second and its top-ups on
/// the whole second.
struct Phases {
    clock: ManualClock,
    live: LiveEngine<ManualClock>,
    book: Arc<QuotaBook>,
    envoys: [(u64, Outbox); 2],
    /// The token bucket rate last sent to each Envoy (0: deny-all).
    shares: [u64; 2],
    /// The `max_tokens` last sent to each Envoy (0: deny-all).
    tokens: [u64; 2],
    /// Each Envoy's demand a second (0: dead, or not started).
    demand: [u64; 2],
    /// Whether each Envoy has reported its bucket (its first report says
    /// nothing of the rate).
    reported: [bool; 2],
    /// Seconds since the start.
    second: u64,
}

fn report(allowed: u64, denied: u64) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "quota".to_owned(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("tenant".to_owned(), "acme".to_owned())].into(),
            }),
            // Envoy 1.40 cuts a 5 s interval to whole seconds: often 4.
            time_elapsed: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: 4,
                nanos: 0,
            }),
            num_requests_allowed: allowed,
            num_requests_denied: denied,
        }],
    }
}

impl Phases {
    fn new(algorithm: &str) -> Self {
        let clock = ManualClock::new(Timestamp::from_secs(START));
        let yaml = format!(
            "domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: second, requests_per_unit: 40, algorithm: {algorithm}}}\n"
        );
        let loaded = load_sources(
            [(Path::new("q.yaml"), yaml.as_str())],
            LoadOptions::default(),
        );
        assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
        let engine = Engine::new(
            Arc::new(loaded.rule_set),
            EngineOptions::default(),
            clock.clone(),
        );
        let book = Arc::new(QuotaBook::new(RlqsOptions::default()));
        let open = || {
            let (tx, rx) = mpsc::channel(256);
            (book.open(tx).expect("a stream"), rx)
        };
        let envoys = [open(), open()];
        Phases {
            clock,
            live: LiveEngine::fixed(Arc::new(engine)),
            book,
            envoys,
            shares: [0, 0],
            tokens: [0, 0],
            demand: [100, 10],
            reported: [false, false],
            second: 0,
        }
    }

    fn at(&self, millis: u64) -> Timestamp {
        Timestamp::from_millis((START + self.second) * 1_000 + millis)
    }

    fn advance_to(&self, at: Timestamp) {
        self.clock.advance(at.saturating_since(self.clock.now()));
    }

    /// Reads the assignments sent since the last call.
    fn read(&mut self) {
        for (i, (_, outbox)) in self.envoys.iter_mut().enumerate() {
            while let Ok(Ok(response)) = outbox.try_recv() {
                for action in response.bucket_action {
                    let Some(BucketAction::QuotaAssignmentAction(a)) = action.bucket_action else {
                        continue;
                    };
                    (self.shares[i], self.tokens[i]) =
                        match a.rate_limit_strategy.and_then(|s| s.strategy) {
                            Some(Strategy::TokenBucket(b)) => (
                                u64::from(b.tokens_per_fill.map_or(0, |v| v.value)),
                                u64::from(b.max_tokens),
                            ),
                            Some(Strategy::BlanketRule(r)) if r == BlanketRule::DenyAll as i32 => {
                                (0, 0)
                            }
                            other => panic!("an unexpected assignment: {other:?}"),
                        };
                }
            }
        }
    }

    /// One second: a top-up on the whole second, the reports 200 ms in
    /// (every 5 s), the round in the middle; the buckets after it.
    async fn second(&mut self) -> Seen {
        self.advance_to(self.at(0));
        top_up(&self.live, &self.book, self.clock.now(), TICK).await;
        self.read();
        if self.second.is_multiple_of(5) {
            self.advance_to(self.at(200));
            for i in 0..2 {
                if self.demand[i] == 0 {
                    continue;
                }
                // The first report says nothing of the rate.
                let (allowed, denied) = if !self.reported[i] {
                    self.reported[i] = true;
                    (1, 0)
                } else {
                    let allowed = self.demand[i].min(self.shares[i]);
                    (allowed * 5, (self.demand[i] - allowed) * 5)
                };
                let changes = self
                    .book
                    .report(
                        self.envoys[i].0,
                        report(allowed, denied),
                        self.live.engine().rules(),
                        self.clock.now(),
                    )
                    .expect("a good report");
                pay_and_apply(&self.live, &self.book, changes).await;
                self.read();
            }
        }
        self.advance_to(self.at(500));
        pay_round(&self.live, &self.book, self.clock.now(), TICK).await;
        self.read();
        self.second += 1;
        Seen {
            rates: self.shares,
            tokens: self.tokens,
        }
    }

    /// Runs to the second `until`, the buckets after each round.
    async fn run_to(&mut self, until: u64) -> Vec<Seen> {
        let mut seen = Vec::new();
        while self.second < until {
            seen.push(self.second().await);
        }
        seen
    }

    fn kill(&mut self, envoy: usize) {
        self.demand[envoy] = 0;
        let changes = self.book.close(self.envoys[envoy].0, self.clock.now());
        // Nothing grows at a close; what falls pays for itself.
        let nothing = vec![0; changes.payments.len()];
        self.book.apply(changes, &nothing);
        self.read();
    }
}

/// The token buckets at both Envoys after a round: their rates and `max_tokens`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Seen {
    rates: [u64; 2],
    tokens: [u64; 2],
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b] = self.rates;
        let [ta, tb] = self.tokens;
        write!(f, "{a}/{ta} {b}/{tb}")
    }
}

/// The seconds from `from` until `reached` holds of the buckets after a round.
fn seconds_until(
    seen: &[Seen],
    from: u64,
    start: u64,
    reached: impl Fn(Seen) -> bool,
) -> Option<u64> {
    seen.iter()
        .enumerate()
        .find(|(_, s)| reached(**s))
        .map(|(i, _)| (start + i as u64 + 1).saturating_sub(from))
}

/// Both Envoys starting together (phase 1's start): their buckets' first
/// reports arrive together at 0.2 s without usage (an equal part each),
/// their second reports 5 s later show A's 100 a second and B's 10. Prints
/// each round's buckets and the units the counter gave.
async fn cold_start(algorithm: &str) -> ColdStart {
    let mut phases = Phases::new(algorithm);
    let mut seen = Vec::new();
    let mut taken = 0;
    let mut cuts_before = 0;
    while phases.second < 12 {
        if phases.second == 5 {
            cuts_before = phases.book.stats().shares_cut.load(Ordering::Relaxed);
        }
        let round = phases.second().await;
        let total = phases.book.stats().units_taken.load(Ordering::Relaxed);
        println!(
            "{algorithm}: round {}.5 s: rate/max_tokens {round:?}, the counter gave {}",
            phases.second - 1,
            total - taken
        );
        taken = total;
        seen.push(round);
    }
    // Within a tenth of max-min fair (A 28, B 11), as steady shares hold it.
    let near = |s: Seen| s.rates[0] >= 26 && s.rates[1] == 11;
    let cold = ColdStart {
        near: seconds_until(&seen, 5, 0, near).expect("the split comes into force"),
        exact: seconds_until(&seen, 5, 0, |s| s.rates == [28, 11])
            .expect("the split comes into force"),
        both: seen
            .iter()
            .position(|s| s.rates.iter().all(|&r| r > 0))
            .expect("both Envoys get a share") as u64,
        cut: phases.book.stats().shares_cut.load(Ordering::Relaxed) - cuts_before,
    };
    println!("{algorithm}: {cold:?}");
    cold
}

/// The rounds of a cold start: seconds from the reports that show the
/// demand (5.2 s) until the split is in force within a tenth, and
/// exactly; the first round (its whole second) at which both Envoys hold a
/// share above deny-all; the shares cut from the reports on (before,
/// first assignments the counter pays only in part count as cut).
#[derive(Debug)]
struct ColdStart {
    near: u64,
    exact: u64,
    both: u64,
    cut: u64,
}

/// How many seconds each ramp took: from the reports that show the flip
/// until B's rate is within 10 % of max-min fair; from A's death until B's
/// rate is at 0.9 R, and until its bucket is full.
#[derive(Debug)]
struct Ramps {
    flipped: u64,
    alone: u64,
    alone_full: u64,
}

async fn ramp(algorithm: &str) -> Ramps {
    let mut phases = Phases::new(algorithm);
    let settled = phases.run_to(21).await;
    assert_eq!(
        settled.last().map(|s| s.rates),
        Some([28, 11]),
        "phase 1 settles: {settled:?}"
    );
    let cuts = phases.book.stats().shares_cut.load(Ordering::Relaxed);
    // The flip, just after the reports at second 20: the service learns
    // it at the reports of second 25.
    phases.demand = [10, 100];
    let flip = phases.run_to(40).await;
    println!("{algorithm}: after the flip (reports at 25), rate/max_tokens: {flip:?}");
    let fair = |s: Seen| s.rates[1] >= 26 && s.rates[0] <= 12;
    let flipped = seconds_until(&flip, 25, 21, fair).expect("the split follows the flip");
    // A dies at second 40.2 (its last renewal at 39.5).
    phases.advance_to(phases.at(200));
    phases.kill(0);
    let death = phases.run_to(100).await;
    println!("{algorithm}: after A died at 40.2, rate/max_tokens: {death:?}");
    let alone = seconds_until(&death, 40, 40, |s| s.rates[1] >= 36).expect("B grows to 0.9 R");
    let alone_full = seconds_until(&death, 40, 40, |s| {
        s.rates[1] >= 36 && s.tokens[1] == s.rates[1]
    })
    .expect("B's bucket is raised to its full size");
    assert_eq!(
        phases.book.stats().shares_cut.load(Ordering::Relaxed),
        cuts,
        "no share is cut after settling"
    );
    let ramps = Ramps {
        flipped,
        alone,
        alone_full,
    };
    println!("{algorithm}: {ramps:?}");
    ramps
}

/// Fixed window: the flip's growth (B 11 → 28) reaches B at the first
/// round after the reports that show it (25.5), at its new rate in the
/// bucket paid (the full 28 is not paid yet: before, B waited for it
/// until the third round, 27.5); after A's death, its reservation lapses
/// at the round of 43.5 (its last renewal at 39.5, the 3 s time to live
/// and a round) and B's growth 28 → 39 goes out at that round, in the
/// bucket paid (before: four rounds later, 47.5). The full bucket of 39
/// follows once paid from what the shares leave of the rate (a fortieth
/// of it, 1 a second: at the round of 82.5, 42.3 s after the death). A
/// change that makes any of them slower fails here.
#[tokio::test]
async fn a_grown_share_goes_out_at_the_first_round_after_a_flip_and_at_the_lapse_after_a_death_fixed_window()
 {
    let ramps = ramp("fixed_window").await;
    assert!(
        ramps.flipped <= 1 && ramps.alone <= 4 && ramps.alone_full <= 43,
        "{ramps:?}"
    );
}

/// Token bucket (the counter refills continuously and holds up to its
/// burst): the same rounds (before: the flip's growth at the second
/// round, 26.5, and B at 39 at the third round after the lapse, 45.5).
#[tokio::test]
async fn a_grown_share_goes_out_at_the_first_round_after_a_flip_and_at_the_lapse_after_a_death_token_bucket()
 {
    let ramps = ramp("token_bucket").await;
    assert!(
        ramps.flipped <= 1 && ramps.alone <= 4 && ramps.alone_full <= 43,
        "{ramps:?}"
    );
}

/// Phase 1's start, fixed window: the split is in force within a tenth
/// (A 26 of its 28, B 11) at the round right after the reports that show
/// the demand (5.5 s), exactly at the round of 7.5 s (A's last units of
/// rate paid from what the shares leave); B, whose first report is
/// answered after A took the window's room, gets its first share at the
/// round of 1.5 s. Before: B deny-all until 3.5 s, and A at its equal
/// part (19) until 8.5 s, its growth waiting for a fresh bucket as large
/// as its old one and two ticks of its whole extra rate.
#[tokio::test]
async fn both_envoys_starting_together_get_the_split_at_the_round_after_their_first_usage_fixed_window()
 {
    let cold = cold_start("fixed_window").await;
    assert!(
        cold.near <= 1 && cold.exact <= 3 && cold.both <= 1 && cold.cut == 0,
        "{cold:?}"
    );
}

/// The same with a token-bucket counter: within a tenth at 5.5 s (A 27),
/// exactly at 7.5 s, both Envoys served from the first round (before:
/// A at 19 until 8.5 s, B deny-all until 3.5 s).
#[tokio::test]
async fn both_envoys_starting_together_get_the_split_at_the_round_after_their_first_usage_token_bucket()
 {
    let cold = cold_start("token_bucket").await;
    assert!(
        cold.near <= 1 && cold.exact <= 3 && cold.both == 0 && cold.cut == 0,
        "{cold:?}"
    );
}

/// A second Envoy's bucket beside one holding the whole rate (A alone at
/// 100 a second for 10 s, then B's first report at 10.2 s, 10 a second):
/// the buckets after each round from 10.5 s on, and the shares cut since
/// B came.
async fn newcomer(algorithm: &str) -> (Vec<Seen>, u64) {
    let mut phases = Phases::new(algorithm);
    phases.demand = [100, 0];
    let alone = phases.run_to(10).await;
    assert_eq!(alone.last().map(|s| s.rates), Some([39, 0]), "{alone:?}");
    let cuts = phases.book.stats().shares_cut.load(Ordering::Relaxed);
    phases.demand = [100, 10];
    let joined = phases.run_to(20).await;
    let cut = phases.book.stats().shares_cut.load(Ordering::Relaxed) - cuts;
    println!("{algorithm}: B's first report at 10.2 s, rate/max_tokens: {joined:?}, {cut} cut");
    (joined, cut)
}

/// Fixed window: B gets an equal part at its first report, A falls to
/// the other, and nothing is cut.
#[tokio::test]
async fn a_newcomer_beside_a_share_in_force_gets_an_equal_part_at_once_and_cuts_nothing_fixed_window()
 {
    let (joined, cut) = newcomer("fixed_window").await;
    assert_eq!(joined[0].rates, [20, 19], "{joined:?}");
    assert_eq!(cut, 0, "{joined:?}");
}

/// Token bucket (the counter holds a second of its rate): the same. Before,
/// A's fall and B's first share each went out in their full buckets (11 and
/// 19 tokens) paid from the tokens the counter held for the next round,
/// and that round cut both to 9 (18 a second of 40, B at its part 3 s later).
#[tokio::test]
async fn a_newcomer_beside_a_share_in_force_gets_an_equal_part_at_once_and_cuts_nothing_token_bucket()
 {
    let (joined, cut) = newcomer("token_bucket").await;
    assert_eq!(joined[0].rates, [20, 19], "{joined:?}");
    assert_eq!(cut, 0, "{joined:?}");
}
