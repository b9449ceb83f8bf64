//! One traffic profile named with its parameters, built into a run's arrivals.
//!
//! The CLI's flags (`tollgate simulate`) and the lab's query parameters both
//! fill a [`TrafficSpec`]; building it checks what the chosen profile needs
//! and what [`Traffic::validate`] accepts, and describes the result in one line.

use std::time::Duration;

use tollgate_core::duration::format_duration;

use super::{ArrivalSource, Replay, Traffic};
use crate::SpecError;
use crate::algorithm::need;

/// The traffic profiles a spec can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrafficName {
    /// Evenly spaced arrivals.
    Steady,
    /// A Poisson process.
    Poisson,
    /// A square wave.
    Square,
    /// A linear ramp.
    Ramp,
    /// A spike above a base rate.
    Spike,
    /// Recorded timestamps.
    Replay,
}

impl TrafficName {
    /// Every profile.
    pub const ALL: [TrafficName; 6] = [
        TrafficName::Steady,
        TrafficName::Poisson,
        TrafficName::Square,
        TrafficName::Ramp,
        TrafficName::Spike,
        TrafficName::Replay,
    ];

    /// The profile's name: `steady`, `poisson`, `square`, `ramp`, `spike` or `replay`.
    pub const fn name(self) -> &'static str {
        match self {
            TrafficName::Steady => "steady",
            TrafficName::Poisson => "poisson",
            TrafficName::Square => "square",
            TrafficName::Ramp => "ramp",
            TrafficName::Spike => "spike",
            TrafficName::Replay => "replay",
        }
    }

    /// The profile named `name` exactly, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// A traffic profile and its parameters, each as given (`None` when not).
///
/// Steady and Poisson read `arrival_rate`; a square wave `peak_rate`,
/// `wave_period`, `base_rate` (default 0) and `duty` (default one half); a
/// ramp `to_rate`, `from_rate` (default 0) and `ramp_over` (default the whole
/// run); a spike `peak_rate`, `spike_at`, `spike_length` and `base_rate`
/// (default 0); a replay its `replay`.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficSpec {
    /// The profile.
    pub name: TrafficName,
    /// Steady and Poisson: requests per second.
    pub arrival_rate: Option<f64>,
    /// Square, spike: requests per second at the peak.
    pub peak_rate: Option<f64>,
    /// Square, spike: requests per second outside the peak.
    pub base_rate: Option<f64>,
    /// Square: one high phase plus one low phase.
    pub wave_period: Option<Duration>,
    /// Square: the fraction of each period at the peak.
    pub duty: Option<f64>,
    /// Ramp: requests per second at the start.
    pub from_rate: Option<f64>,
    /// Ramp: requests per second at the top and after.
    pub to_rate: Option<f64>,
    /// Ramp: how long the climb takes.
    pub ramp_over: Option<Duration>,
    /// Spike: when it begins.
    pub spike_at: Option<Duration>,
    /// Spike: how long it lasts.
    pub spike_length: Option<Duration>,
    /// Replay: the recorded trace.
    pub replay: Option<Replay>,
}

impl TrafficSpec {
    /// A spec of `name` with no parameter given.
    pub fn new(name: TrafficName) -> Self {
        TrafficSpec {
            name,
            arrival_rate: None,
            peak_rate: None,
            base_rate: None,
            wave_period: None,
            duty: None,
            from_rate: None,
            to_rate: None,
            ramp_over: None,
            spike_at: None,
            spike_length: None,
            replay: None,
        }
    }

    /// Builds the arrivals of a run of `duration`, with a one-line description
    /// such as `steady, 10 req/s evenly spaced`.
    ///
    /// Fails on the first parameter the profile needs and was not given, or
    /// on one [`Traffic::validate`] rejects.
    pub fn build(&self, duration: Duration) -> Result<(ArrivalSource, String), SpecError> {
        let (traffic, description) = match self.name {
            TrafficName::Steady => {
                let rate = need(self.arrival_rate, "arrival_rate")?;
                (
                    Traffic::Steady { rate },
                    format!("steady, {rate} req/s evenly spaced"),
                )
            }
            TrafficName::Poisson => {
                let rate = need(self.arrival_rate, "arrival_rate")?;
                (
                    Traffic::Poisson { rate },
                    format!("poisson, {rate} req/s on average"),
                )
            }
            TrafficName::Square => {
                let peak = need(self.peak_rate, "peak_rate")?;
                let period = need(self.wave_period, "wave_period")?;
                let base = self.base_rate.unwrap_or(0.0);
                let duty = self.duty.unwrap_or(Traffic::DEFAULT_DUTY);
                (
                    Traffic::Square {
                        peak,
                        base,
                        period,
                        duty,
                    },
                    format!(
                        "square, {peak} req/s for {}% of every {}, {base} req/s otherwise",
                        format_percent(duty),
                        format_duration(period)
                    ),
                )
            }
            TrafficName::Ramp => {
                let from = self.from_rate.unwrap_or(0.0);
                let to = need(self.to_rate, "to_rate")?;
                let over = self.ramp_over.unwrap_or(duration);
                (
                    Traffic::Ramp { from, to, over },
                    format!("ramp, {from} to {to} req/s over {}", format_duration(over)),
                )
            }
            TrafficName::Spike => {
                let peak = need(self.peak_rate, "peak_rate")?;
                let at = need(self.spike_at, "spike_at")?;
                let length = need(self.spike_length, "spike_length")?;
                let base = self.base_rate.unwrap_or(0.0);
                (
                    Traffic::Spike {
                        base,
                        peak,
                        at,
                        length,
                    },
                    format!(
                        "spike, {base} req/s with {peak} req/s from {} for {}",
                        format_duration(at),
                        format_duration(length)
                    ),
                )
            }
            TrafficName::Replay => {
                let replay = need(self.replay.clone(), "replay")?;
                let description = format!(
                    "replay of {} timestamps over {}",
                    replay.len(),
                    format_duration(replay.span())
                );
                return Ok((ArrivalSource::Replay(replay), description));
            }
        };
        traffic.validate()?;
        Ok((ArrivalSource::Profile(traffic), description))
    }
}

/// Formats a fraction as a percentage with at most two decimals: `50`, `33.33`.
fn format_percent(fraction: f64) -> String {
    let text = format!("{:.2}", fraction * 100.0);
    match text.split_once('.') {
        Some((whole, decimals)) if decimals.trim_end_matches('0').is_empty() => whole.to_owned(),
        Some((whole, decimals)) => format!("{whole}.{}", decimals.trim_end_matches('0')),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_keep_at_most_two_decimals() {
        assert_eq!(format_percent(1.0), "100");
        assert_eq!(format_percent(0.5), "50");
        assert_eq!(format_percent(0.25), "25");
        assert_eq!(format_percent(0.105), "10.5");
        assert_eq!(format_percent(1.0 / 3.0), "33.33");
    }

    #[test]
    fn a_spec_builds_its_arrivals_or_names_the_parameter() {
        let mut spec = TrafficSpec::new(TrafficName::Spike);
        spec.peak_rate = Some(50.0);
        assert_eq!(
            spec.build(Duration::from_secs(10)),
            Err(SpecError::Missing("spike_at"))
        );
        let mut ramp = TrafficSpec::new(TrafficName::Ramp);
        ramp.to_rate = Some(20.0);
        let (source, description) = ramp.build(Duration::from_secs(10)).unwrap();
        assert_eq!(source.expected_arrivals(Duration::from_secs(10)), 100.0);
        assert_eq!(description, "ramp, 0 to 20 req/s over 10s");
        ramp.to_rate = Some(0.0);
        let Err(SpecError::Invalid(error)) = ramp.build(Duration::from_secs(10)) else {
            panic!("a ramp from 0 to 0 is refused");
        };
        assert_eq!(error.parameter(), "to");
    }
}
