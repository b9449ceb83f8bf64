//! A run's query: its parameters read, its store chosen, and a run too large for a remote store refused.

use std::sync::Arc;

use axum::extract::Query;

use super::lab::Lab;
use super::params::{ParamError, RunRequest, parse_with_replays};
use crate::StoreFactory;

/// The most script calls (arrivals × lanes, plus one state read per store
/// and tick) a run on a remote store may make: on a loopback Redis about
/// 80,000 go through per second, pipelined a tick at a time, so a run of
/// this size takes over ten seconds.
pub const MAX_REMOTE_CALLS: f64 = 1_000_000.0;

/// The query as pairs, or the 400 for one that cannot be read.
pub(super) type Pairs =
    Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>;

pub(super) fn parse_query(lab: &Lab, query: Pairs) -> Result<RunRequest, ParamError> {
    parse_query_with_store(lab, query).map(|(request, _)| request)
}

/// Parses a run's query and picks its store (`store=memory|redis`), refusing
/// a run on a remote store that would take more than [`MAX_REMOTE_CALLS`].
pub(super) fn parse_query_with_store(
    lab: &Lab,
    query: Pairs,
) -> Result<(RunRequest, Arc<dyn StoreFactory>), ParamError> {
    let Query(mut pairs) = query.map_err(|rejection| ParamError {
        field: "query".to_owned(),
        error: format!("query: {}", rejection.body_text()),
    })?;
    let mut choice = None;
    if let Some(i) = pairs.iter().position(|(name, _)| name == "store") {
        choice = Some(pairs.remove(i).1);
        if pairs.iter().any(|(name, _)| name == "store") {
            return Err(ParamError {
                field: "store".to_owned(),
                error: "store: is given twice".to_owned(),
            });
        }
    }
    let stores = lab.chosen_store(choice.as_deref())?;
    let request = parse_with_replays(&pairs, &|id| lab.replay(id))?;
    if stores.is_remote() {
        let scenario = &request.scenario;
        let arrivals = scenario.source.expected_arrivals(scenario.duration);
        let store_count: u32 = scenario.lanes.iter().map(|l| l.placement.stores()).sum();
        let calls = arrivals * scenario.lanes.len() as f64
            + scenario.ticks() as f64 * f64::from(store_count);
        if calls > MAX_REMOTE_CALLS {
            return Err(ParamError {
                field: "duration".to_owned(),
                error: format!(
                    "duration: on Redis every decision is a script call; this run would make about {calls:.0} \
                     calls and a Redis run makes at most {MAX_REMOTE_CALLS:.0} \
                     (shorten the run, lower the rate, or choose store=memory)"
                ),
            });
        }
    }
    Ok((request, stores))
}
