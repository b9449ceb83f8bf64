//! The one report writer of `tollgate bench`: a run's rate, answers, errors
//! and latency percentiles, as text lines or one JSON object.
//!
//! Scripts (`scripts/bench-*.sh`) parse both forms: a change here is a change
//! of the command's output.

use std::fmt::Write as _;
use std::time::Duration;

use super::load::LoadArgs;
use super::tally::{Counts, Tally};

/// The reported percentiles: name and quantile.
const PERCENTILES: [(&str, f64); 4] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99_9", 0.999),
];

/// A run's result, as printed.
pub(super) struct Report<C> {
    /// `closed` or `open` (loop).
    pub(super) mode: &'static str,
    /// From the end of the warm-up until the last counted request returned.
    pub(super) elapsed: Duration,
    pub(super) tally: Tally<C>,
}

/// What a target says about what it loaded, around what every report shares.
pub(super) struct Heading {
    /// The text report's first words, naming what was loaded (`GET URL`).
    pub(super) text: String,
    /// The JSON report's fields naming what was loaded.
    pub(super) json: Vec<(&'static str, serde_json::Value)>,
    /// The connections the requests went over.
    pub(super) connections: usize,
}

impl<C: Counts> Report<C> {
    /// Prints the report on stdout: one JSON object with `--json`, else text lines.
    pub(super) fn print(&self, load: &LoadArgs, heading: &Heading) {
        if load.json {
            println!("{}", self.json(load, heading));
        } else {
            print!("{}", self.text(load, heading));
        }
    }

    fn requests(&self) -> u64 {
        self.tally.counts.total()
    }

    fn per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.requests() as f64 / seconds
        } else {
            0.0
        }
    }

    /// The report as one JSON object.
    fn json(&self, load: &LoadArgs, heading: &Heading) -> serde_json::Value {
        let counts = &self.tally.counts;
        let mut json = serde_json::Map::new();
        let mut field = |name: &str, value: serde_json::Value| {
            json.insert(name.to_owned(), value);
        };
        field("mode", self.mode.into());
        for (name, value) in &heading.json {
            field(name, value.clone());
        }
        field("in_flight", load.concurrency.into());
        field("connections", heading.connections.into());
        field("rate", load.rate.into());
        field("duration_s", load.duration.as_secs_f64().into());
        field("warmup_s", load.warmup.as_secs_f64().into());
        field("elapsed_s", self.elapsed.as_secs_f64().into());
        field("requests", self.requests().into());
        field("req_per_s", self.per_second().into());
        for (name, value) in counts.json_fields() {
            field(name, value);
        }
        field("errors", counts.errors().total().into());
        field(C::ERRORS_BY, serde_json::json!(counts.errors().by_kind()));
        field("latency_us", self.latency_json());
        serde_json::Value::Object(json)
    }

    /// The latency distribution as a JSON object of microseconds.
    fn latency_json(&self) -> serde_json::Value {
        let histogram = &self.tally.latency_us;
        let mut latency = serde_json::Map::new();
        latency.insert("count".to_owned(), histogram.len().into());
        latency.insert("min".to_owned(), histogram.min().into());
        latency.insert("mean".to_owned(), histogram.mean().into());
        for (name, quantile) in PERCENTILES {
            latency.insert(
                name.to_owned(),
                histogram.value_at_quantile(quantile).into(),
            );
        }
        latency.insert("max".to_owned(), histogram.max().into());
        serde_json::Value::Object(latency)
    }

    /// The report as text lines.
    fn text(&self, load: &LoadArgs, heading: &Heading) -> String {
        let counts = &self.tally.counts;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "{}; {} on {} connection{}; {} (+{} warm-up)",
            heading.text,
            load.describe(),
            heading.connections,
            if heading.connections == 1 { "" } else { "s" },
            humantime::format_duration(load.duration),
            humantime::format_duration(load.warmup),
        );
        let _ = writeln!(
            text,
            "requests    {} in {:.2}s ({:.0} req/s)",
            self.requests(),
            self.elapsed.as_secs_f64(),
            self.per_second()
        );
        text.push_str(&counts.text_lines());
        let _ = writeln!(text, "errors      {}", counts.errors().total());
        for (kind, count) in counts.errors().by_kind() {
            let _ = writeln!(text, "  {kind}: {count}");
        }
        let histogram = &self.tally.latency_us;
        text.push_str("latency µs ");
        for (name, quantile) in PERCENTILES {
            let _ = write!(
                text,
                " {}={}",
                name.replace('_', "."),
                histogram.value_at_quantile(quantile)
            );
        }
        let _ = writeln!(text, " max={}", histogram.max());
        text
    }
}
