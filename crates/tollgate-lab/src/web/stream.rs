//! `GET /api/run`: a run streamed over Server-Sent Events, paced, skipping ticks a slow browser cannot take.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::counters::ActiveRun;
use super::lab::Lab;
use super::params::ParamError;
use super::plan::plan;
use super::query::{Pairs, parse_query_with_store};
use super::reply::{bad_request, json_response};
use crate::{RunReport, Tick};

/// How many tick events may wait for a slow browser before ticks are skipped.
pub const TICK_BUFFER: usize = 16;

/// How long the last tick and the end event may wait for a stalled browser before the run gives up.
const END_EVENT_BUDGET: Duration = Duration::from_secs(30);

/// A tick as streamed: the tick and how many ticks this stream has skipped so far.
#[derive(Serialize)]
struct TickEvent<'a> {
    #[serde(flatten)]
    tick: &'a Tick,
    skipped: u64,
}

#[derive(Serialize)]
struct EndEvent<'a> {
    report: &'a RunReport,
    skipped: u64,
}

pub(super) async fn run(State(lab): State<Lab>, query: Pairs) -> Response {
    let (request, stores) = match parse_query_with_store(&lab, query) {
        Ok(parsed) => parsed,
        Err(error) => return bad_request(&error),
    };
    let remote = stores.is_remote();
    // A remote store's connection work blocks: make the stores off the async threads.
    let made = if remote {
        let scenario = request.scenario.clone();
        match tokio::task::spawn_blocking(move || scenario.runner(stores.as_ref())).await {
            Ok(made) => made,
            Err(_) => {
                return json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &serde_json::json!({ "error": "the run was cancelled" }),
                );
            }
        }
    } else {
        request.scenario.runner(stores.as_ref())
    };
    let runner = match made {
        Ok(runner) => runner,
        Err(error) => {
            return bad_request(&ParamError {
                field: error.parameter().to_owned(),
                error: error.to_string(),
            });
        }
    };
    let (tx, rx) = mpsc::channel::<Event>(TICK_BUFFER);
    let start = Event::default()
        .event("start")
        .json_data(plan(&request))
        .unwrap_or_else(|_| Event::default().event("start"));
    // The channel is empty: the start event always fits.
    let _ = tx.try_send(start);
    lab.counters.started.fetch_add(1, Ordering::Relaxed);
    lab.counters.active.fetch_add(1, Ordering::Relaxed);
    let guard = ActiveRun(Arc::clone(&lab.counters));
    tokio::spawn(stream_run(
        runner,
        remote,
        request.speed,
        request.scenario.tick,
        tx,
        guard,
    ));
    Sse::new(ReceiverStream::new(rx).map(Ok::<Event, Infallible>))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}

/// Steps the run and sends its ticks, paced by `speed` (virtual seconds per second; 0 = no pacing).
///
/// A `remote` store's runner steps on a blocking thread, one tick at a time.
/// When a store fails, the stream ends with a `failed` event naming why.
async fn stream_run(
    mut runner: crate::Runner,
    remote: bool,
    speed: f64,
    tick: Duration,
    tx: mpsc::Sender<Event>,
    guard: ActiveRun,
) {
    let counters = Arc::clone(&guard.0);
    #[expect(
        clippy::disallowed_methods,
        reason = "paces the stream in real time; no decision reads it"
    )]
    let began = tokio::time::Instant::now();
    let wall_per_tick = (speed > 0.0).then(|| tick.as_secs_f64() / speed);
    let mut skipped = 0u64;
    let mut sent = 0u64;
    loop {
        let tick = if remote {
            let stepped = tokio::task::spawn_blocking(move || {
                let tick = runner.next_tick();
                (runner, tick)
            })
            .await;
            let Ok((back, tick)) = stepped else {
                return;
            };
            runner = back;
            tick
        } else {
            runner.next_tick()
        };
        let Some(tick) = tick else {
            break;
        };
        let event = Event::default()
            .event("tick")
            .json_data(TickEvent {
                tick: &tick,
                skipped,
            })
            .unwrap_or_else(|_| Event::default().event("tick"));
        // The last tick always goes through, so the charts end where the run does.
        let delivered = if tick.index + 1 == runner.ticks() {
            match tokio::time::timeout(END_EVENT_BUDGET, tx.send(event)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(TrySendError::Closed(error.0)),
                Err(_) => {
                    counters.stopped_early.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        } else {
            tx.try_send(event)
        };
        match delivered {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                skipped += 1;
                counters.skipped_ticks.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Closed(_)) => {
                counters.stopped_early.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        sent += 1;
        match wall_per_tick {
            Some(seconds) => {
                let offset = Duration::try_from_secs_f64(seconds * sent as f64)
                    .unwrap_or(Duration::from_secs(u64::from(u32::MAX)));
                let due = began
                    .checked_add(offset)
                    .unwrap_or(began + Duration::from_secs(86_400 * 365));
                tokio::select! {
                    () = tx.closed() => {
                        counters.stopped_early.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    () = tokio::time::sleep_until(due) => {}
                }
            }
            None => tokio::task::yield_now().await,
        }
    }
    if let Some(failure) = runner.failure() {
        let failed = Event::default()
            .event("failed")
            .json_data(serde_json::json!({ "field": "store", "error": failure }))
            .unwrap_or_else(|_| Event::default().event("failed"));
        let _ = tokio::time::timeout(END_EVENT_BUDGET, tx.send(failed)).await;
        drop(guard);
        return;
    }
    let report = runner.finish();
    let end = Event::default()
        .event("end")
        .json_data(EndEvent {
            report: &report,
            skipped,
        })
        .unwrap_or_else(|_| Event::default().event("end"));
    if !matches!(
        tokio::time::timeout(END_EVENT_BUDGET, tx.send(end)).await,
        Ok(Ok(()))
    ) {
        counters.stopped_early.fetch_add(1, Ordering::Relaxed);
    }
    drop(guard);
}
