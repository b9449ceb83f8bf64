//! The whole in-memory decision path of one RLS call — the engine's check and the metrics it counts (per-rule counters, the latency histograms) — from one thread and from two at once, on one hot key and on many keys.
//!
//! The path's cost per call should not grow with the threads: a shared
//! atomic or lock touched on every call shows as the two-thread figure
//! rising above the one-thread one. Run with
//! `cargo bench -p tollgate-server --bench decision_path`;
//! docs/benchmarks.md holds the figures and how quiet the machine was.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented entry point"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tollgate_core::{Clock, ManualClock, MonotonicClock, Timestamp};
use tollgate_protocol::rls::model::{Descriptor, RateLimitRequest};
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_server::engine::Decided;
use tollgate_server::metrics::{Api, ConfigStats, DEFAULT_NEAR_LIMIT_RATIO, Metrics};
use tollgate_server::{Engine, EngineOptions, LiveEngine};

/// A limit no run reaches: every call is within it.
const LIMITS: &str = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n";

/// Distinct users of the many-keys case, per thread.
const KEYS: usize = 4096;

fn setup() -> (Arc<Engine<ManualClock>>, Arc<Metrics>) {
    let loaded = load_sources([(Path::new("l.yaml"), LIMITS)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    let engine = Arc::new(Engine::new(
        Arc::new(loaded.rule_set),
        EngineOptions::default(),
        clock,
    ));
    let live = Arc::new(LiveEngine::fixed(Arc::clone(&engine)));
    let metrics = Arc::new(Metrics::new(
        live as Arc<dyn ConfigStats>,
        DEFAULT_NEAR_LIMIT_RATIO,
    ));
    (engine, metrics)
}

fn requests(thread: usize, keys: usize) -> Vec<RateLimitRequest> {
    (0..keys)
        .map(|k| RateLimitRequest {
            domain: "api".to_owned(),
            descriptors: vec![Descriptor::new([("user", format!("u{thread}-{k}"))])],
            hits_addend: 0,
        })
        .collect()
}

/// One call as the gRPC service makes it: check, count, time (not inlined,
/// so a profiler counts its instructions per call).
#[inline(never)]
fn call(engine: &Engine<ManualClock>, metrics: &Metrics, request: &RateLimitRequest) {
    let start = metrics.start();
    let Ok(Decided::Ready(response)) = engine.check(request) else {
        panic!("an in-memory engine decides at once");
    };
    metrics.observe(engine.rules(), request, &response);
    metrics.observe_duration(Api::Grpc, start);
    std::hint::black_box(response);
}

/// The wall time of `threads` threads each making `iterations` calls over
/// `keys` keys: with the threads on their own cores, the CPU time per call
/// times `iterations`, so a flat path gives the same figure for 1 and 2.
fn run(threads: usize, keys: usize, iterations: u64) -> Duration {
    let (engine, metrics) = setup();
    let per_thread: Vec<Vec<RateLimitRequest>> = (0..threads)
        .map(|t| requests(if keys == 1 { 0 } else { t }, keys))
        .collect();
    let clock = MonotonicClock::new();
    let started = clock.now();
    std::thread::scope(|scope| {
        for requests in &per_thread {
            let (engine, metrics) = (&engine, &metrics);
            scope.spawn(move || {
                for i in 0..iterations {
                    call(engine, metrics, &requests[i as usize % requests.len()]);
                }
            });
        }
    });
    clock.now().saturating_since(started)
}

fn decision_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("decision_path");
    group.measurement_time(Duration::from_secs(4));
    for (name, keys) in [("hot_key", 1), ("many_keys", KEYS)] {
        for threads in [1usize, 2] {
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iterations| run(threads, keys, iterations));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, decision_path);
criterion_main!(benches);
