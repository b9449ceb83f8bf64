//! What one stream's buckets cost the quota service: a usage report naming N buckets (read, split and its fresh buckets paid for) and one payment tick with N buckets in force, in memory, for N up to the default bound.
//!
//! The per-bucket figure of the tick is what sets `--rlqs-max-buckets`
//! (docs/quota.md). Run with `cargo bench -p tollgate-server --bench rlqs_tick`.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented entry point"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tollgate_core::{Clock, ManualClock, Timestamp};
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_server::rlqs::{PAY_TICK, QuotaBook, RlqsOptions, pay_and_apply, pay_round};
use tollgate_server::{Engine, EngineOptions, LiveEngine};
use tollgate_testkit::rlqs::usage_report;

/// Where a stream's responses go.
type Outbox = mpsc::Receiver<Result<RateLimitQuotaResponse, tonic::Status>>;

/// A rate no tick runs out of: every share stays paid in full.
const LIMITS: &str = "domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n";

/// An engine on [`LIMITS`], its clock, and an empty book with room for `buckets`.
fn setup(buckets: usize) -> (LiveEngine<ManualClock>, ManualClock, Arc<QuotaBook>) {
    let loaded = load_sources([(Path::new("q.yaml"), LIMITS)], LoadOptions::default());
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    let engine = Engine::new(
        Arc::new(loaded.rule_set),
        EngineOptions::default(),
        clock.clone(),
    );
    let book = Arc::new(QuotaBook::new(RlqsOptions {
        max_buckets: buckets,
        max_stream_buckets: buckets,
        ..RlqsOptions::default()
    }));
    (LiveEngine::fixed(Arc::new(engine)), clock, book)
}

/// Opens a stream on `book` and pays for its report of `buckets`; the stream's outbox.
async fn one_stream_reporting(
    live: &LiveEngine<ManualClock>,
    book: &Arc<QuotaBook>,
    buckets: usize,
) -> Outbox {
    let (tx, rx) = mpsc::channel(1 << 16);
    let id = book.open(tx).expect("a stream");
    let changes = book
        .report(
            id,
            usage_report("quota", "tenant", buckets as u64),
            live.engine().rules(),
            Timestamp::from_secs(1_000),
        )
        .expect("a report within the bounds");
    pay_and_apply(live, book, changes).await;
    rx
}

fn rlqs(c: &mut Criterion) {
    let runtime = Runtime::new().expect("a runtime");
    let mut group = c.benchmark_group("rlqs");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for buckets in [1024, 8192, 65_536] {
        group.throughput(Throughput::Elements(buckets as u64));
        group.bench_with_input(BenchmarkId::new("report", buckets), &buckets, |b, &n| {
            b.iter_batched(
                || setup(n),
                |(live, _clock, book)| {
                    let outbox = runtime.block_on(one_stream_reporting(&live, &book, n));
                    // Dropped after the timing.
                    (live, book, outbox)
                },
                BatchSize::PerIteration,
            );
        });
        let (live, clock, book) = setup(buckets);
        let _outbox = runtime.block_on(one_stream_reporting(&live, &book, buckets));
        group.bench_with_input(BenchmarkId::new("tick", buckets), &buckets, |b, _| {
            b.iter(|| {
                clock.advance(PAY_TICK);
                runtime.block_on(pay_round(&live, &book, clock.now(), PAY_TICK));
            });
        });
        clock.advance(PAY_TICK);
        assert_eq!(
            book.dues(clock.now(), PAY_TICK).payments.len(),
            buckets,
            "every bucket stayed paid for"
        );
    }
    group.finish();
}

criterion_group!(benches, rlqs);
criterion_main!(benches);
