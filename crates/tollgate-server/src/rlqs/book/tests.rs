//! The quota book's tests: shares split, paid for and sent, and bad reports refused.

use std::path::Path;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use tollgate_rules::{LoadOptions, load_sources};

use std::sync::atomic::Ordering;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tollgate_core::Timestamp;
use tollgate_rules::RuleSet;
use tonic::Status;

use super::*;

fn rules() -> RuleSet {
    let yaml = "domain: q\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 100}\n";
    load_sources([(Path::new("q.yaml"), yaml)], LoadOptions::default()).rule_set
}

type Outbox = mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>;

/// A stream on `book`: its number and where its responses go.
fn stream(book: &QuotaBook) -> (StreamId, Outbox) {
    let (tx, rx) = mpsc::channel(64);
    (book.open(tx).unwrap(), rx)
}

/// Reports and sends the changes as if the shared budget had every unit asked for.
fn paid(book: &QuotaBook, id: StreamId, report: RateLimitQuotaUsageReports, rules: &RuleSet) {
    let changes = book.report(id, report, rules).unwrap();
    pay_in_full(book, changes);
}

/// Sends `changes` as if every unit they cost was taken.
fn pay_in_full(book: &QuotaBook, changes: Changes) {
    let taken: Vec<u64> = changes.payments.iter().map(|p| p.units).collect();
    book.apply(changes, &taken);
}

fn report(tenant: &str, allowed: u64, denied: u64) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "q".to_owned(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("tenant".to_owned(), tenant.to_owned())].into(),
            }),
            time_elapsed: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: allowed,
            num_requests_denied: denied,
        }],
    }
}

/// An instant `seconds` into the tests' time.
fn at(seconds: u64) -> Timestamp {
    Timestamp::from_secs(1_000 + seconds)
}

/// The per-second rate of the latest token bucket each outbox received (0 for deny-all), draining them.
fn rate(rx: &mut Outbox, last: &mut u64) -> u64 {
    while let Ok(Ok(response)) = rx.try_recv() {
        for action in response.bucket_action {
            let Some(Action::QuotaAssignmentAction(a)) = action.bucket_action else {
                continue;
            };
            *last = match a.rate_limit_strategy.and_then(|s| s.strategy) {
                Some(Strategy::TokenBucket(b)) => {
                    u64::from(b.tokens_per_fill.map_or(0, |v| v.value))
                }
                _ => 0,
            };
        }
    }
    *last
}

#[test]
fn shares_in_force_never_pass_the_rate_follow_demand_and_return_when_a_stream_ends() {
    let (book, rules) = (QuotaBook::new(RlqsOptions::default()), rules());
    let ((one, mut rx1), (two, mut rx2)) = (stream(&book), stream(&book));
    let (mut r1, mut r2) = (0, 0);
    paid(&book, one, report("a", 1, 0), &rules);
    assert_eq!(rate(&mut rx1, &mut r1), 100, "alone, the whole rate");
    paid(&book, two, report("a", 1, 0), &rules);
    let (s1, s2) = (rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2));
    assert!(s1 + s2 <= 100, "{s1} + {s2}");
    assert!(s1 < 100, "the first one's share fell and was pushed");
    // Demand shifts to the second: after each has reported, it holds most of the rate.
    for _ in 0..3 {
        paid(&book, one, report("a", 10, 0), &rules);
        paid(&book, two, report("a", 50, 400), &rules);
        let (s1, s2) = (rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2));
        assert!(s1 + s2 <= 100, "{s1} + {s2}");
    }
    assert!(r2 >= 80, "the busy stream's share is {r2}");
    // The second stream ends: the first gets the rate back at its next report.
    pay_in_full(&book, book.close(two));
    paid(&book, one, report("a", 60, 0), &rules);
    assert_eq!(rate(&mut rx1, &mut r1), 100);
    // A quiet Envoy keeps room to double (or the floor), not the spare
    // rate: the RLS callers sharing the budget keep the rest.
    paid(&book, one, report("a", 5, 0), &rules);
    assert_eq!(rate(&mut rx1, &mut r1), 25);
    assert_eq!(book.stats().streams.load(Ordering::Relaxed), 1);
}

#[test]
fn the_shares_in_force_are_paid_each_tick_and_cut_to_what_the_budget_gave() {
    const TICK: Duration = Duration::from_secs(1);
    let (book, rules) = (QuotaBook::new(RlqsOptions::default()), rules());
    let ((one, mut rx1), (two, mut rx2)) = (stream(&book), stream(&book));
    let (mut r1, mut r2) = (0, 0);
    // First reports claim equal parts; the next ones split by demand.
    for _ in 0..3 {
        paid(&book, one, report("a", 300, 0), &rules);
        paid(&book, two, report("a", 30, 0), &rules);
    }
    let (s1, s2) = (rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2));
    assert_eq!((s1, s2), (70, 30));
    let before = book.stats().units_taken.load(Ordering::Relaxed);
    // A tick of 100 a second costs 100 units, checked as the bucket's descriptor.
    let dues = book.dues(at(1), TICK);
    assert_eq!(dues.payments.len(), 1);
    assert_eq!(dues.payments[0].units, 100);
    assert_eq!(
        (
            dues.payments[0].domain.as_str(),
            dues.payments[0].entries.as_slice()
        ),
        ("q", &[("tenant".to_owned(), "a".to_owned())][..])
    );
    let cuts = book.settle(dues, &[100]);
    assert!(cuts.payments.is_empty());
    pay_in_full(&book, cuts);
    assert_eq!(
        (rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)),
        (s1, s2),
        "paid: nothing changes"
    );
    // RLS callers spent 60 of the budget: 40 pay for the smaller share,
    // which stays as it is; the larger goes to deny-all (a smaller bucket
    // would be fresh tokens nobody paid for).
    let dues = book.dues(at(2), TICK);
    assert_eq!(dues.payments[0].units, 100);
    let cuts = book.settle(dues, &[40]);
    assert!(cuts.payments.is_empty());
    pay_in_full(&book, cuts);
    assert!(s1 > 40 && s2 <= 40, "{s1} + {s2}");
    assert_eq!((rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)), (0, s2));
    assert_eq!(book.stats().shares_cut.load(Ordering::Relaxed), 1);
    assert_eq!(
        book.stats().units_taken.load(Ordering::Relaxed) - before,
        140
    );
    // Nothing left: every share is 0, a deny-all assignment.
    let dues = book.dues(at(3), TICK);
    assert_eq!(dues.payments[0].units, s2);
    pay_in_full(&book, book.settle(dues, &[0]));
    assert_eq!((rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)), (0, 0));
    assert!(
        book.dues(at(4), TICK).payments.is_empty(),
        "no share in force, nothing to pay"
    );
}

#[test]
fn a_new_or_larger_share_is_sent_only_as_far_as_its_fresh_bucket_was_paid() {
    let book = QuotaBook::new(RlqsOptions::default());
    let rules = rules();
    let (tx, mut rx) = mpsc::channel(64);
    let one = book.open(tx).unwrap();
    let mut last = 0;
    // The first report: the whole rate, whose bucket starts with 100 tokens.
    let changes = book.report(one, report("a", 1, 0), &rules).unwrap();
    assert_eq!(changes.payments.len(), 1);
    assert_eq!(changes.payments[0].units, 100);
    assert_eq!(
        rate(&mut rx, &mut last),
        0,
        "nothing is sent before it is paid"
    );
    // The budget had 30: the share is 30.
    book.apply(changes, &[30]);
    assert_eq!(rate(&mut rx, &mut last), 30);
    // Demand shows: the share would grow to 100, a bucket of 70 tokens more
    // than the one in force; nothing is left: the 30 stay, the growth waits.
    let changes = book.report(one, report("a", 30, 300), &rules).unwrap();
    assert_eq!(changes.payments[0].units, 70);
    book.apply(changes, &[0]);
    assert_eq!(rate(&mut rx, &mut last), 30);
    // A tick pays the 30 in force, then the waiting growth.
    let tick = Duration::from_secs(1);
    let dues = book.dues(at(1), tick);
    assert_eq!(dues.payments[0].units, 30);
    let growth = book.settle(dues, &[30]);
    assert_eq!(growth.payments[0].units, 70);
    assert_eq!(
        rate(&mut rx, &mut last),
        30,
        "nothing sent before it is paid"
    );
    book.apply(growth, &[70]);
    assert_eq!(rate(&mut rx, &mut last), 100);
    let changes = book.report(one, report("a", 100, 200), &rules).unwrap();
    assert!(changes.payments.is_empty());
    book.apply(changes, &[]);
    assert_eq!(rate(&mut rx, &mut last), 100);
    assert_eq!(book.stats().shares_cut.load(Ordering::Relaxed), 1);
}

#[test]
fn bad_reports_and_bounds_are_errors_naming_the_problem() {
    let book = QuotaBook::new(RlqsOptions {
        max_streams: 1,
        max_buckets: 1,
        ..RlqsOptions::default()
    });
    let rules = rules();
    let (tx, _rx) = mpsc::channel(64);
    let one = book.open(tx.clone()).unwrap();
    let refused = book.open(tx).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("--rlqs-max-streams"),
        "{}",
        refused.message()
    );
    let mut empty = report("a", 1, 0);
    empty.domain.clear();
    assert_eq!(
        book.report(one, empty, &rules).unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    paid(&book, one, report("a", 1, 0), &rules);
    let mut other_domain = report("a", 1, 0);
    other_domain.domain = "elsewhere".to_owned();
    let status = book.report(one, other_domain, &rules).unwrap_err();
    assert!(
        status.message().contains("`elsewhere`"),
        "{}",
        status.message()
    );
    let status = book.report(one, report("b", 1, 0), &rules).unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("--rlqs-max-buckets"),
        "{}",
        status.message()
    );
}

#[test]
fn buckets_sharing_one_counter_at_one_envoy_are_each_paid_for() {
    // `share_threshold`: every tenant under `team-` counts in one counter.
    let yaml = "domain: q\ndescriptors:\n  - key: tenant\n    value: team-*\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 100}\n";
    let rules = load_sources([(Path::new("q.yaml"), yaml)], LoadOptions::default()).rule_set;
    let book = QuotaBook::new(RlqsOptions::default());
    let (one, mut rx) = stream(&book);
    let mut both = report("team-a", 40, 0);
    both.bucket_quota_usages
        .extend(report("team-b", 40, 0).bucket_quota_usages);
    let changes = book.report(one, both, &rules).unwrap();
    // Two buckets, each a token bucket of the share: two fresh buckets to pay.
    let share_tokens: u64 = changes.payments.iter().map(|p| p.units).sum();
    assert_eq!(share_tokens, 200, "each bucket starts with the whole rate");
    pay_in_full(&book, changes);
    let mut last = 0;
    assert_eq!(rate(&mut rx, &mut last), 100);
    // Each tick pays each bucket's refills.
    let dues = book.dues(at(1), Duration::from_secs(1));
    assert_eq!(dues.payments.len(), 1);
    assert_eq!(dues.payments[0].units, 200);
}

#[test]
fn one_stream_is_held_to_its_own_bound_and_closing_it_frees_its_buckets_and_dues() {
    let book = QuotaBook::new(RlqsOptions {
        max_buckets: 10,
        max_stream_buckets: 2,
        ..RlqsOptions::default()
    });
    let rules = rules();
    let ((one, _rx1), (two, _rx2)) = (stream(&book), stream(&book));
    paid(&book, one, report("a", 1, 0), &rules);
    paid(&book, one, report("b", 1, 0), &rules);
    let status = book.report(one, report("c", 1, 0), &rules).unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("--rlqs-max-stream-buckets"),
        "{}",
        status.message()
    );
    // A bucket it already has is not a new one; another stream has its own room.
    paid(&book, one, report("a", 5, 0), &rules);
    paid(&book, two, report("c", 1, 0), &rules);
    let stats = book.stats();
    assert_eq!(stats.stream_buckets.load(Ordering::Relaxed), 2);
    assert_eq!(stats.counters.load(Ordering::Relaxed), 3);
    assert_eq!(book.dues(at(1), Duration::from_secs(1)).payments.len(), 3);
    let dues = book.dues(at(1), Duration::from_secs(1)).payments;
    pay_in_full(&book, book.close(one));
    assert_eq!(stats.buckets.load(Ordering::Relaxed), 1);
    assert_eq!(stats.stream_buckets.load(Ordering::Relaxed), 1);
    assert_eq!(stats.counters.load(Ordering::Relaxed), 1);
    assert_eq!(book.dues(at(1), Duration::from_secs(1)).payments.len(), 1);
    // A tick read before the close owes nothing for its counters.
    let owed: Vec<bool> = dues.iter().map(Payment::is_owed).collect();
    assert_eq!(owed.iter().filter(|o| **o).count(), 1, "{owed:?}");
}

#[test]
fn a_bucket_whose_rule_changes_is_paid_for_under_its_new_counter_only() {
    // Every tenant under `team-` counts in one counter, until a reload gives each its own.
    let shared = "domain: q\ndescriptors:\n  - key: tenant\n    value: team-*\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 100}\n";
    let shared = load_sources([(Path::new("q.yaml"), shared)], LoadOptions::default()).rule_set;
    let own = rules();
    let book = QuotaBook::new(RlqsOptions::default());
    let (one, _rx) = stream(&book);
    let mut both = report("team-a", 40, 0);
    both.bucket_quota_usages
        .extend(report("team-b", 40, 0).bucket_quota_usages);
    paid(&book, one, both.clone(), &shared);
    let dues = book.dues(at(1), Duration::from_secs(1)).payments;
    assert_eq!(dues.iter().map(|d| d.units).collect::<Vec<_>>(), [200]);
    // After the reload each bucket has its own counter, paid once: the old one is paid for no bucket.
    paid(&book, one, both, &own);
    let mut units: Vec<u64> = book
        .dues(at(1), Duration::from_secs(1))
        .payments
        .iter()
        .map(|d| d.units)
        .collect();
    units.sort_unstable();
    assert_eq!(units, [100, 100]);
}

/// The length of the union of `spans` (each `[start, end)`, sorted by start).
fn union_length(spans: &[(Timestamp, Timestamp)]) -> Duration {
    let mut total = Duration::ZERO;
    let mut reached = Timestamp::EPOCH;
    for &(start, end) in spans {
        let start = start.max(reached);
        total += end.saturating_since(start);
        reached = reached.max(end);
    }
    total
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Rounds late by anything (a busy runtime, Redis round trips) pay for
    /// every instant the share refilled within the counter's memory (its
    /// window, 1 s here) of a round, and a tick ahead: what the counter
    /// paid covers the refills of the union of those spans, and exceeds
    /// them by less than one unit.
    #[test]
    fn late_rounds_pay_for_every_refill_within_the_counters_memory(
        lateness_ms in proptest::collection::vec(0u64..3_000, 1..40),
    ) {
        const TICK: Duration = Duration::from_secs(1);
        const WINDOW: Duration = Duration::from_secs(1);
        let (book, rules) = (QuotaBook::new(RlqsOptions::default()), rules());
        let (one, mut rx) = stream(&book);
        let mut last = 0;
        paid(&book, one, report("a", 1, 0), &rules);
        paid(&book, one, report("a", 5, 0), &rules);
        let share = rate(&mut rx, &mut last);
        proptest::prop_assert_eq!(share, 25, "a quiet Envoy's floor");
        let mut now = at(0);
        let mut first = None;
        let mut spans = Vec::new();
        let mut paid_ns: u128 = 0;
        for late in lateness_ms {
            now = now.saturating_add(TICK + Duration::from_millis(late));
            let dues = book.dues(now, TICK);
            let taken: Vec<u64> = dues.payments.iter().map(|p| p.units).collect();
            paid_ns += taken.iter().map(|&u| u128::from(u)).sum::<u128>() * WINDOW.as_nanos();
            pay_in_full(&book, book.settle(dues, &taken));
            proptest::prop_assert_eq!(rate(&mut rx, &mut last), share, "paid in full: no cut");
            // What this round must have paid for: its memory behind (not
            // before the first round) and a tick ahead.
            let first = *first.get_or_insert(now);
            let behind = Timestamp::from_nanos(now.as_nanos().saturating_sub(WINDOW.as_nanos() as u64));
            spans.push((behind.max(first), now.saturating_add(TICK)));
            let refilled_ns = u128::from(share) * union_length(&spans).as_nanos();
            proptest::prop_assert!(
                paid_ns >= refilled_ns,
                "paid {paid_ns} unit·ns, the share refilled {refilled_ns}"
            );
            proptest::prop_assert!(
                paid_ns < refilled_ns + WINDOW.as_nanos(),
                "paid {paid_ns} unit·ns, a unit or more over the refills {refilled_ns}"
            );
        }
    }
}
