//! A flood of one and a half million keys against the default store (fixed
//! window, a million keys) leaves its full keys closed and keeps the
//! process's resident memory near the store's byte ceiling.
//!
//! Alone in its test binary, so that nothing else allocates meanwhile. It
//! reads the peak resident set size (`VmHWM`) that Linux reports.

#![cfg(target_os = "linux")]

use std::time::Duration;

use tollgate_core::{FixedWindow, Timestamp};
use tollgate_store::{StoreConfig, WordStore};

/// Megabytes of `field` (a `kB` line) in `/proc/self/status`.
fn status_mb(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let kb: usize = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a kB figure");
    kb / 1024
}

const MB: usize = 1024 * 1024;

#[test]
fn a_million_key_flood_of_the_default_store_keeps_full_windows_closed_and_rss_near_the_ceiling() {
    let before = status_mb("VmHWM:");
    let fw = FixedWindow::new(1000, Duration::from_secs(60)).unwrap();
    let store = WordStore::new(fw, StoreConfig::default());
    let ceiling = store.max_memory_bytes();
    assert!(ceiling <= 1_000_000 * 30 + 64 * 256, "{ceiling}");
    // One second into a minute window, a key uses all of its 1000.
    let t0 = Timestamp::from_secs(1_700_000_041);
    let reset = Timestamp::from_secs(1_700_000_100);
    assert!(store.check("victim", t0, 1000).is_allowed());
    let mut most_bytes = 0;
    for n in 0..1_500_000u64 {
        let t = Timestamp::from_nanos(t0.as_nanos() + n * 10_000);
        store.check(&n, t, 1);
        if n % 1000 == 0 {
            assert!(!store.check("victim", t, 1).is_allowed(), "at key {n}");
            assert!(store.len() <= 1_000_000);
            most_bytes = most_bytes.max(store.memory_bytes());
        }
    }
    let just_before = Timestamp::from_nanos(reset.as_nanos() - 1);
    assert!(!store.check("victim", just_before, 1).is_allowed());
    assert_eq!(store.check("victim", reset, 1).remaining(), 999);
    let peak = status_mb("VmHWM:");
    println!(
        "1.5M-key flood: {} keys held, at most {most_bytes} bytes of tables \
         (ceiling {ceiling}); peak RSS {peak} MB, {before} MB before the store",
        store.len()
    );
    assert!(most_bytes <= ceiling);
    // Beyond the tables: a shard's rebuild (its old table and list of live
    // keys, about 1.2 MB), tables retired moments ago, and the allocator's
    // fragmentation. Retired tables left in a thread's garbage bag (64 of
    // them) once took the peak to twice the ceiling.
    assert!(
        peak <= before + ceiling / MB + 12,
        "peak RSS {peak} MB against a {} MB store ceiling",
        ceiling / MB
    );
}
