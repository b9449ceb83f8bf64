//! How every subcommand writes its log, its warnings and its final error on stderr: text for people, or one JSON object per line for a log collector.
//!
//! [`init`] installs the subscriber; with `json`, the lines the commands
//! used to print as text (`validate`'s diagnostics, warnings, the final
//! `error:`) go through it too, as events with their fields, so every line
//! on stderr parses as JSON.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use tollgate_rules::{Diagnostic, Severity};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::telemetry::TraceLayer;

/// How log lines are written on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Plain lines for people: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields.message`, the other fields.
    Json,
}

/// The `--log-format` flag of the subcommands other than `serve` (which has its own, with upstream's `LOG_FORMAT`).
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct LogArgs {
    /// How log lines, warnings and errors are written on stderr: `text` for
    /// people or `json`, one object per line for a log collector.
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

/// Whether [`init`] chose JSON.
static JSON: AtomicBool = AtomicBool::new(false);

/// Installs the log subscriber for `level` and `format` on stderr (a second call keeps the first).
pub fn init(level: tracing::Level, format: LogFormat) {
    init_with(level, format, None);
}

/// [`init`], and with `traces` the layer that exports the request spans.
pub fn init_with(level: tracing::Level, format: LogFormat, traces: Option<TraceLayer>) {
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs
            .with_ansi(std::io::stderr().is_terminal())
            .with_filter(LevelFilter::from_level(level))
            .boxed(),
        LogFormat::Json => logs
            .json()
            .with_ansi(false)
            .with_filter(LevelFilter::from_level(level))
            .boxed(),
    };
    let layers: Vec<TraceLayer> = std::iter::once(logs).chain(traces).collect();
    if tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .is_ok()
    {
        JSON.store(format == LogFormat::Json, Ordering::Relaxed);
    }
}

/// Whether lines on stderr are JSON.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// The command's final error: `error: MESSAGE`, or an ERROR event.
pub fn error(message: &str) {
    if json() {
        tracing::error!("{message}");
    } else {
        eprintln!("error: {message}");
    }
}

/// A warning to the person running the command: `warning: MESSAGE`, or a WARN event.
pub fn warning(message: &str) {
    if json() {
        tracing::warn!("{message}");
    } else {
        eprintln!("warning: {message}");
    }
}

/// A limits file's diagnostic: `file:line:column: severity: message`, or an event with those fields.
pub fn diagnostic(diagnostic: &Diagnostic) {
    if !json() {
        eprintln!("{diagnostic}");
        return;
    }
    let file = diagnostic.file.display().to_string();
    let (line, column) = (diagnostic.position.line, diagnostic.position.column);
    match diagnostic.severity {
        Severity::Error => tracing::error!(file, line, column, "{}", diagnostic.message),
        Severity::Warning => tracing::warn!(file, line, column, "{}", diagnostic.message),
    }
}
