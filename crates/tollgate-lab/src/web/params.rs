//! The lab's run parameters: parsed from a query string, checked against their ranges.
//!
//! Every field has a range ([`FIELDS`]); the page copies the same ranges into
//! its inputs' `min`/`max` (from `/api/fields`), and the server checks them
//! again here, answering 400 with a message that names the field.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use tollgate_core::{AnyAlgorithm, DelayMode, Timestamp};

use crate::{
    AlgorithmName, AlgorithmSpec, ArrivalSource, Lane, MAX_RETRIES, MAX_SIDECARS, Replay, Scenario,
    SpecError, TrafficName, TrafficSpec, storm_lanes,
};

/// How many uploaded traces the lab keeps (the oldest goes first).
pub const MAX_REPLAYS: usize = 32;

/// The most arrivals one lab run may have (a run streams; keep it to seconds of work).
pub const MAX_LAB_ARRIVALS: f64 = 5_000_000.0;

/// The slowest playback above 0: a hundredth of real time.
pub const MIN_SPEED: f64 = 0.01;

/// A bad parameter: the field it is in and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParamError {
    /// The query parameter, as the page names it.
    pub field: String,
    /// The whole message, starting with the field.
    pub error: String,
}

impl ParamError {
    pub(super) fn new(field: &str, reason: impl fmt::Display) -> Self {
        ParamError {
            field: field.to_owned(),
            error: format!("{field}: {reason}"),
        }
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.error)
    }
}

/// One numeric field: its name, range, default and whether it may hold a fraction.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Field {
    /// The query parameter.
    pub name: &'static str,
    /// The smallest value accepted.
    pub min: f64,
    /// The largest value accepted.
    pub max: f64,
    /// The value when the parameter is absent.
    pub default: f64,
    /// Whether fractions are allowed.
    pub fractional: bool,
}

pub(super) const fn int(name: &'static str, min: f64, max: f64, default: f64) -> Field {
    Field {
        name,
        min,
        max,
        default,
        fractional: false,
    }
}

pub(super) const fn real(name: &'static str, min: f64, max: f64, default: f64) -> Field {
    Field {
        name,
        min,
        max,
        default,
        fractional: true,
    }
}

/// Every numeric field of a run, with its range and default.
pub const FIELDS: &[Field] = &[
    // Token bucket.
    int("max_tokens", 1.0, 1e6, 10.0),
    int("tokens_per_fill", 1.0, 1e6, 5.0),
    int("fill_interval_ms", 1.0, 3_600_000.0, 1_000.0),
    // GCRA, and the window algorithms' limit.
    int("limit", 1.0, 1e6, 5.0),
    int("period_ms", 1.0, 3_600_000.0, 1_000.0),
    int("burst", 0.0, 1e6, 10.0),
    // Leaky bucket.
    int("rate", 1.0, 1e6, 5.0),
    int("delay_after", 0.0, 1e6, 0.0),
    // Window algorithms.
    int("window_ms", 1.0, 86_400_000.0, 1_000.0),
    // Traffic.
    real("arrival_rate", 0.001, 100_000.0, 20.0),
    real("peak_rate", 0.001, 100_000.0, 60.0),
    real("base_rate", 0.0, 100_000.0, 5.0),
    int("wave_period_ms", 1.0, 3_600_000.0, 10_000.0),
    real("duty", 0.01, 1.0, 0.5),
    real("from_rate", 0.0, 100_000.0, 0.0),
    real("to_rate", 0.0, 100_000.0, 40.0),
    int("ramp_over_ms", 1.0, 3_600_000.0, 20_000.0),
    int("spike_at_ms", 0.0, 3_600_000.0, 10_000.0),
    int("spike_length_ms", 1.0, 3_600_000.0, 3_000.0),
    // Run.
    int("duration_ms", 100.0, 3_600_000.0, 30_000.0),
    int("tick_ms", 10.0, 10_000.0, 100.0),
    real("speed", 0.0, 1_000.0, 1.0),
    int("seed", 0.0, 9_007_199_254_740_991.0, 1.0),
    int("clients", 1.0, 100.0, 1.0),
    // The client whose key the state line reads (below clients).
    int("state_client", 0.0, 99.0, 0.0),
    int("sidecars", 1.0, MAX_SIDECARS as f64, 4.0),
    // Fleet mode's leased lane: the quota lease period.
    int("lease_ms", 10.0, 60_000.0, 1_000.0),
    // Fleet mode's RLQS lane: the Envoys' report interval, and the share of requests on the first.
    int("report_ms", 100.0, 60_000.0, 1_000.0),
    int("hot_share", 0.0, 100.0, 0.0),
    // Retry-storm mode: retries per refused request, and the at-once clients' wait.
    int("max_retries", 0.0, MAX_RETRIES as f64, 5.0),
    int("retry_delay_ms", 1.0, 10_000.0, 10.0),
    int("cost", 1.0, 1_000.0, 1.0),
    int("samples", 0.0, 16.0, 4.0),
    int("start", 0.0, 9_000_000_000.0, 1_700_000_000.0),
    // The id of an uploaded trace (POST /api/replays), for traffic=replay.
    int("replay", 0.0, 9_007_199_254_740_991.0, 0.0),
];

/// The text fields and the values each accepts (the first is the default).
pub const CHOICES: &[(&str, &[&str])] = &[
    ("mode", &["single", "compare", "fleet", "storm"]),
    ("algorithm", &ALGORITHM_NAMES),
    ("leaky_mode", &["shaper", "policer"]),
    ("stagger", &["off", "on"]),
    ("traffic", &TRAFFIC_NAMES),
];

/// The algorithms' names, in [`AlgorithmName::ALL`]'s order (token bucket first, the default).
const ALGORITHM_NAMES: [&str; AlgorithmName::ALL.len()] = {
    let mut names = [""; AlgorithmName::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = AlgorithmName::ALL[i].name();
        i += 1;
    }
    names
};

/// The traffic profiles' names, in [`TrafficName::ALL`]'s order (steady first, the default).
const TRAFFIC_NAMES: [&str; TrafficName::ALL.len()] = {
    let mut names = [""; TrafficName::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = TrafficName::ALL[i].name();
        i += 1;
    }
    names
};

/// The algorithms compared when `algorithms` is absent in compare mode.
const DEFAULT_COMPARE: &str = "fixed_window,sliding_window,sliding_log";

/// How the page lays a run out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One algorithm.
    Single,
    /// Several algorithms on the same arrivals, side by side.
    Compare,
    /// One algorithm local on N sidecars, the same one global, and N
    /// instances leasing from the global one.
    Fleet,
    /// One algorithm, three kinds of clients: retrying at once, honouring
    /// Retry-After with jitter, and throttling themselves (SRE adaptive).
    Storm,
}

/// A checked run request: the scenario and how fast to play it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRequest {
    /// How the page lays it out.
    pub mode: Mode,
    /// What to simulate.
    pub scenario: Scenario,
    /// Virtual seconds per wall-clock second; 0 plays as fast as the browser reads.
    pub speed: f64,
    /// A description of each lane's algorithm, in lane order.
    pub descriptions: Vec<String>,
}

/// Parses and checks a run's query parameters (no uploaded traces).
pub fn parse(pairs: &[(String, String)]) -> Result<RunRequest, ParamError> {
    parse_with_replays(pairs, &|_| None)
}

/// Parses and checks a run's query parameters; `replays` finds an uploaded trace by its id.
pub fn parse_with_replays(
    pairs: &[(String, String)],
    replays: &dyn Fn(u64) -> Option<Replay>,
) -> Result<RunRequest, ParamError> {
    let p = Params::from_pairs(pairs, FIELDS, CHOICES, &["algorithms"])?;
    let mode = match p.choice("mode")? {
        "compare" => Mode::Compare,
        "fleet" => Mode::Fleet,
        "storm" => Mode::Storm,
        _ => Mode::Single,
    };
    let names: Vec<&str> = match mode {
        Mode::Compare => compared_algorithms(&p)?,
        _ => vec![p.choice("algorithm")?],
    };
    let mut lanes = Vec::new();
    let mut descriptions = Vec::new();
    for name in &names {
        let (algorithm, description) = build_algorithm(&p, name)?;
        descriptions.push(description);
        if mode == Mode::Fleet {
            let sidecars = p.int("sidecars")? as u32;
            lanes.push(Lane::local(
                format!("local ×{sidecars}"),
                algorithm,
                sidecars,
            ));
            lanes.push(Lane::global("global", algorithm));
            descriptions.push(descriptions[0].clone());
            lanes.push(Lane::leased(
                format!("leased ×{sidecars}"),
                algorithm,
                sidecars,
                p.millis("lease_ms")?,
            ));
            descriptions.push(descriptions[0].clone());
            lanes.push(Lane::quota(
                format!("RLQS ×{sidecars}"),
                algorithm,
                sidecars,
                p.millis("report_ms")?,
                (p.int("hot_share")? * 10) as u32,
            ));
            descriptions.push(descriptions[0].clone());
        } else if mode == Mode::Storm {
            let max_retries = p.int("max_retries")? as u32;
            lanes.extend(storm_lanes(
                algorithm,
                max_retries,
                p.millis("retry_delay_ms")?,
            ));
            descriptions.push(descriptions[0].clone());
            descriptions.push(descriptions[0].clone());
        } else {
            lanes.push(Lane::global(*name, algorithm));
        }
    }
    if p.choice("stagger")? == "on" {
        let mut any = false;
        for lane in lanes.iter_mut().filter(|l| {
            matches!(
                l.algorithm,
                AnyAlgorithm::Word(tollgate_core::AnyWordAlgorithm::FixedWindow(_))
            )
        }) {
            lane.stagger = true;
            any = true;
        }
        if !any {
            return Err(ParamError::new(
                "stagger",
                "staggers fixed windows only; choose the fixed window",
            ));
        }
    }
    let duration = p.millis("duration_ms")?;
    let traffic = build_traffic(&p, duration, replays)?;
    let mut scenario = Scenario::new(traffic, duration, lanes);
    scenario.seed = p.int("seed")?;
    scenario.clients = p.int("clients")? as u32;
    scenario.state_client = p.int("state_client")? as u32;
    scenario.cost = p.int("cost")?;
    scenario.tick = p.millis("tick_ms")?;
    scenario.samples_per_tick = p.int("samples")? as usize;
    scenario.start = Timestamp::from_secs(p.int("start")?);
    let expected = scenario.source.expected_arrivals(duration);
    if expected > MAX_LAB_ARRIVALS {
        return Err(ParamError::new(
            "duration_ms",
            format!(
                "this traffic for {} s averages {expected:.0} requests; a lab run streams at most {MAX_LAB_ARRIVALS:.0} \
                 (use tollgate simulate for longer runs)",
                duration.as_secs_f64()
            ),
        ));
    }
    scenario
        .validate()
        .map_err(|e| ParamError::new(field_of(e.parameter()), e.reason()))?;
    let speed = p.real("speed")?;
    if speed > 0.0 && speed < MIN_SPEED {
        return Err(ParamError::new(
            "speed",
            format!("{speed} is slower than {MIN_SPEED}× real time (0 plays as fast as possible)"),
        ));
    }
    Ok(RunRequest {
        mode,
        scenario,
        speed,
        descriptions,
    })
}

/// The algorithms of compare mode: at least two, each valid and named once.
fn compared_algorithms<'a>(p: &Params<'a>) -> Result<Vec<&'a str>, ParamError> {
    let list = p
        .given
        .get("algorithms")
        .copied()
        .unwrap_or(DEFAULT_COMPARE);
    let names: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let valid = CHOICES[1].1;
    if names.len() < 2 {
        return Err(ParamError::new(
            "algorithms",
            "compare mode needs at least two algorithms, comma-separated",
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if !valid.contains(name) {
            return Err(ParamError::new(
                "algorithms",
                format!("{name:?} is not one of {}", valid.join(", ")),
            ));
        }
        if names[..i].contains(name) {
            return Err(ParamError::new(
                "algorithms",
                format!("{name} is named twice"),
            ));
        }
    }
    Ok(names)
}

/// The query field a simulator parameter comes from.
fn field_of(parameter: &str) -> &str {
    match parameter {
        "rate" => "arrival_rate",
        "peak" => "peak_rate",
        "base" => "base_rate",
        "period" => "wave_period_ms",
        "from" => "from_rate",
        "to" => "to_rate",
        "over" => "ramp_over_ms",
        "length" => "spike_length_ms",
        "tick" => "tick_ms",
        "duration" => "duration_ms",
        other => other,
    }
}

/// The text fields and the values each accepts (the first is the default).
pub(super) type Choices = &'static [(&'static str, &'static [&'static str])];

/// A query's parameters by name, read against a table of fields and choices.
pub(super) struct Params<'a> {
    pub(super) given: BTreeMap<&'a str, &'a str>,
    fields: &'static [Field],
    choices: Choices,
}

impl<'a> Params<'a> {
    /// The given parameters by name, refusing repeated ones and any not in
    /// `fields`, `choices` or the free-text `texts`.
    pub(super) fn from_pairs(
        pairs: &'a [(String, String)],
        fields: &'static [Field],
        choices: Choices,
        texts: &[&str],
    ) -> Result<Self, ParamError> {
        let mut given: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, value) in pairs {
            let known = fields.iter().any(|f| f.name == name)
                || choices.iter().any(|(c, _)| c == name)
                || texts.contains(&name.as_str());
            if !known {
                return Err(ParamError::new(name, "is not a parameter of a lab run"));
            }
            if given.insert(name, value).is_some() {
                return Err(ParamError::new(name, "is given twice"));
            }
        }
        Ok(Params {
            given,
            fields,
            choices,
        })
    }

    fn field(&self, name: &str) -> &'static Field {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .expect("every field read is in the table")
    }

    /// A number in its field's range (the default when absent).
    pub(super) fn real(&self, name: &str) -> Result<f64, ParamError> {
        let field = self.field(name);
        let Some(text) = self.given.get(name) else {
            return Ok(field.default);
        };
        let value: f64 = text
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| ParamError::new(name, format!("{text:?} is not a number")))?;
        if !field.fractional && value.fract() != 0.0 {
            return Err(ParamError::new(
                name,
                format!("{value} is not a whole number"),
            ));
        }
        if value < field.min || value > field.max {
            return Err(ParamError::new(
                name,
                format!("{value} is outside {} to {}", field.min, field.max),
            ));
        }
        Ok(value)
    }

    pub(super) fn int(&self, name: &str) -> Result<u64, ParamError> {
        self.real(name).map(|v| v as u64)
    }

    fn millis(&self, name: &str) -> Result<Duration, ParamError> {
        self.int(name).map(Duration::from_millis)
    }

    pub(super) fn choice(&self, name: &str) -> Result<&str, ParamError> {
        let (_, valid) = self
            .choices
            .iter()
            .find(|(c, _)| *c == name)
            .expect("every choice read is in the table");
        match self.given.get(name) {
            None => Ok(valid[0]),
            Some(value) => valid.iter().copied().find(|v| v == value).ok_or_else(|| {
                ParamError::new(
                    name,
                    format!("{value:?} is not one of {}", valid.join(", ")),
                )
            }),
        }
    }
}

/// An error from a spec, pointed at the page's field.
fn spec(error: SpecError, field_of: fn(&str) -> &str) -> ParamError {
    match error {
        SpecError::Missing(parameter) => ParamError::new(parameter, "is required"),
        SpecError::Invalid(error) => ParamError::new(field_of(error.parameter()), error.reason()),
    }
}

/// The query field an algorithm's parameter comes from.
fn algorithm_field(parameter: &str) -> &str {
    match parameter {
        "fill_interval" => "fill_interval_ms",
        "period" => "period_ms",
        "window" => "window_ms",
        "delay" => "delay_after",
        other => other,
    }
}

/// The algorithm `name` from the fields it reads.
fn build_algorithm(p: &Params<'_>, name: &str) -> Result<(AnyAlgorithm, String), ParamError> {
    let name = AlgorithmName::from_name(name)
        .ok_or_else(|| ParamError::new("algorithm", format!("{name:?} is not an algorithm")))?;
    let mut algorithm = AlgorithmSpec::new(name);
    match name {
        AlgorithmName::TokenBucket => {
            algorithm.max_tokens = Some(p.int("max_tokens")?);
            algorithm.tokens_per_fill = Some(p.int("tokens_per_fill")?);
            algorithm.fill_interval = Some(p.millis("fill_interval_ms")?);
        }
        AlgorithmName::Gcra => {
            algorithm.limit = Some(p.int("limit")?);
            algorithm.period = Some(p.millis("period_ms")?);
            algorithm.burst = Some(p.int("burst")?);
        }
        AlgorithmName::LeakyBucket => {
            algorithm.rate = Some(p.int("rate")?);
            algorithm.period = Some(p.millis("period_ms")?);
            algorithm.burst = Some(p.int("burst")?);
            algorithm.leaky_mode =
                match (p.choice("leaky_mode")?, p.given.contains_key("delay_after")) {
                    ("policer", _) => DelayMode::NoDelay,
                    (_, true) => DelayMode::DelayAfter(p.int("delay_after")?),
                    _ => DelayMode::Delay,
                };
        }
        AlgorithmName::FixedWindow | AlgorithmName::SlidingWindow | AlgorithmName::SlidingLog => {
            algorithm.limit = Some(p.int("limit")?);
            algorithm.window = Some(p.millis("window_ms")?);
        }
    }
    algorithm.build().map_err(|e| spec(e, algorithm_field))
}

/// The arrivals of the chosen traffic profile from the fields it reads.
fn build_traffic(
    p: &Params<'_>,
    duration: Duration,
    replays: &dyn Fn(u64) -> Option<Replay>,
) -> Result<ArrivalSource, ParamError> {
    let name = p.choice("traffic")?;
    let name = TrafficName::from_name(name)
        .ok_or_else(|| ParamError::new("traffic", format!("{name:?} is not a profile")))?;
    let mut traffic = TrafficSpec::new(name);
    match name {
        TrafficName::Replay => {
            if !p.given.contains_key("replay") {
                return Err(ParamError::new(
                    "replay",
                    "traffic=replay needs the id of a trace uploaded to /api/replays",
                ));
            }
            let id = p.int("replay")?;
            let replay = replays(id).ok_or_else(|| {
                ParamError::new(
                    "replay",
                    format!("no uploaded trace has id {id} (the lab keeps the last {MAX_REPLAYS}; upload it again)"),
                )
            })?;
            traffic.replay = Some(replay);
        }
        TrafficName::Steady | TrafficName::Poisson => {
            traffic.arrival_rate = Some(p.real("arrival_rate")?);
        }
        TrafficName::Square => {
            traffic.peak_rate = Some(p.real("peak_rate")?);
            traffic.base_rate = Some(p.real("base_rate")?);
            traffic.wave_period = Some(p.millis("wave_period_ms")?);
            traffic.duty = Some(p.real("duty")?);
        }
        TrafficName::Ramp => {
            traffic.from_rate = Some(p.real("from_rate")?);
            traffic.to_rate = Some(p.real("to_rate")?);
            traffic.ramp_over = Some(p.millis("ramp_over_ms")?);
        }
        TrafficName::Spike => {
            traffic.base_rate = Some(p.real("base_rate")?);
            traffic.peak_rate = Some(p.real("peak_rate")?);
            traffic.spike_at = Some(p.millis("spike_at_ms")?);
            traffic.spike_length = Some(p.millis("spike_length_ms")?);
        }
    }
    let (source, _) = traffic.build(duration).map_err(|e| spec(e, field_of))?;
    Ok(source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientBehavior, Placement, Simulation};

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_make_a_valid_single_run() {
        let run = parse(&[]).unwrap();
        assert_eq!(run.mode, Mode::Single);
        assert_eq!(run.scenario.lanes.len(), 1);
        assert_eq!(run.scenario.duration, Duration::from_secs(30));
        assert_eq!(run.speed, 1.0);
        let start = FIELDS.iter().find(|f| f.name == "start").unwrap().default as u64;
        assert_eq!(Timestamp::from_secs(start), Simulation::DEFAULT_START);
        assert!(
            FIELDS
                .iter()
                .all(|f| f.min <= f.default && f.default <= f.max),
            "defaults in range"
        );
    }

    #[test]
    fn compare_and_fleet_make_their_lanes() {
        let run = parse(&pairs(&[
            ("mode", "compare"),
            ("algorithms", "fixed_window,sliding_log"),
        ]))
        .unwrap();
        let labels: Vec<&str> = run
            .scenario
            .lanes
            .iter()
            .map(|l| l.label.as_str())
            .collect();
        assert_eq!(labels, vec!["fixed_window", "sliding_log"]);
        let run = parse(&pairs(&[("mode", "fleet"), ("sidecars", "7")])).unwrap();
        let labels: Vec<&str> = run
            .scenario
            .lanes
            .iter()
            .map(|l| l.label.as_str())
            .collect();
        assert_eq!(labels, vec!["local ×7", "global", "leased ×7", "RLQS ×7"]);
        assert_eq!(run.descriptions.len(), 4);
        assert_eq!(
            run.scenario.lanes[2].placement,
            Placement::Leased {
                instances: 7,
                period_ns: 1_000_000_000
            }
        );
    }

    #[test]
    fn storm_runs_one_limit_behind_three_kinds_of_clients() {
        let run = parse(&pairs(&[("mode", "storm"), ("max_retries", "3")])).unwrap();
        let clients: Vec<ClientBehavior> = run.scenario.lanes.iter().map(|l| l.clients).collect();
        assert_eq!(
            clients,
            vec![
                ClientBehavior::RetryAtOnce {
                    max_retries: 3,
                    delay_ns: 10_000_000
                },
                ClientBehavior::HonourRetryAfter { max_retries: 3 },
                ClientBehavior::Adaptive {
                    max_retries: 3,
                    k: 2.0
                },
            ]
        );
        assert_eq!(run.descriptions.len(), 3);
        let error = parse(&pairs(&[("mode", "storm"), ("max_retries", "21")])).unwrap_err();
        assert_eq!(error.field, "max_retries", "{error:?}");
    }

    #[test]
    fn bad_values_name_their_field() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: &[Case<'_>] = &[
            (
                &[("max_tokens", "0")],
                "max_tokens",
                "max_tokens: 0 is outside 1 to 1000000",
            ),
            (
                &[("max_tokens", "2.5")],
                "max_tokens",
                "max_tokens: 2.5 is not a whole number",
            ),
            (
                &[("arrival_rate", "fast")],
                "arrival_rate",
                "arrival_rate: \"fast\" is not a number",
            ),
            (
                &[("sidecars", "16"), ("mode", "fleet")],
                "sidecars",
                "sidecars: 16 is outside 1 to 15",
            ),
            (
                &[("algorithm", "magic")],
                "algorithm",
                "algorithm: \"magic\" is not one of",
            ),
            (
                &[("colour", "red")],
                "colour",
                "colour: is not a parameter of a lab run",
            ),
            (
                &[("mode", "compare"), ("algorithms", "gcra")],
                "algorithms",
                "algorithms: compare mode needs",
            ),
            (
                &[
                    ("algorithm", "leaky_bucket"),
                    ("burst", "2"),
                    ("delay_after", "3"),
                ],
                "delay_after",
                "delay_after: delay=3 is larger than burst=2",
            ),
            (
                &[("traffic", "ramp"), ("from_rate", "0"), ("to_rate", "0")],
                "to_rate",
                "to_rate: a ramp from 0 to 0",
            ),
            (
                &[("arrival_rate", "100000"), ("duration_ms", "3600000")],
                "duration_ms",
                "duration_ms: this traffic",
            ),
            (
                &[("duration_ms", "3600000"), ("tick_ms", "10")],
                "tick_ms",
                "tick_ms:",
            ),
        ];
        for (query, field, message) in cases {
            let error = parse(&pairs(query)).unwrap_err();
            assert_eq!(error.field, *field, "{query:?}: {error}");
            assert!(error.error.starts_with(message), "{query:?}: {error}");
        }
        let twice = vec![
            ("seed".to_owned(), "1".to_owned()),
            ("seed".to_owned(), "2".to_owned()),
        ];
        assert_eq!(parse(&twice).unwrap_err().error, "seed: is given twice");
    }
}
