//! What a run will show before it starts: its ticks and lanes with their expectations (`GET /api/expect`, the `start` event).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, DelayMode};

use super::lab::Lab;
use super::params::{Mode, RunRequest};
use super::query::{Pairs, parse_query};
use super::reply::{bad_request, json_response};
use crate::{Expectation, state_level_meaning};

/// What a run will show before it starts.
#[derive(Serialize)]
pub(super) struct Plan {
    mode: Mode,
    ticks: u64,
    tick_ns: u64,
    duration_ns: u64,
    clients: u32,
    lanes: Vec<PlannedLane>,
}

#[derive(Serialize)]
struct PlannedLane {
    label: String,
    description: String,
    state_meaning: &'static str,
    /// Whose state the state line reads: the chosen client's key, averaged over sidecars.
    state_of: String,
    /// Whether the lane is a shaper (a leaky bucket that delays): the page draws its delays.
    shaper: bool,
    limit: u64,
    sidecars: u32,
    expectation: Expectation,
}

pub(super) fn plan(request: &RunRequest) -> Plan {
    let scenario = &request.scenario;
    Plan {
        mode: request.mode,
        ticks: scenario.ticks(),
        tick_ns: u64::try_from(scenario.tick.as_nanos()).unwrap_or(u64::MAX),
        duration_ns: u64::try_from(scenario.duration.as_nanos()).unwrap_or(u64::MAX),
        clients: scenario.clients,
        lanes: scenario
            .lanes
            .iter()
            .zip(scenario.expectations())
            .zip(&request.descriptions)
            .map(|((lane, expectation), description)| PlannedLane {
                label: lane.label.clone(),
                description: description.clone(),
                state_meaning: state_level_meaning(&lane.algorithm),
                state_of: state_of(scenario.state_client, lane.placement.stores()),
                shaper: matches!(
                    lane.algorithm,
                    AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(b))
                        if b.mode() != DelayMode::NoDelay
                ),
                limit: lane.algorithm.capacity(),
                sidecars: lane.placement.stores(),
                expectation,
            })
            .collect(),
    }
}

/// Whose state a lane's state line reads, in words.
fn state_of(client: u32, sidecars: u32) -> String {
    if sidecars > 1 {
        format!("client {client}'s key, mean over the {sidecars} sidecars")
    } else {
        format!("client {client}'s key")
    }
}

pub(super) async fn expect(State(lab): State<Lab>, query: Pairs) -> Response {
    match parse_query(&lab, query) {
        Ok(request) => json_response(StatusCode::OK, &plan(&request)),
        Err(error) => bad_request(&error),
    }
}
