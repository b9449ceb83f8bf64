//! Recorded traffic to replay, and the one source of a run's arrivals: a profile or a replay.

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{ConfigError, NANOS_PER_SEC};

use super::{Arrivals, Traffic};

/// Timestamps of recorded traffic to replay, as offsets from the first one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    offsets: Arc<[u64]>,
}

impl Replay {
    /// The most timestamps a replay may hold.
    pub const MAX_LEN: usize = 10_000_000;

    /// Reads a CSV of timestamps: the first column of every line, in seconds (decimals allowed).
    ///
    /// Any origin will do (Unix time, seconds since the capture began): the
    /// trace starts at its earliest timestamp. Lines need not be in order.
    /// A first line that is not a number is taken as a header; blank lines
    /// and lines starting with `#` are skipped.
    pub fn from_csv(text: &str) -> Result<Self, ConfigError> {
        let mut seconds: Vec<f64> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let field = line.split(',').next().unwrap_or("").trim();
            match field.parse::<f64>() {
                Ok(value) if value.is_finite() && value >= 0.0 => seconds.push(value),
                Ok(value) => {
                    return Err(ConfigError::new(
                        "replay",
                        format!(
                            "line {}: {value} is not a time of at least 0 seconds",
                            number + 1
                        ),
                    ));
                }
                Err(_) if seconds.is_empty() && number == 0 => {}
                Err(_) => {
                    return Err(ConfigError::new(
                        "replay",
                        format!("line {}: {field:?} is not a number of seconds", number + 1),
                    ));
                }
            }
            if seconds.len() > Self::MAX_LEN {
                return Err(ConfigError::new(
                    "replay",
                    format!("holds more than {} timestamps", Self::MAX_LEN),
                ));
            }
        }
        if seconds.is_empty() {
            return Err(ConfigError::new("replay", "holds no timestamps"));
        }
        seconds.sort_by(f64::total_cmp);
        let first = seconds[0];
        let offsets = seconds
            .iter()
            .map(|s| ((s - first) * NANOS_PER_SEC as f64).round() as u64)
            .collect();
        Ok(Replay { offsets })
    }

    /// A replay of these offsets in nanoseconds (sorted here).
    pub fn from_offsets(mut offsets: Vec<u64>) -> Self {
        offsets.sort_unstable();
        Replay {
            offsets: offsets.into(),
        }
    }

    /// The number of timestamps.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether the replay holds no timestamp.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The time from the first timestamp to just after the last.
    pub fn span(&self) -> Duration {
        Duration::from_nanos(self.offsets.last().map_or(0, |last| last + 1))
    }
}

/// Where a scenario's arrivals come from: a generated profile or a recorded trace.
#[derive(Clone, Debug, PartialEq)]
pub enum ArrivalSource {
    /// A traffic profile, generated from the seed.
    Profile(Traffic),
    /// Recorded timestamps, replayed as they are.
    Replay(Replay),
}

impl ArrivalSource {
    /// The source's name: a profile's name or `replay`.
    pub fn name(&self) -> &'static str {
        match self {
            ArrivalSource::Profile(traffic) => traffic.name(),
            ArrivalSource::Replay(_) => "replay",
        }
    }

    /// The expected number of arrivals in `duration`.
    pub fn expected_arrivals(&self, duration: Duration) -> f64 {
        match self {
            ArrivalSource::Profile(traffic) => traffic.expected_arrivals(duration),
            ArrivalSource::Replay(replay) => {
                let end = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
                replay.offsets.partition_point(|&t| t < end) as f64
            }
        }
    }

    /// The arrival times of a run of `duration`, in nanoseconds from its start, lazily.
    pub(crate) fn arrivals(&self, duration: Duration, seed: u64) -> SourceArrivals {
        match self {
            ArrivalSource::Profile(traffic) => {
                SourceArrivals::Profile(traffic.arrivals(duration, seed))
            }
            ArrivalSource::Replay(replay) => SourceArrivals::Replay {
                offsets: Arc::clone(&replay.offsets),
                next: 0,
                end: u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
            },
        }
    }
}

impl From<Traffic> for ArrivalSource {
    fn from(traffic: Traffic) -> Self {
        ArrivalSource::Profile(traffic)
    }
}

/// The lazy stream of arrival times from [`ArrivalSource::arrivals`], in nanoseconds from the start.
#[derive(Debug)]
pub(crate) enum SourceArrivals {
    /// A profile's generated arrivals.
    Profile(Arrivals),
    /// A replay's offsets below the run's end.
    Replay {
        /// Every offset of the trace, sorted.
        offsets: Arc<[u64]>,
        /// The index of the next offset.
        next: usize,
        /// Offsets at or after this are not replayed.
        end: u64,
    },
}

impl Iterator for SourceArrivals {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match self {
            SourceArrivals::Profile(arrivals) => arrivals.next(),
            SourceArrivals::Replay { offsets, next, end } => {
                let at = *offsets.get(*next)?;
                if at >= *end {
                    return None;
                }
                *next += 1;
                Some(at)
            }
        }
    }
}
