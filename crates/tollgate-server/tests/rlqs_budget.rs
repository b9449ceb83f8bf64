//! The quota service spends the same budget as RLS callers and other instances: a new or larger share's fresh bucket is paid for before it is sent and the shares in force every tick, from the rule's counter, in memory or on a real Redis shared by two instances; what is not paid for is not handed out.

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
use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{LoadOptions, RuleSet, load_sources};
use tollgate_server::rlqs::{QuotaBook, RlqsOptions, pay_and_apply, pay_round, top_up};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions, LiveEngine};
use tollgate_testkit::budget::Stopwatch;
use tollgate_testkit::redis::RedisServer;

type Outbox = mpsc::Receiver<Result<RateLimitQuotaResponse, tonic::Status>>;

fn rules(yaml: &str) -> Arc<RuleSet> {
    let loaded = load_sources([(Path::new("q.yaml"), yaml)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

/// A usage report for `tenant`, covering `seconds`.
fn report(tenant: &str, allowed: u64, denied: u64, seconds: i64) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "quota".to_owned(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("tenant".to_owned(), tenant.to_owned())].into(),
            }),
            time_elapsed: Some(envoy_types::pb::google::protobuf::Duration { seconds, nanos: 0 }),
            num_requests_allowed: allowed,
            num_requests_denied: denied,
        }],
    }
}

/// The token bucket's tokens per fill in the latest assignment received (0 for deny-all); `None` if none came.
fn latest(outbox: &mut Outbox) -> Option<u64> {
    let mut last = None;
    while let Ok(Ok(response)) = outbox.try_recv() {
        for action in response.bucket_action {
            let Some(BucketAction::QuotaAssignmentAction(a)) = action.bucket_action else {
                continue;
            };
            last = Some(match a.rate_limit_strategy.and_then(|s| s.strategy) {
                Some(Strategy::TokenBucket(b)) => {
                    u64::from(b.tokens_per_fill.map_or(0, |v| v.value))
                }
                Some(Strategy::BlanketRule(r)) if r == BlanketRule::DenyAll as i32 => 0,
                other => panic!("an unexpected assignment: {other:?}"),
            });
        }
    }
    last
}

/// [`latest`], when an assignment must have come.
fn assigned(outbox: &mut Outbox) -> u64 {
    latest(outbox).expect("an assignment was sent")
}

/// An RLS caller's check of one request for `tenant`.
async fn rls_allows<C: tollgate_core::Clock>(engine: &LiveEngine<C>, tenant: &str) -> bool {
    let request = RateLimitRequest {
        domain: "quota".to_owned(),
        descriptors: vec![Descriptor::new([("tenant", tenant)])],
        hits_addend: 0,
    };
    engine
        .engine()
        .decide(&request)
        .await
        .expect("decided")
        .overall
        == Code::Ok
}

/// An engine on `yaml`'s rules with its counters on `redis`.
async fn on_redis(redis: &RedisServer, yaml: &str) -> LiveEngine<ManualClock> {
    let store = RedisStore::connect(&redis.url(), Duration::from_secs(2))
        .await
        .expect("redis answers");
    let remote = RemoteStore::new(store, RemoteOptions::default());
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    LiveEngine::fixed(Arc::new(Engine::with_remote(
        rules(yaml),
        EngineOptions::default(),
        clock,
        remote,
    )))
}

/// A clock, an engine on it with 100 a second per tenant in memory, and a quota book.
fn in_memory_at_100_a_second() -> (ManualClock, LiveEngine<ManualClock>, Arc<QuotaBook>) {
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    let yaml = "domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 100}\n";
    let engine = Engine::new(rules(yaml), EngineOptions::default(), clock.clone());
    let live = LiveEngine::fixed(Arc::new(engine));
    (
        clock,
        live,
        Arc::new(QuotaBook::new(RlqsOptions::default())),
    )
}

/// A stream on `book`: its number and where its answers go.
fn stream(book: &QuotaBook) -> (u64, Outbox) {
    let (tx, rx) = mpsc::channel(64);
    (book.open(tx).expect("a stream"), rx)
}

const TICK: Duration = Duration::from_secs(1);

/// Takes `report` on `book` at `now` and sends what it changed, paid for from the shared budget.
async fn report_paid<C: tollgate_core::Clock>(
    live: &LiveEngine<C>,
    book: &Arc<QuotaBook>,
    envoy: u64,
    report: RateLimitQuotaUsageReports,
    now: Timestamp,
) {
    let changes = book
        .report(envoy, report, live.engine().rules(), now)
        .expect("a good report");
    pay_and_apply(live, book, changes).await;
}

#[tokio::test]
async fn in_memory_rls_callers_and_envoys_spend_one_budget() {
    let (clock, live, book) = in_memory_at_100_a_second();
    let (envoy, mut outbox) = stream(&book);

    // RLS callers spend 70 of this second's 100.
    for _ in 0..70 {
        assert!(rls_allows(&live, "acme").await);
    }
    // The Envoy's first report claims an equal part, 98 (the rate less the
    // fortieth left in the counter): a bucket of 98 tokens and its refills
    // two ticks ahead, 294 units. 30 are left: its share is the largest
    // those pay for, 10 (10 + 2 × 10).
    report_paid(&live, &book, envoy, report("acme", 1, 0, 0), clock.now()).await;
    assert_eq!(assigned(&mut outbox), 10);
    // Those 30 left the budget before the Envoy spends them: the RLS callers are over.
    assert!(!rls_allows(&live, "acme").await);
    let stats = book.stats();
    assert_eq!(stats.units_taken.load(Ordering::Relaxed), 30);
    assert_eq!(stats.shares_cut.load(Ordering::Relaxed), 1);

    // Its demand shows 30 a second: it claims 32, a new bucket of 32 and
    // its refills, less the 10's refills prepaid: a growth waits for the
    // next round, so the 10 stand (the answer to the report renews them).
    report_paid(&live, &book, envoy, report("acme", 30, 0, 1), clock.now()).await;
    assert_eq!(latest(&mut outbox), Some(10));

    // The next second's round pays a tick more of the 10 in force, then
    // the growth: 32 + 2 × 32 − 2 × 10 = 76. The RLS callers get the other 14.
    clock.advance(TICK);
    pay_round(&live, &book, clock.now(), TICK).await;
    assert_eq!(assigned(&mut outbox), 32);
    let mut admitted = 0;
    for _ in 0..100 {
        admitted += u32::from(rls_allows(&live, "acme").await);
    }
    assert_eq!(admitted, 14);

    // The next second RLS callers spend the budget before the round: the
    // share is paid only a tick ahead, less than the next round and half a
    // tick, so it is cut to what the refills prepaid beyond now pay for
    // (32 unit·s: a bucket of 10 and two ticks of its refills), not to deny-all.
    clock.advance(TICK);
    for _ in 0..100 {
        assert!(rls_allows(&live, "acme").await);
    }
    pay_round(&live, &book, clock.now(), TICK).await;
    assert_eq!(assigned(&mut outbox), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_never_hand_out_more_than_the_budget() {
    let redis = RedisServer::start();
    // 100 a minute in a token bucket: one unit comes back every 0.6 s, so a
    // test of a few hundred milliseconds sees the 100 and at most a few more.
    let yaml = "domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket}\n";
    let mut instances = Vec::new();
    for _ in 0..2 {
        instances.push((
            on_redis(&redis, yaml).await,
            Arc::new(QuotaBook::new(RlqsOptions::default())),
        ));
    }
    let watch = Stopwatch::start();
    // Each instance has one Envoy, whose first share (the whole rate)
    // starts with 100 tokens: the first instance pays them, the second finds
    // only what came back since.
    let mut shares = Vec::new();
    for (live, book) in &instances {
        let (envoy, mut outbox) = stream(book);
        report_paid(
            live,
            book,
            envoy,
            report("acme", 1, 0, 0),
            Timestamp::from_secs(1_000),
        )
        .await;
        shares.push(assigned(&mut outbox));
    }
    // An RLS caller of either instance finds the budget spent.
    let rls = [
        rls_allows(&instances[0].0, "acme").await,
        rls_allows(&instances[1].0, "acme").await,
    ];
    let refilled = (watch.elapsed().as_millis() / 600) as u64 + 1;
    let spent = shares.iter().sum::<u64>() + rls.iter().filter(|a| **a).count() as u64;
    assert!(
        spent <= 100 + refilled,
        "shares {shares:?} and RLS {rls:?}: more than 100 + {refilled}"
    );
    assert_eq!(
        shares[0], 96,
        "the first instance paid for its Envoy's share: the largest whose bucket and two ticks of refills the 100 pay for"
    );
    assert!(
        shares[1] <= refilled,
        "the second's got what came back: {shares:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_store_down_a_share_follows_the_rules_on_store_error() {
    let mut redis = RedisServer::start();
    let yaml = "domain: quota\ndescriptors:\n  - key: tenant\n    value: strict\n    on_store_error: deny\n    rate_limit: {unit: second, requests_per_unit: 100}\n  - key: tenant\n    value: open\n    on_store_error: allow\n    rate_limit: {unit: second, requests_per_unit: 100}\n";
    let live = on_redis(&redis, yaml).await;
    let book = Arc::new(QuotaBook::new(RlqsOptions::default()));
    redis.kill();
    // As for RLS callers: `deny` refuses, `allow` admits.
    assert!(!rls_allows(&live, "strict").await);
    assert!(rls_allows(&live, "open").await);
    let (envoy, mut outbox) = stream(&book);
    report_paid(
        &live,
        &book,
        envoy,
        report("strict", 1, 0, 0),
        Timestamp::from_secs(1_000),
    )
    .await;
    assert_eq!(assigned(&mut outbox), 0, "`deny`: nothing paid, deny all");
    report_paid(
        &live,
        &book,
        envoy,
        report("open", 1, 0, 0),
        Timestamp::from_secs(1_000),
    )
    .await;
    assert_eq!(assigned(&mut outbox), 98, "`allow`: the share as if paid");
}

#[tokio::test]
async fn a_late_tick_pays_for_the_time_that_passed_up_to_the_counters_memory() {
    let (clock, live, book) = in_memory_at_100_a_second();
    let (envoy, mut outbox) = stream(&book);
    // A first report (33: 33 + 2 × 33 of the 100), then 30 a second shown
    // 5 s later: it claims 30 and a twentieth more, 32, within a tenth of
    // the 33 in force: kept.
    report_paid(&live, &book, envoy, report("acme", 1, 0, 0), clock.now()).await;
    clock.advance(5 * TICK);
    report_paid(&live, &book, envoy, report("acme", 150, 0, 5), clock.now()).await;
    assert_eq!(latest(&mut outbox), Some(33));
    let taken = || book.stats().units_taken.load(Ordering::Relaxed);
    let rls_admitted = async || {
        let mut admitted = 0;
        for _ in 0..100 {
            admitted += u64::from(rls_allows(&live, "acme").await);
        }
        admitted
    };
    // A first round pays through two ticks ahead (and the second since the report).
    clock.advance(TICK);
    pay_round(&live, &book, clock.now(), TICK).await;

    // On time: a round pays one second of the 33, the RLS callers get the other 67.
    clock.advance(TICK);
    let before = taken();
    pay_round(&live, &book, clock.now(), TICK).await;
    assert_eq!(taken() - before, 33);
    assert_eq!(rls_admitted().await, 67);

    // Half a second late: the margin paid ahead covers the delay, so the
    // round pays one tick on from where the last one left it, 33, as an
    // on-time one (each window of the counter sees the same units); the
    // RLS callers get 67.
    clock.advance(TICK + TICK / 2);
    let before = taken();
    pay_round(&live, &book, clock.now(), TICK).await;
    assert_eq!(taken() - before, 33, "a round 0.5 s late pays one tick");
    assert_eq!(rls_admitted().await, 67);

    // A stall of 8 s: the counter forgets spend older than its window (1 s),
    // so the round pays that window behind and two ticks ahead, 3 s: 99
    // units; the share stays.
    clock.advance(8 * TICK);
    let before = taken();
    pay_round(&live, &book, clock.now(), TICK).await;
    assert_eq!(taken() - before, 99, "a stall pays at most a window behind");
    assert_eq!(rls_admitted().await, 1);
    // (The round renews it before its time to live lapses: sent as it is.)
    assert_eq!(
        latest(&mut outbox),
        Some(33),
        "the share in force stays as it is"
    );
}

/// A token-bucket counter of 40 a second (its burst: one second of it)
/// and one Envoy held back at 39, the rounds late by up to 350 ms as on a
/// loaded machine (within the 3/8 of a tick the phase allows): with a
/// top-up half a tick before each round, the counter never reaches its
/// cap between rounds, and no share is cut. Without the top-ups the same
/// rounds cut the share from 39 to 17–19 for 5 rounds of every 10 (6
/// cuts in 60 rounds): the refill past the counter's cap was lost at each
/// late round, and the fortieth left over could not make it back.
#[tokio::test]
async fn late_rounds_on_a_token_bucket_counter_cut_no_share() {
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    let yaml = "domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 40, algorithm: token_bucket}\n";
    let engine = Engine::new(rules(yaml), EngineOptions::default(), clock.clone());
    let live = LiveEngine::fixed(Arc::new(engine));
    let book = Arc::new(QuotaBook::new(RlqsOptions::default()));
    let (envoy, mut outbox) = stream(&book);
    report_paid(&live, &book, envoy, report("acme", 1, 0, 0), clock.now()).await;
    let late = [0, 300, 0, 100, 350, 0, 0, 200, 0, 0];
    let cuts = || book.stats().shares_cut.load(Ordering::Relaxed);
    let mut shares = Vec::new();
    // (The first assignment takes what the counter has, 13: counted as a
    // cut; the round that pays its growth comes within five.)
    let mut settled = 0;
    for i in 0..60u64 {
        let due = Timestamp::from_secs(1_700_000_001 + i);
        let top_up_at = Timestamp::from_millis((1_700_000_000 + i) * 1_000 + 500);
        clock.advance(top_up_at.saturating_since(clock.now()));
        top_up(&live, &book, clock.now(), TICK).await;
        let at = due.saturating_add(Duration::from_millis(late[(i % 10) as usize]));
        clock.advance(at.saturating_since(clock.now()));
        if i % 5 == 4 {
            // Held back: 39 a second admitted, 60 refused.
            let held = report("acme", 39 * 5, 300, 5);
            report_paid(&live, &book, envoy, held, clock.now()).await;
        }
        pay_round(&live, &book, clock.now(), TICK).await;
        shares.extend(latest(&mut outbox));
        if i == 4 {
            settled = cuts();
        }
    }
    assert_eq!(cuts(), settled, "shares cut after settling: {shares:?}");
    assert!(shares.iter().skip(5).all(|&s| s == 39), "{shares:?}");
}
