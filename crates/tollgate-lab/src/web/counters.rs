//! The counters of the lab's runs that `/api/status` reports, and the guard that counts a run as active.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters of the lab's runs, shared by every request.
#[derive(Debug, Default)]
pub struct RunCounters {
    pub(super) active: AtomicU64,
    pub(super) started: AtomicU64,
    pub(super) skipped_ticks: AtomicU64,
    pub(super) stopped_early: AtomicU64,
    pub(super) platform_active: AtomicU64,
}

/// What `/api/status` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    /// Runs streaming now.
    pub active_runs: u64,
    /// Runs started since the server began.
    pub runs_started: u64,
    /// Ticks dropped because a browser read too slowly.
    pub ticks_skipped: u64,
    /// Runs stopped because their browser went away.
    pub runs_stopped_early: u64,
    /// Platform runs (`/api/platform`) working now.
    pub platform_runs_active: u64,
}

impl RunCounters {
    /// The counters now.
    pub fn status(&self) -> Status {
        Status {
            active_runs: self.active.load(Ordering::Relaxed),
            runs_started: self.started.load(Ordering::Relaxed),
            ticks_skipped: self.skipped_ticks.load(Ordering::Relaxed),
            runs_stopped_early: self.stopped_early.load(Ordering::Relaxed),
            platform_runs_active: self.platform_active.load(Ordering::Relaxed),
        }
    }
}

/// Counts a run as active until it is dropped.
pub(super) struct ActiveRun(pub(super) Arc<RunCounters>);

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Holds one of the platform runs allowed at once until it is dropped.
pub(super) struct PlatformSlot(Arc<RunCounters>);

impl PlatformSlot {
    /// A slot, unless `most` platform runs are working already.
    pub(super) fn take(counters: &Arc<RunCounters>, most: u64) -> Option<Self> {
        counters
            .platform_active
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < most).then_some(n + 1)
            })
            .ok()?;
        counters.started.fetch_add(1, Ordering::Relaxed);
        Some(PlatformSlot(Arc::clone(counters)))
    }
}

impl Drop for PlatformSlot {
    fn drop(&mut self) {
        self.0.platform_active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_slots_are_bounded_and_return_when_dropped() {
        let counters = Arc::new(RunCounters::default());
        let first = PlatformSlot::take(&counters, 2).expect("a first slot");
        let second = PlatformSlot::take(&counters, 2).expect("a second slot");
        assert!(PlatformSlot::take(&counters, 2).is_none(), "no third");
        assert_eq!(counters.status().platform_runs_active, 2);
        drop(first);
        assert_eq!(counters.status().platform_runs_active, 1);
        let third = PlatformSlot::take(&counters, 2).expect("a slot again");
        drop((second, third));
        let status = counters.status();
        assert_eq!((status.platform_runs_active, status.runs_started), (0, 3));
    }
}
