//! Time per rate-limit decision, Tollgate and governor side by side in one run.
//!
//! Every group pairs a Tollgate limiter with the governor limiter that does
//! the same job, with the same class of clock: precise (both read the TSC
//! through quanta) or coarse (both read a millisecond ticker). Run with
//! `cargo bench -p tollgate-bench --bench decisions`.
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark times itself with the real clock"
)]
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented entry point"
)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use governor::clock::{QuantaClock, QuantaUpkeepClock};
use governor::{Quota, RateLimiter};
use tollgate_core::{
    AnyWordAlgorithm, Clock, CoarseClock, DelayMode, FixedWindow, Gcra, LeakyBucket, LogState,
    MonotonicClock, SlidingLog, SlidingWindow, Timestamp, TokenBucket, WordAlgorithm,
};
use tollgate_store::{DirectLimiter, StoreConfig, WordStore};

const MILLION: u64 = 1_000_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// A quota that never denies at benchmark speeds: 10⁹ per second, burst 10⁹.
fn generous_quota() -> Quota {
    Quota::per_second(nz(1_000_000_000)).allow_burst(nz(1_000_000_000))
}

fn generous_gcra() -> Gcra {
    Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000).expect("valid")
}

/// A quota that denies everything after the first request: 1 per hour.
fn stingy_quota() -> Quota {
    Quota::per_hour(nz(1))
}

fn stingy_gcra() -> Gcra {
    Gcra::new(1, Duration::from_secs(3600), 1).expect("valid")
}

/// A per-key quota under which every key stays live for the whole run: one
/// per second with a burst of 1000. Each visit adds a second of backlog, so
/// no key becomes fresh (and droppable) and every check is still allowed.
fn live_key_quota() -> Quota {
    Quota::per_second(nz(1)).allow_burst(nz(1000))
}

fn live_key_gcra() -> Gcra {
    Gcra::new(1, Duration::from_secs(1), 1000).expect("valid")
}

fn upkeep_clock() -> QuantaUpkeepClock {
    QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("quanta upkeep thread")
}

/// One key, one thread: the cost of a decision when nothing contends.
fn single_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_key");
    for (clock_name, coarse) in [("precise", false), ("coarse", true)] {
        // Allowed.
        let id = |who: &str| BenchmarkId::new(format!("allow/{clock_name}"), who);
        if coarse {
            let gov = RateLimiter::direct_with_clock(generous_quota(), upkeep_clock());
            g.bench_function(id("governor"), |b| {
                b.iter(|| black_box(gov.check().is_ok()))
            });
            let tg = DirectLimiter::new(generous_gcra(), CoarseClock::new());
            g.bench_function(id("tollgate"), |b| {
                b.iter(|| black_box(tg.check(1).is_allowed()))
            });
        } else {
            let gov = RateLimiter::direct_with_clock(generous_quota(), QuantaClock::default());
            g.bench_function(id("governor"), |b| {
                b.iter(|| black_box(gov.check().is_ok()))
            });
            let tg = DirectLimiter::new(generous_gcra(), MonotonicClock::new());
            g.bench_function(id("tollgate"), |b| {
                b.iter(|| black_box(tg.check(1).is_allowed()))
            });
        }
        // Denied.
        let id = |who: &str| BenchmarkId::new(format!("deny/{clock_name}"), who);
        if coarse {
            let gov = RateLimiter::direct_with_clock(stingy_quota(), upkeep_clock());
            let _ = gov.check();
            g.bench_function(id("governor"), |b| {
                b.iter(|| black_box(gov.check().is_ok()))
            });
            let tg = DirectLimiter::new(stingy_gcra(), CoarseClock::new());
            tg.check(1);
            g.bench_function(id("tollgate"), |b| {
                b.iter(|| black_box(tg.check(1).is_allowed()))
            });
        } else {
            let gov = RateLimiter::direct_with_clock(stingy_quota(), QuantaClock::default());
            let _ = gov.check();
            g.bench_function(id("governor"), |b| {
                b.iter(|| black_box(gov.check().is_ok()))
            });
            let tg = DirectLimiter::new(stingy_gcra(), MonotonicClock::new());
            tg.check(1);
            g.bench_function(id("tollgate"), |b| {
                b.iter(|| black_box(tg.check(1).is_allowed()))
            });
        }
    }
    // One key of a keyed limiter (the lookup included), coarse clocks.
    let gov = RateLimiter::dashmap_with_clock(generous_quota(), upkeep_clock());
    g.bench_function(BenchmarkId::new("keyed_allow/coarse", "governor"), |b| {
        b.iter(|| black_box(gov.check_key(&7u64).is_ok()))
    });
    let clock = CoarseClock::new();
    let store = WordStore::new(generous_gcra(), StoreConfig::with_max_keys(1024));
    g.bench_function(BenchmarkId::new("keyed_allow/coarse", "tollgate"), |b| {
        b.iter(|| black_box(store.check(&7u64, clock.now(), 1).is_allowed()))
    });
    g.finish();
}

/// A fixed pseudo-random permutation of `0..n`, so lookups defeat the prefetcher.
fn permutation(n: u64) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..n).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..keys.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        keys.swap(i, (x % (i as u64 + 1)) as usize);
    }
    keys
}

/// One million distinct keys, each already known and live, visited in random order.
fn million_keys(c: &mut Criterion) {
    let mut g = c.benchmark_group("million_keys");
    let keys = permutation(MILLION);
    let gov = RateLimiter::dashmap_with_clock(live_key_quota(), upkeep_clock());
    for k in &keys {
        let _ = gov.check_key(k);
    }
    let mut i = 0usize;
    g.bench_function("governor", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(gov.check_key(&keys[i]).is_ok())
        })
    });
    drop(gov);
    let clock = CoarseClock::new();
    let store = WordStore::new(
        live_key_gcra(),
        StoreConfig::with_max_keys(2 * MILLION as usize),
    );
    for k in &keys {
        store.check(k, clock.now(), 1);
    }
    assert_eq!(store.len(), MILLION as usize, "every key is held");
    let mut i = 0usize;
    g.bench_function("tollgate", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(store.check(&keys[i], clock.now(), 1).is_allowed())
        })
    });
    g.finish();
}

/// Runs `work` `iters` times on each of two threads at once; returns the
/// slower thread's time, so time/iters is the time per check per thread.
fn on_two_threads(iters: u64, work: impl Fn() + Sync) -> Duration {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        work();
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .max()
            .unwrap_or_default()
    })
}

/// One hot key shared by two threads, in a keyed limiter (coarse clocks).
fn hot_key_two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("hot_key_2_threads");
    for (name, quota, gcra) in [
        ("allow", generous_quota(), generous_gcra()),
        ("deny", stingy_quota(), stingy_gcra()),
    ] {
        let gov = RateLimiter::dashmap_with_clock(quota, upkeep_clock());
        let _ = gov.check_key(&42u64);
        g.bench_function(BenchmarkId::new(name, "governor"), |b| {
            b.iter_custom(|iters| {
                on_two_threads(iters, || {
                    black_box(gov.check_key(&42u64).is_ok());
                })
            })
        });
        let clock = CoarseClock::new();
        let store = WordStore::new(gcra, StoreConfig::with_max_keys(1024));
        store.check(&42u64, clock.now(), 1);
        g.bench_function(BenchmarkId::new(name, "tollgate"), |b| {
            b.iter_custom(|iters| {
                on_two_threads(iters, || {
                    black_box(store.check(&42u64, clock.now(), 1).is_allowed());
                })
            })
        });
    }
    g.finish();
}

/// A key never seen before: lookup miss plus insert. Limiters are rebuilt
/// (untimed) every million keys so neither grows without bound; the keys stay
/// live, so the store keeps (and grows for) every one of them.
fn first_seen_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("first_seen_key");
    let quota = live_key_quota();
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(MILLION);
                let gov = RateLimiter::dashmap_with_clock(quota, upkeep_clock());
                let start = Instant::now();
                for k in 0..n {
                    black_box(gov.check_key(&k).is_ok());
                }
                total += start.elapsed();
                done += n;
            }
            total
        })
    });
    let clock = CoarseClock::new();
    let alg = live_key_gcra();
    g.bench_function("tollgate", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(MILLION);
                let store = WordStore::new(alg, StoreConfig::with_max_keys(2 * MILLION as usize));
                let start = Instant::now();
                for k in 0..n {
                    black_box(store.check(&k, clock.now(), 1).is_allowed());
                }
                total += start.elapsed();
                done += n;
            }
            total
        })
    });
    g.finish();
}

/// Each algorithm's pure decision on a local state (no store, no clock read).
fn algorithms(c: &mut Criterion) {
    let mut g = c.benchmark_group("algorithm_decide");
    let window = Duration::from_secs(60);
    let words: [(&str, AnyWordAlgorithm); 5] = [
        (
            "token_bucket",
            TokenBucket::new(1000, 100, Duration::from_secs(1))
                .expect("valid")
                .into(),
        ),
        (
            "gcra",
            Gcra::new(100, Duration::from_secs(1), 1000)
                .expect("valid")
                .into(),
        ),
        (
            "leaky_bucket",
            LeakyBucket::new(100, Duration::from_secs(1), 1000, DelayMode::Delay)
                .expect("valid")
                .into(),
        ),
        (
            "fixed_window",
            FixedWindow::new(1000, window).expect("valid").into(),
        ),
        (
            "sliding_window",
            SlidingWindow::new(1000, window).expect("valid").into(),
        ),
    ];
    for (name, alg) in words {
        let mut state = 0u64;
        let mut t = 1_700_000_000 * 1_000_000_000u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                t += 1_000_000; // 1 ms apart: a steady 1000/s stream
                let (d, new) = alg.decide(state, Timestamp::from_nanos(t), 1);
                if let Some(s) = new {
                    state = s;
                }
                black_box(d)
            })
        });
    }
    let log = SlidingLog::new(1000, window).expect("valid");
    let mut state = LogState::default();
    let mut t = 1_700_000_000 * 1_000_000_000u64;
    g.bench_function("sliding_log", |b| {
        b.iter(|| {
            t += 1_000_000;
            black_box(log.decide(&mut state, Timestamp::from_nanos(t), 1))
        })
    });
    g.finish();
}

/// The clocks themselves.
fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock_now");
    let precise = MonotonicClock::new();
    g.bench_function("monotonic", |b| b.iter(|| black_box(precise.now())));
    let coarse = CoarseClock::new();
    g.bench_function("coarse", |b| b.iter(|| black_box(coarse.now())));
    let governor_precise = QuantaClock::default();
    g.bench_function("governor_quanta", |b| {
        b.iter(|| black_box(governor::clock::Clock::now(&governor_precise)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = single_key, million_keys, hot_key_two_threads, first_seen_key, algorithms, clocks
}
criterion_main!(benches);
