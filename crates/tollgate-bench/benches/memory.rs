//! Heap bytes per key, Tollgate and governor side by side, counted by a wrapping allocator.
//!
//! Run with `cargo bench -p tollgate-bench --bench memory`. For each limiter
//! it inserts N distinct `u64` keys and reports the growth of live heap bytes
//! divided by N, at several N (a table's load factor varies with N, so one
//! figure alone would flatter or punish either side).

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use tollgate_core::{Gcra, SlidingLog, Timestamp};
use tollgate_store::{LogStore, StoreConfig, WordStore};

/// The system allocator, counting live bytes.
struct CountingAllocator;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is only bookkeeping.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Heap bytes per key after `fill` inserts `n` keys into what `make` builds.
fn bytes_per_key<T>(n: u64, make: impl FnOnce() -> T, fill: impl Fn(&T, u64)) -> f64 {
    let before = live();
    let limiter = make();
    for k in 0..n {
        fill(&limiter, k);
    }
    let grown = live() - before;
    drop(limiter);
    grown as f64 / n as f64
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (e.g. a filter) is ignored.
    let sizes = [100_000u64, 500_000, 1_000_000, 2_000_000];
    let now = Timestamp::from_secs(1_700_000_000);
    let gcra = Gcra::new(1000, Duration::from_secs(1), 1000).expect("valid");
    println!("heap bytes per key (u64 keys, one request each)");
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>16}",
        "keys", "governor", "tollgate", "ratio", "tollgate (log)"
    );
    for n in sizes {
        let quota = Quota::per_second(NonZeroU32::new(1000).expect("non-zero"));
        let governor = bytes_per_key(
            n,
            || RateLimiter::dashmap_with_clock(quota, FakeRelativeClock::default()),
            |lim, k| {
                let _ = lim.check_key(&k);
            },
        );
        let tollgate = bytes_per_key(
            n,
            || WordStore::new(gcra, StoreConfig::with_max_keys(4_000_000)),
            |store, k| {
                store.check(&k, now, 1);
            },
        );
        let log = SlidingLog::new(10, Duration::from_secs(60)).expect("valid");
        let tollgate_log = bytes_per_key(
            n,
            || LogStore::new(log, StoreConfig::with_max_keys(4_000_000)),
            |store, k| {
                store.check(&k, now, 1);
            },
        );
        println!(
            "{n:>10} {governor:>10.1} {tollgate:>10.1} {:>10.2} {tollgate_log:>16.1}",
            tollgate / governor
        );
    }
}
