//! The lab's retry storm (docs/lab.md, scenario 6) from the command line: each lane's load, admissions and busiest second.
//!
//! 20 requests per second meet a fixed window of 50 per 10 s for 60 s; a
//! refused request comes back up to 5 times. Per lane it prints the
//! decisions the limit made, how many were retries, how many new requests
//! the clients dropped, how many they gave up after their last retry, how
//! many refused requests still wait in a client when the run ends, what was
//! admitted, and the busiest second after the first window (the second
//! wave), also as a multiple of the offered 20 per second.
//!
//! ```sh
//! cargo run -p tollgate-lab --example retry_storm
//! ```

use std::time::Duration;

use tollgate_core::FixedWindow;
use tollgate_lab::{MemoryStores, Scenario, Traffic, storm_lanes};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let window = FixedWindow::new(50, Duration::from_secs(10))?;
    let mut scenario = Scenario::new(
        Traffic::steady(20.0)?,
        Duration::from_secs(60),
        storm_lanes(window.into(), 5, Duration::from_millis(10)),
    );
    scenario.tick = Duration::from_secs(1);
    let mut busiest = vec![0u64; scenario.lanes.len()];
    let report = scenario.run(&MemoryStores, |tick| {
        // The first window (ticks 0 to 9) has no retries from an earlier one.
        if tick.index >= 10 {
            for (peak, lane) in busiest.iter_mut().zip(&tick.lanes) {
                *peak = (*peak).max(lane.counts.arrivals);
            }
        }
    })?;
    println!(
        "{:<22} {:>6} {:>8} {:>8} {:>8} {:>8} {:>9} {:>16}",
        "clients", "load", "retries", "dropped", "gave up", "waiting", "admitted", "busiest second"
    );
    for (lane, peak) in report.lanes.iter().zip(busiest) {
        let (retries, gave_up) = (lane.retries.unwrap_or(0), lane.gave_up.unwrap_or(0));
        // Each refusal was retried, given up, or is still waiting for its retry.
        let waiting = lane.counts.rejected() - retries - gave_up;
        println!(
            "{:<22} {:>6} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} ({:.1}x)",
            lane.label,
            lane.counts.arrivals,
            retries,
            lane.dropped_by_clients.unwrap_or(0),
            gave_up,
            waiting,
            lane.counts.admitted,
            peak,
            peak as f64 / 20.0
        );
    }
    Ok(())
}
