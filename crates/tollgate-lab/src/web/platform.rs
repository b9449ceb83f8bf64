//! `GET /api/platform`: the platform scenario of `tollgate simulate --modes`, from a query, bounded for a browser.
//!
//! The query's fields ([`PLATFORM_FIELDS`], [`PLATFORM_CHOICES`], and the
//! texts `modes` and `scale`) build a [`PlatformScenario`] — the same type,
//! run by the same [`PlatformScenario::run_timed`], as the simulator's — and
//! the answer is its summary (the simulator's `--json`) with the schedule
//! and the platform cap the page marks on its chart. A run is bounded in
//! keys, instances, scale steps and offered requests, and only
//! [`MAX_PLATFORM_RUNS`] run at once; a value out of bounds gets a 400
//! naming its field.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use tollgate_core::share::{AuthorityPolicy, HolderPolicy, Share, StarterPolicy};
use tollgate_core::{ConfigError, MonotonicClock};

use super::counters::PlatformSlot;
use super::lab::Lab;
use super::params::{Choices, Field, ParamError, Params, int, real};
use super::query::Pairs;
use super::reply::{bad_request, json_response};
use crate::scenario::RunError;
use crate::{
    KeyDistribution, PlatformMode, PlatformScenario, PlatformSummary, Simulation, parse_scale_step,
};

/// The most requests one platform run may be offered (rate × duration): every mode decides each.
pub const MAX_PLATFORM_ARRIVALS: f64 = 1_000_000.0;

/// The most steps of a platform run's scale schedule.
pub const MAX_PLATFORM_SCALE_STEPS: usize = 8;

/// The most platform runs working at once; one more gets 503 until one ends.
pub const MAX_PLATFORM_RUNS: u64 = 2;

/// The platform view's numeric fields, with their ranges and defaults.
pub const PLATFORM_FIELDS: &[Field] = &[
    int("keys", 1.0, 200_000.0, 10_000.0),
    real("zipf_s", 0.01, 5.0, 1.0),
    int("instances", 1.0, 64.0, 10.0),
    // Each key's token bucket: tokens per second and capacity.
    int("key_rate", 1.0, 1e6, 100.0),
    int("key_burst", 1.0, 1e6, 100.0),
    // The platform's token bucket (rate 0: none; burst 0: the rate).
    int("platform_rate", 0.0, 1e8, 25_000.0),
    int("platform_burst", 0.0, 1e8, 0.0),
    real("offered_rate", 1.0, 1e6, 50_000.0),
    int("duration_s", 1.0, 60.0, 10.0),
    // The shares mode's starter slots (0: off) and the 1/D of each limit they hold.
    int("starter_slots", 0.0, 1_024.0, 0.0),
    int("starter_divisor", 1.0, 1e6, 16.0),
    int("seed", 0.0, 9_007_199_254_740_991.0, 1.0),
];

/// The platform view's text fields and the values each accepts (the first is the default).
pub const PLATFORM_CHOICES: Choices = &[
    ("mode", &["platform"]),
    ("distribution", &["zipf", "uniform"]),
    ("arrivals", &["poisson", "steady"]),
];

/// The modes run when `modes` is absent.
const DEFAULT_MODES: &str = "exact,leased,shares,local";

/// One step of the schedule, as the page marks it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
struct ScaleMark {
    /// Seconds from the start.
    at_s: f64,
    /// Instances live from then on.
    instances: u32,
}

/// `/api/platform`'s answer: the simulator's summary, and what the chart marks.
#[derive(Serialize)]
struct PlatformView {
    #[serde(flatten)]
    summary: PlatformSummary,
    /// Instances live at the start.
    instances: u32,
    /// The scale changes, in time order.
    scale: Vec<ScaleMark>,
    /// The platform cap in requests per second, if there is one.
    platform_rate: Option<u64>,
}

/// Reads a platform run from a query's pairs; the error names the field at fault.
pub fn parse_platform(pairs: &[(String, String)]) -> Result<PlatformScenario, ParamError> {
    let p = Params::from_pairs(
        pairs,
        PLATFORM_FIELDS,
        PLATFORM_CHOICES,
        &["modes", "scale"],
    )?;
    p.choice("mode")?;
    let duration = Duration::from_secs(p.int("duration_s")?);
    let rate = p.real("offered_rate")?;
    let offered = rate * duration.as_secs_f64();
    if offered > MAX_PLATFORM_ARRIVALS {
        return Err(ParamError::new(
            "duration_s",
            format!(
                "offered_rate × duration_s is {offered:.0} requests; a lab platform run takes at most \
                 {MAX_PLATFORM_ARRIVALS:.0} (use tollgate simulate --modes for larger runs)"
            ),
        ));
    }
    let platform_rate = p.int("platform_rate")?;
    let platform_burst = match p.int("platform_burst")? {
        0 => platform_rate,
        burst => burst,
    };
    let scenario = PlatformScenario {
        start: Simulation::DEFAULT_START,
        duration,
        rate,
        poisson: p.choice("arrivals")? == "poisson",
        seed: p.int("seed")?,
        keys: p.int("keys")? as u32,
        distribution: match p.choice("distribution")? {
            "zipf" => KeyDistribution::Zipf(p.real("zipf_s")?),
            _ => KeyDistribution::Uniform,
        },
        instances: p.int("instances")? as u32,
        scale: scale(&p, duration)?,
        key_limit: Share::per_second(p.int("key_rate")?, p.int("key_burst")?),
        platform_limit: (platform_rate > 0)
            .then(|| Share::per_second(platform_rate, platform_burst)),
        modes: modes(&p)?,
        store_rtt: Duration::from_micros(500),
        lease_period: Duration::from_secs(1),
        holder: HolderPolicy::default(),
        authority: AuthorityPolicy {
            starter: StarterPolicy {
                slots: p.int("starter_slots")? as u32,
                divisor: p.int("starter_divisor")?,
            },
            ..AuthorityPolicy::default()
        },
    };
    scenario.validate().map_err(config_error)?;
    Ok(scenario)
}

/// A scenario's complaint, pointed at the query's field.
fn config_error(error: ConfigError) -> ParamError {
    let field = match error.parameter() {
        "clients" => "keys",
        "arrival_rate" => "offered_rate",
        "burst" => "key_burst",
        other => other,
    };
    ParamError::new(field, error.reason())
}

/// The modes to run: known ones, each named once.
fn modes(p: &Params<'_>) -> Result<Vec<PlatformMode>, ParamError> {
    let list = p.given.get("modes").copied().unwrap_or(DEFAULT_MODES);
    let mut modes = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mode = PlatformMode::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                ParamError::new(
                    "modes",
                    format!("{name:?} is not one of exact, leased, shares, local"),
                )
            })?;
        if modes.contains(&mode) {
            return Err(ParamError::new("modes", format!("{name} is named twice")));
        }
        modes.push(mode);
    }
    if modes.is_empty() {
        return Err(ParamError::new(
            "modes",
            "name at least one of exact, leased, shares, local",
        ));
    }
    Ok(modes)
}

/// The scale schedule: `TIME=N` steps, comma-separated, each inside the run and its instances in range.
fn scale(p: &Params<'_>, duration: Duration) -> Result<Vec<(Duration, u32)>, ParamError> {
    let list = p.given.get("scale").copied().unwrap_or("");
    let steps = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|step| parse_scale_step(step).map_err(|e| ParamError::new("scale", e)))
        .collect::<Result<Vec<_>, _>>()?;
    if steps.len() > MAX_PLATFORM_SCALE_STEPS {
        return Err(ParamError::new(
            "scale",
            format!(
                "{} steps; a lab platform run takes at most {MAX_PLATFORM_SCALE_STEPS}",
                steps.len()
            ),
        ));
    }
    let most = PLATFORM_FIELDS
        .iter()
        .find(|f| f.name == "instances")
        .map_or(1, |f| f.max as u32);
    for &(at, n) in &steps {
        if at >= duration {
            return Err(ParamError::new(
                "scale",
                format!(
                    "a step at {} s is not inside the run's {} s",
                    at.as_secs_f64(),
                    duration.as_secs()
                ),
            ));
        }
        if n > most {
            return Err(ParamError::new(
                "scale",
                format!("{n} instances is more than {most}"),
            ));
        }
    }
    Ok(steps)
}

pub(super) async fn platform(State(lab): State<Lab>, query: Pairs) -> Response {
    let scenario = match query {
        Ok(Query(pairs)) => parse_platform(&pairs),
        Err(rejection) => Err(ParamError::new("query", rejection.body_text())),
    };
    let scenario = match scenario {
        Ok(scenario) => scenario,
        Err(error) => return bad_request(&error),
    };
    let Some(slot) = PlatformSlot::take(&lab.counters, MAX_PLATFORM_RUNS) else {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({
                "error": format!("{MAX_PLATFORM_RUNS} platform runs are working already; try again when one ends")
            }),
        );
    };
    let outcome = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let summary = scenario.run_timed(&MonotonicClock::new())?;
        let mut scale: Vec<ScaleMark> = scenario
            .scale
            .iter()
            .map(|&(at, instances)| ScaleMark {
                at_s: at.as_secs_f64(),
                instances,
            })
            .collect();
        scale.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        Ok::<_, RunError>(PlatformView {
            summary,
            instances: scenario.instances,
            scale,
            platform_rate: scenario
                .platform_limit
                .map(|p| p.rate / tollgate_core::share::MILLI_PER_TOKEN),
        })
    })
    .await;
    match outcome {
        Ok(Ok(view)) => json_response(StatusCode::OK, &view),
        Ok(Err(RunError::Config(error))) => bad_request(&config_error(error)),
        // In memory no store fails; should one, the run is not the caller's fault.
        Ok(Err(RunError::Store(message))) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &serde_json::json!({ "error": message }),
        ),
        Err(_) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "error": "the run was cancelled" }),
        ),
    }
}
