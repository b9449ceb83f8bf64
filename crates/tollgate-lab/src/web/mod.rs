//! The web lab: a page served from the binary and runs streamed to it over Server-Sent Events.
//!
//! * `GET /` (and `/lab.js`, `/lab.css`): the page, embedded in the binary.
//! * `GET /api/fields`: every parameter's range and default, for the page's inputs.
//! * `GET /api/expect?…`: the expectation for a run's parameters, or 400 naming the bad field.
//! * `GET /api/run?…`: the run itself as an SSE stream: a `start` event, one
//!   `tick` event per tick of virtual time, and an `end` event with the totals.
//!   A browser that reads slowly misses ticks (each carries running totals,
//!   so nothing is lost but detail); a browser that goes away stops the run.
//! * `GET /api/summary?…`: the same run's totals without streaming.
//! * `POST /api/replays`: upload a CSV of timestamps; answers its id for `traffic=replay&replay=ID`.
//! * `GET /api/status`: runs in progress, started, and ticks skipped, for tests and operators.

mod params;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, DelayMode};

use crate::{
    Expectation, MemoryStores, Replay, RunError, RunReport, StoreFactory, Tick, state_level_meaning,
};

pub use params::{
    CHOICES, FIELDS, Field, MAX_LAB_ARRIVALS, MAX_REPLAYS, Mode, ParamError, RunRequest, parse,
    parse_with_replays,
};

/// How many tick events may wait for a slow browser before ticks are skipped.
pub const TICK_BUFFER: usize = 16;

/// How long the last tick and the end event may wait for a stalled browser before the run gives up.
const END_EVENT_BUDGET: Duration = Duration::from_secs(30);

/// The most script calls (arrivals × lanes, plus one state read per store
/// and tick) a run on a remote store may make: on a loopback Redis about
/// 80,000 go through per second, pipelined a tick at a time, so a run of
/// this size takes over ten seconds.
pub const MAX_REMOTE_CALLS: f64 = 1_000_000.0;

const INDEX_HTML: &str = include_str!("assets/index.html");
const LAB_JS: &str = include_str!("assets/lab.js");
const LAB_CSS: &str = include_str!("assets/lab.css");

/// Counters of the lab's runs, shared by every request.
#[derive(Debug, Default)]
pub struct RunCounters {
    active: AtomicU64,
    started: AtomicU64,
    skipped_ticks: AtomicU64,
    stopped_early: AtomicU64,
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

/// The largest trace upload accepted, in bytes.
pub const MAX_REPLAY_BYTES: usize = 64 << 20;

/// Uploaded traces by id, the newest last.
#[derive(Debug, Default)]
struct Replays {
    next_id: u64,
    traces: VecDeque<(u64, Replay)>,
}

/// The lab's shared state: where decisions are kept, uploaded traces and the run counters.
#[derive(Clone, Debug)]
pub struct Lab {
    stores: Arc<dyn StoreFactory>,
    /// A Redis store the page may choose (`store=redis`), when the lab was started with one.
    redis: Option<Arc<dyn StoreFactory>>,
    counters: Arc<RunCounters>,
    replays: Arc<Mutex<Replays>>,
}

impl Default for Lab {
    fn default() -> Self {
        Self::new(Arc::new(MemoryStores))
    }
}

impl Lab {
    /// A lab deciding through `stores` (the in-memory store by default; a Redis store plugs in here).
    pub fn new(stores: Arc<dyn StoreFactory>) -> Self {
        Lab {
            stores,
            redis: None,
            counters: Arc::new(RunCounters::default()),
            replays: Arc::new(Mutex::new(Replays {
                next_id: 1,
                traces: VecDeque::new(),
            })),
        }
    }

    /// This lab, with runs deciding on `redis` by default (`store=memory` still runs in memory).
    pub fn with_redis(mut self, redis: Arc<dyn StoreFactory>) -> Self {
        self.redis = Some(redis);
        self
    }

    /// The store a run chose with `store=` (Redis by default when the lab has one).
    fn chosen_store(&self, choice: Option<&str>) -> Result<Arc<dyn StoreFactory>, ParamError> {
        match (choice, &self.redis) {
            (None | Some("redis"), Some(redis)) => Ok(Arc::clone(redis)),
            (None | Some("memory"), _) => Ok(Arc::clone(&self.stores)),
            (Some("redis"), None) => Err(ParamError {
                field: "store".to_owned(),
                error: "store: this lab was started without --redis URL, so runs use the in-memory store".to_owned(),
            }),
            (Some(other), _) => Err(ParamError {
                field: "store".to_owned(),
                error: format!("store: {other:?} is not one of memory, redis"),
            }),
        }
    }

    /// The run counters.
    pub fn counters(&self) -> &RunCounters {
        &self.counters
    }

    /// The lab's routes.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(index))
            .route("/lab.js", get(script))
            .route("/lab.css", get(style))
            .route("/api/fields", get(fields))
            .route("/api/expect", get(expect))
            .route("/api/summary", get(summary))
            .route("/api/run", get(run))
            .route("/api/status", get(status))
            .route(
                "/api/replays",
                post(upload_replay).layer(DefaultBodyLimit::max(MAX_REPLAY_BYTES)),
            )
            .fallback(not_found)
            .with_state(self)
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", LAB_JS)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", LAB_CSS)
}

async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &serde_json::json!({ "error": "no such page; the lab is at /" }),
    )
}

fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => (status, [(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot format the answer: {error}"),
        )
            .into_response(),
    }
}

fn bad_request(error: &ParamError) -> Response {
    json_response(StatusCode::BAD_REQUEST, error)
}

/// The query as pairs, or the 400 for one that cannot be read.
type Pairs = Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>;

fn parse_query(lab: &Lab, query: Pairs) -> Result<RunRequest, ParamError> {
    parse_query_with_store(lab, query).map(|(request, _)| request)
}

/// Parses a run's query and picks its store (`store=memory|redis`), refusing
/// a run on a remote store that would take more than [`MAX_REMOTE_CALLS`].
fn parse_query_with_store(
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

impl Lab {
    /// The uploaded trace with this id, if the lab still keeps it.
    fn replay(&self, id: u64) -> Option<Replay> {
        let replays = self.replays.lock();
        replays
            .traces
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, replay)| replay.clone())
    }
}

/// What an upload answers: the trace's id for `replay=`, its size and span.
#[derive(Serialize)]
struct Uploaded {
    id: u64,
    len: usize,
    span_ns: u64,
}

async fn upload_replay(State(lab): State<Lab>, body: Bytes) -> Response {
    let Ok(text) = std::str::from_utf8(&body) else {
        return bad_request(&ParamError {
            field: "replay".to_owned(),
            error: "replay: the upload is not UTF-8 text; send a CSV of timestamps in seconds"
                .to_owned(),
        });
    };
    let replay = match Replay::from_csv(text) {
        Ok(replay) => replay,
        Err(error) => {
            return bad_request(&ParamError {
                field: "replay".to_owned(),
                error: error.to_string(),
            });
        }
    };
    let answer = Uploaded {
        id: 0,
        len: replay.len(),
        span_ns: u64::try_from(replay.span().as_nanos()).unwrap_or(u64::MAX),
    };
    let id = {
        let mut replays = lab.replays.lock();
        let id = replays.next_id;
        replays.next_id += 1;
        if replays.traces.len() == MAX_REPLAYS {
            replays.traces.pop_front();
        }
        replays.traces.push_back((id, replay));
        id
    };
    json_response(StatusCode::OK, &Uploaded { id, ..answer })
}

#[derive(Serialize)]
struct FieldsAnswer {
    fields: &'static [Field],
    choices: Vec<Choice>,
    max_arrivals: f64,
    /// The stores a run may choose with `store=`, the default first.
    stores: Vec<&'static str>,
    /// The most script calls a run on Redis may make.
    max_remote_calls: f64,
}

#[derive(Serialize)]
struct Choice {
    name: &'static str,
    values: &'static [&'static str],
}

async fn fields(State(lab): State<Lab>) -> Response {
    json_response(
        StatusCode::OK,
        &FieldsAnswer {
            fields: FIELDS,
            choices: CHOICES
                .iter()
                .map(|&(name, values)| Choice { name, values })
                .collect(),
            max_arrivals: MAX_LAB_ARRIVALS,
            stores: if lab.redis.is_some() {
                vec!["redis", "memory"]
            } else {
                vec!["memory"]
            },
            max_remote_calls: MAX_REMOTE_CALLS,
        },
    )
}

/// What a run will show before it starts.
#[derive(Serialize)]
struct Plan {
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

fn plan(request: &RunRequest) -> Plan {
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

async fn expect(State(lab): State<Lab>, query: Pairs) -> Response {
    match parse_query(&lab, query) {
        Ok(request) => json_response(StatusCode::OK, &plan(&request)),
        Err(error) => bad_request(&error),
    }
}

async fn summary(State(lab): State<Lab>, query: Pairs) -> Response {
    let (request, stores) = match parse_query_with_store(&lab, query) {
        Ok(parsed) => parsed,
        Err(error) => return bad_request(&error),
    };
    let outcome =
        tokio::task::spawn_blocking(move || request.scenario.run(stores.as_ref(), |_| {})).await;
    match outcome {
        Ok(Ok(report)) => json_response(StatusCode::OK, &report),
        Ok(Err(RunError::Config(error))) => bad_request(&ParamError {
            field: error.parameter().to_owned(),
            error: error.to_string(),
        }),
        Ok(Err(RunError::Store(error))) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "field": "store", "error": error }),
        ),
        Err(_) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "error": "the run was cancelled" }),
        ),
    }
}

async fn status(State(lab): State<Lab>) -> Response {
    json_response(StatusCode::OK, &lab.counters.status())
}

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

async fn run(State(lab): State<Lab>, query: Pairs) -> Response {
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

/// Serves the lab on `listener` until `shutdown` completes, then stops at once
/// (open streams are cut: a run is only worth something to a browser watching it).
pub async fn serve(
    listener: tokio::net::TcpListener,
    lab: Lab,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tokio::select! {
        served = axum::serve(listener, lab.router()).into_future() => served,
        () = shutdown => Ok(()),
    }
}

/// Counts a run as active until it is dropped.
struct ActiveRun(Arc<RunCounters>);

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
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
