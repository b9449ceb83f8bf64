//! What happened to one simulated request, and how it is written (CSV, JSON).

use std::io;

use serde::{Serialize, Serializer};
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, Decision, Outcome, Timestamp};

/// What a [`DecisionRecord::state_level`] measures for an algorithm, as a short label.
pub fn state_level_meaning(algorithm: &AnyAlgorithm) -> &'static str {
    match algorithm {
        AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(_)) => "tokens in the bucket",
        AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(_)) => "requests that could pass at once",
        AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(_)) => "units queued (still draining)",
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_)) => {
            "units counted in the current window (denied ones included)"
        }
        AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(_)) => {
            "weighted count of the sliding window"
        }
        AnyAlgorithm::SlidingLog(_) => "units logged in the window",
    }
}

/// What happened to one simulated request.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DecisionRecord {
    /// The request's position in the run, from 0.
    pub index: u64,
    /// When it arrived, in nanoseconds from the run's start.
    pub offset_ns: u64,
    /// When it arrived, in virtual time (serialized as nanoseconds since the epoch).
    #[serde(rename = "at_ns", serialize_with = "serialize_timestamp")]
    pub at: Timestamp,
    /// Whether it passed, was denied, or costs more than the limit can ever hold.
    #[serde(serialize_with = "serialize_outcome")]
    pub outcome: Outcome,
    /// Units still available right after it.
    pub remaining: u64,
    /// For a denied request, the nanoseconds until the same request could pass.
    pub retry_after_ns: Option<u64>,
    /// For a request a shaper admitted, the nanoseconds to hold it; 0 otherwise.
    pub delay_ns: u64,
    /// The algorithm's state right after the decision, in its own terms (see [`state_level_meaning`]).
    pub state_level: f64,
}

impl DecisionRecord {
    pub(crate) fn new(
        index: u64,
        offset_ns: u64,
        at: Timestamp,
        decision: &Decision,
        state_level: f64,
    ) -> Self {
        DecisionRecord {
            index,
            offset_ns,
            at,
            outcome: decision.outcome(),
            remaining: decision.remaining(),
            retry_after_ns: (decision.outcome() == Outcome::Denied)
                .then(|| decision.retry_after_nanos()),
            delay_ns: decision.delay_nanos(),
            state_level,
        }
    }

    /// Whether the request passed.
    pub fn is_allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// The outcome's lower-case name, as serialized: `allowed`, `denied` or `exceeds`.
    pub fn outcome_name(&self) -> &'static str {
        outcome_name(self.outcome)
    }

    /// The column names of [`DecisionRecord::write_csv_row`], comma-separated, without a line break.
    pub const CSV_HEADER: &'static str =
        "index,offset_ns,at_ns,outcome,remaining,retry_after_ns,delay_ns,state_level";

    /// Writes this record as one CSV line, ending in a line break.
    ///
    /// `retry_after_ns` is empty unless the request was denied; no field
    /// ever needs quoting.
    pub fn write_csv_row(&self, out: &mut impl io::Write) -> io::Result<()> {
        write!(
            out,
            "{},{},{},{},{},",
            self.index,
            self.offset_ns,
            self.at.as_nanos(),
            self.outcome_name(),
            self.remaining
        )?;
        if let Some(retry) = self.retry_after_ns {
            write!(out, "{retry}")?;
        }
        writeln!(out, ",{},{}", self.delay_ns, self.state_level)
    }
}

/// The lower-case name of an outcome: `allowed`, `denied` or `exceeds`.
pub(crate) fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "allowed",
        Outcome::Denied => "denied",
        Outcome::Exceeds => "exceeds",
    }
}

fn serialize_outcome<S: Serializer>(outcome: &Outcome, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(outcome_name(*outcome))
}

fn serialize_timestamp<S: Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(at.as_nanos())
}
