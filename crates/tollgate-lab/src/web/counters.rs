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
}

impl RunCounters {
    /// The counters now.
    pub fn status(&self) -> Status {
        Status {
            active_runs: self.active.load(Ordering::Relaxed),
            runs_started: self.started.load(Ordering::Relaxed),
            ticks_skipped: self.skipped_ticks.load(Ordering::Relaxed),
            runs_stopped_early: self.stopped_early.load(Ordering::Relaxed),
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
