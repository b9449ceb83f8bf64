//! One RLQS stream at its bucket bound — a single usage report naming as many buckets as `--rlqs-max-stream-buckets` allows, as an attacker would send it — leaves RLS callers and `/metrics` unaffected, and its work ends as soon as it closes.
//!
//! The figures are latencies of a real `tollgate serve` on this machine, so
//! the phases are bounded by counts and deadlines, the RLS calls run one at
//! a time from another connection for at least three payment ticks, and the
//! threshold is the (p99 under 10 ms) on top of twice the p99 the
//! same calls had before the attack, so that a loaded two-core machine's
//! own delays do not count against the service (speed is measured in
//! `crates/tollgate-server/benches/rlqs_tick.rs`).

#[expect(
    dead_code,
    reason = "each call is timed and bounded here, not made by `rls_client::call`"
)]
mod rls_client;

use rls_client::{channel, is_ok, request};

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use tokio::sync::mpsc;
use tollgate_protocol::rls::RlsClient;
use tollgate_testkit::budget::{Stopwatch, poll_until};
use tollgate_testkit::http::try_get;
use tollgate_testkit::rlqs::usage_report;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server};
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

const LIMITS: &str = "
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 10}
---
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
";

/// The longest a phase may take (the old code never ended them).
const PHASE: Duration = Duration::from_secs(30);

/// The bound on what a stream at its bound adds to an RLS caller's p99.
const P99: Duration = Duration::from_millis(10);

/// No single RLS call may take this long: a stall of the runtime, not a busy machine.
const WORST: Duration = Duration::from_millis(500);

/// The value of `series` on `/metrics`; `None` if it did not answer within its timeout.
fn scrape(http: SocketAddr, series: &str) -> Option<u64> {
    let text = try_get(http, "/metrics", &[]).ok()?.body;
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// [`scrape`] off the runtime's threads.
async fn metric(http: SocketAddr, series: &'static str) -> Option<u64> {
    tokio::task::spawn_blocking(move || scrape(http, series))
        .await
        .expect("the scrape thread ends")
}

/// Polls `series` until it is `want` (at most [`PHASE`]); whether it got there.
async fn reaches(http: SocketAddr, series: &'static str, want: u64) -> bool {
    tokio::task::spawn_blocking(move || {
        poll_until(PHASE, || (scrape(http, series) == Some(want)).then_some(())).is_some()
    })
    .await
    .expect("the polling thread ends")
}

/// RLS calls one at a time for at least three payment ticks (at most
/// 20 000 calls or [`PHASE`]), each given 1 s; their latencies, sorted (a
/// call that failed or timed out counts as [`PHASE`]).
async fn rls_latencies(grpc: &str) -> Vec<Duration> {
    let client = RlsClient::new(channel(grpc).await);
    let phase = Stopwatch::start();
    let mut latencies = Vec::new();
    while latencies.len() < 20_000
        && !phase.exceeded(PHASE)
        && (latencies.len() < 300 || !phase.exceeded(Duration::from_secs(3)))
    {
        let call = Stopwatch::start();
        let answered = tokio::time::timeout(
            Duration::from_secs(1),
            client.should_rate_limit(request("edge", "user", "alice")),
        )
        .await
        .is_ok_and(|answer| answer.is_ok_and(|answer| is_ok(&answer)));
        latencies.push(if answered { call.elapsed() } else { PHASE });
    }
    latencies.sort_unstable();
    latencies
}

/// The 99th percentile of sorted `latencies`.
fn p99(latencies: &[Duration]) -> Duration {
    latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_at_its_bucket_bound_leaves_rls_and_metrics_unaffected_and_closing_frees_it() {
    let dir = TempDir::new("rlqs-bounds");
    let config = dir.limits(LIMITS);
    let mut args = vec![
        "serve",
        "--config",
        config.to_str().expect("a UTF-8 path"),
        "--log-level",
        "warn",
        // An ended stream's buckets stay until its last assignment lapses.
        "--rlqs-assignment-ttl",
        "1s",
    ];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    let server = Server::spawn(&args);
    let grpc = server.address();
    let http: SocketAddr = server
        .line_after("http listening on ")
        .parse()
        .expect("an address");
    let cap = metric(http, "ratelimit_rlqs_stream_buckets_limit")
        .await
        .expect("the per-stream bound is a gauge");
    let before = rls_latencies(&grpc).await;
    let bound = P99 + 2 * p99(&before);

    // The attack: one stream, one message at the bound, kept open.
    let (reports, outgoing) = mpsc::channel(1);
    reports
        .send(usage_report("quota", "tenant", cap))
        .await
        .expect("the stream is open");
    let responses = RateLimitQuotaServiceClient::new(channel(&grpc).await)
        .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
        .await
        .expect("the stream is accepted");
    assert!(
        reaches(http, "ratelimit_rlqs_buckets", cap).await,
        "the stream's {cap} buckets were not all tracked within {PHASE:?} (or /metrics stopped answering)"
    );

    let during = rls_latencies(&grpc).await;
    let scraped = metric(http, "ratelimit_rlqs_stream_buckets").await;
    assert_eq!(
        scraped,
        Some(cap),
        "/metrics answers while the stream holds {cap} buckets"
    );
    assert!(
        p99(&during) < bound && during[during.len() - 1] < WORST,
        "RLS while one stream holds {cap} buckets: p99 {:?} (bound {bound:?}), worst {:?} over {} calls",
        p99(&during),
        during[during.len() - 1],
        during.len()
    );

    // The attacker goes away: its buckets, and what each tick paid for
    // them, go once its last assignment lapses (a second and a round here).
    drop((reports, responses));
    for series in [
        "ratelimit_rlqs_streams",
        "ratelimit_rlqs_buckets",
        "ratelimit_rlqs_counters",
    ] {
        assert!(
            reaches(http, series, 0).await,
            "`{series}` did not fall to 0 after the stream closed"
        );
    }
    let after = rls_latencies(&grpc).await;
    assert!(
        p99(&after) < bound && after[after.len() - 1] < WORST,
        "RLS after the stream closed: p99 {:?} (bound {bound:?}), worst {:?} over {} calls",
        p99(&after),
        after[after.len() - 1],
        after.len()
    );
    eprintln!(
        "{cap} buckets on one stream: RLS p99 {:?} before, {:?} (worst {:?}, {} calls) during, {:?} after",
        p99(&before),
        p99(&during),
        during[during.len() - 1],
        during.len(),
        p99(&after)
    );
}
