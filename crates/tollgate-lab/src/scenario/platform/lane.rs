//! What every mode of the platform scenario implements: deciding an arrival, scaling, finishing the run.

use tollgate_core::Timestamp;

use super::report::LaneStats;
use super::trace::Arrival;

/// One mode's instances deciding the trace.
pub(super) trait PlatformLane {
    /// Decides `arrival` at `now` (or holds it until its wait ends), recording into `stats`.
    fn decide(&mut self, arrival: Arrival, now: Timestamp, stats: &mut LaneStats);

    /// From `now`, `instances` instances are live.
    fn scale(&mut self, now: Timestamp, instances: u32, stats: &mut LaneStats) {
        let _ = (now, instances, stats);
    }

    /// The run ends at `now`: decide whatever still waits.
    fn finish(&mut self, now: Timestamp, stats: &mut LaneStats) {
        let _ = (now, stats);
    }

    /// Script calls this lane sent to a remote store (0 when it runs in memory).
    fn store_calls(&self) -> u64 {
        0
    }

    /// Why this lane's store stopped answering, once it has (the run then fails).
    fn failure(&self) -> Option<String> {
        None
    }
}
