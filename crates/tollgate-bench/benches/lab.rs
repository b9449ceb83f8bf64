//! How long the simulator takes for a minute of 10 000 req/s (600 000 decisions) through the real store.
//!
//! The lab's promise is "a minute of 10k req/s traffic simulates in well
//! under a second". Run with `cargo bench -p tollgate-bench --bench lab`.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented entry point"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate_core::{AnyAlgorithm, SlidingLog, SlidingWindow, TokenBucket};
use tollgate_lab::{Lane, MemoryStores, Scenario, Simulation, Traffic};

fn minute_of_10k(c: &mut Criterion) {
    let mut group = c.benchmark_group("lab/minute_of_10k_rps");
    group.sample_size(10);
    let minute = Duration::from_secs(60);
    let poisson = Traffic::poisson(10_000.0).expect("valid");
    let bucket: AnyAlgorithm = TokenBucket::new(1_000, 8_000, Duration::from_secs(1))
        .expect("valid")
        .into();
    group.bench_function("simulation/token_bucket", |b| {
        let simulation = Simulation::new(bucket, poisson, minute);
        b.iter(|| black_box(simulation.run(|_| {}).expect("valid")));
    });
    group.bench_function("scenario_100ms_ticks/token_bucket", |b| {
        let scenario = Scenario::new(poisson, minute, vec![Lane::global("tb", bucket)]);
        b.iter(|| {
            black_box(scenario.run(&MemoryStores, |tick| {
                black_box(tick);
            }))
        });
    });
    group.bench_function("scenario_100ms_ticks/compare_window_vs_log", |b| {
        let lanes = vec![
            Lane::global(
                "sw",
                SlidingWindow::new(8_000, Duration::from_secs(1)).expect("valid"),
            ),
            Lane::global(
                "log",
                SlidingLog::new(8_000, Duration::from_secs(1)).expect("valid"),
            ),
        ];
        let scenario = Scenario::new(poisson, minute, lanes);
        b.iter(|| {
            black_box(scenario.run(&MemoryStores, |tick| {
                black_box(tick);
            }))
        });
    });
    group.finish();
}

criterion_group!(benches, minute_of_10k);
criterion_main!(benches);
