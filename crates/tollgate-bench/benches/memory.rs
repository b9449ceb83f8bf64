//! Heap bytes per key, Tollgate and governor side by side, counted by a wrapping allocator.
//!
//! Run with `cargo bench -p tollgate-bench --bench memory`. For each limiter
//! it inserts N distinct `u64` keys and reports the growth of live heap bytes
//! divided by N, at several N (a table's load factor varies with N, so one
//! figure alone would flatter or punish either side).
//!
//! Tollgate's store frees a replaced table once no reader can hold it (epoch
//! reclamation), which a live process does within microseconds. So for
//! Tollgate two figures are reported: right after the inserts ("filled"),
//! and after the epoch collector has run ("settled").

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

/// Lets the epoch collector free every table retired so far.
fn reclaim() {
    for _ in 0..1024 {
        crossbeam_epoch::pin().flush();
    }
}

/// Heap bytes per key after `fill` inserts `n` keys into what `make` builds:
/// right after the inserts, and once retired memory has been reclaimed.
fn bytes_per_key<T>(n: u64, make: impl FnOnce() -> T, fill: impl Fn(&T, u64)) -> (f64, f64) {
    reclaim();
    let before = live();
    let limiter = make();
    for k in 0..n {
        fill(&limiter, k);
    }
    let filled = live() - before;
    reclaim();
    let settled = live() - before;
    drop(limiter);
    reclaim();
    (filled as f64 / n as f64, settled as f64 / n as f64)
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (e.g. a filter) is ignored.
    let sizes = [100_000u64, 500_000, 1_000_000, 2_000_000];
    let now = Timestamp::from_secs(1_700_000_000);
    let gcra = Gcra::new(1000, Duration::from_secs(1), 1000).expect("valid");
    println!("heap bytes per key (u64 keys, one request each)");
    println!(
        "{:>10} {:>10} {:>17} {:>18} {:>10} {:>16}",
        "keys", "governor", "tollgate filled", "tollgate settled", "ratio", "tollgate (log)"
    );
    for n in sizes {
        let quota = Quota::per_second(NonZeroU32::new(1000).expect("non-zero"));
        let (governor, _) = bytes_per_key(
            n,
            || RateLimiter::dashmap_with_clock(quota, FakeRelativeClock::default()),
            |lim, k| {
                let _ = lim.check_key(&k);
            },
        );
        let (filled, settled) = bytes_per_key(
            n,
            || WordStore::new(gcra, StoreConfig::with_max_keys(4_000_000)),
            |store, k| {
                store.check(&k, now, 1);
            },
        );
        let log = SlidingLog::new(10, Duration::from_secs(60)).expect("valid");
        let (_, tollgate_log) = bytes_per_key(
            n,
            || LogStore::new(log, StoreConfig::with_max_keys(4_000_000)),
            |store, k| {
                store.check(&k, now, 1);
            },
        );
        println!(
            "{n:>10} {governor:>10.1} {filled:>17.1} {settled:>18.1} {:>10.2} {tollgate_log:>16.1}",
            settled / governor
        );
    }
}
