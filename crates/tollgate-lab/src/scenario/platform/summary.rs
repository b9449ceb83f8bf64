//! A platform run timed on a clock, and its schedule read from text: what `tollgate simulate --modes` and the lab's platform view share.

use std::time::Duration;

use serde::Serialize;
use tollgate_core::Clock;
use tollgate_core::duration::parse_duration;

use super::model::{PlatformReport, PlatformScenario};
use crate::scenario::RunError;
use crate::store::{MemoryStores, StoreFactory};

/// What [`PlatformSummary::store`] says of a run in memory.
pub const IN_MEMORY: &str = "memory";

/// A platform run's report with how long it took.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlatformSummary {
    /// What the run found.
    #[serde(flatten)]
    pub report: PlatformReport,
    /// Where the lanes ran: [`IN_MEMORY`], or what ran on Redis.
    pub store: String,
    /// Seconds of wall time the run took.
    pub wall_seconds: f64,
    /// Decisions of every lane per second of wall time.
    pub decisions_per_second_simulated: f64,
}

impl PlatformScenario {
    /// Runs every lane over the trace in memory, timed on `clock`.
    pub fn run_timed(&self, clock: &impl Clock) -> Result<PlatformSummary, RunError> {
        self.run_timed_on(&MemoryStores, IN_MEMORY.to_owned(), clock)
    }

    /// Runs every lane over the trace on `stores` (see
    /// [`PlatformScenario::run_on`]), timed on `clock`; `store` says where.
    pub fn run_timed_on(
        &self,
        stores: &dyn StoreFactory,
        store: String,
        clock: &impl Clock,
    ) -> Result<PlatformSummary, RunError> {
        let began = clock.now();
        let report = self.run_on(stores)?;
        let wall = clock.now().saturating_since(began).as_secs_f64();
        let decided: u64 = report.lanes.iter().map(|l| l.decisions).sum();
        Ok(PlatformSummary {
            decisions_per_second_simulated: if wall > 0.0 {
                decided as f64 / wall
            } else {
                0.0
            },
            wall_seconds: wall,
            report,
            store,
        })
    }
}

/// Parses one step of a scale schedule, `TIME=N` (e.g. `20s=15`: 15 instances from 20 s on).
pub fn parse_scale_step(text: &str) -> Result<(Duration, u32), String> {
    let (at, n) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not TIME=INSTANCES (e.g. 20s=15)"))?;
    let at = parse_duration(at).map_err(|e| e.to_string())?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{n:?} is not a number of instances"))?;
    if n == 0 {
        return Err(format!("{text:?}: at least 1 instance"));
    }
    Ok((at, n))
}
