//! What a run counts: the answers by kind ([`Counts`], one per target), the
//! errors by wording and the latency histogram.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

/// The answers of one kind of request, counted by outcome.
pub(super) trait Counts: Default + Send + 'static {
    /// What one request comes back with.
    type Answer;
    /// The JSON report's name for the errors by kind.
    const ERRORS_BY: &'static str;
    /// Counts one answer; true when it was answered (its latency is recorded).
    fn count(&mut self, answer: Self::Answer) -> bool;
    /// Adds another worker's counts.
    fn merge(&mut self, other: Self);
    /// How many requests were answered (not errors).
    fn answered(&self) -> u64;
    /// The requests that got no answer, by kind.
    fn errors(&self) -> &ErrorCounts;
    /// How many answers were counted, errors included.
    fn total(&self) -> u64 {
        self.answered() + self.errors().total()
    }
    /// The text report's lines of the answered requests, each ending in a newline.
    fn text_lines(&self) -> String;
    /// The JSON report's fields of the answered requests.
    fn json_fields(&self) -> Vec<(&'static str, serde_json::Value)>;
}

/// Requests that got no answer, counted by what went wrong.
#[derive(Default)]
pub(super) struct ErrorCounts {
    by_kind: BTreeMap<String, u64>,
}

impl ErrorCounts {
    /// Counts one error of `kind`.
    pub(super) fn add(&mut self, kind: String) {
        *self.by_kind.entry(kind).or_default() += 1;
    }

    /// Adds another worker's errors.
    pub(super) fn merge(&mut self, other: ErrorCounts) {
        for (kind, count) in other.by_kind {
            *self.by_kind.entry(kind).or_default() += count;
        }
    }

    /// How many errors, of every kind.
    pub(super) fn total(&self) -> u64 {
        self.by_kind.values().sum()
    }

    /// The errors by kind, in the kinds' order.
    pub(super) fn by_kind(&self) -> &BTreeMap<String, u64> {
        &self.by_kind
    }
}

/// What one worker (and then the whole run) counted.
pub(super) struct Tally<C> {
    /// The answered requests' latencies in microseconds.
    pub(super) latency_us: Histogram<u64>,
    pub(super) counts: C,
}

impl<C: Counts> Tally<C> {
    pub(super) fn new() -> Tally<C> {
        Tally {
            // 1 µs to 1 hour, 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
            counts: C::default(),
        }
    }

    pub(super) fn record(&mut self, answer: C::Answer, latency: Duration) {
        if self.counts.count(answer) {
            let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            self.latency_us.saturating_record(micros.max(1));
        }
    }

    pub(super) fn merge(&mut self, other: Tally<C>) {
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with the same bounds add up");
        self.counts.merge(other.counts);
    }
}
