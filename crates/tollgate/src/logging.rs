//! How every subcommand writes its log, its warnings and its final error on stderr: text for people, or one JSON object per line for a log collector.
//!
//! [`init`] installs the subscriber; with `json`, the lines the commands
//! used to print as text (`validate`'s diagnostics, warnings, the final
//! `error:`) go through it too, as events with their fields, so every line
//! on stderr parses as JSON.
//!
//! The level applies to Tollgate's own lines. The libraries under it (h2,
//! hyper, tonic, tower, rustls, redis, …) say at most INFO whatever the
//! level, so `debug` is Tollgate's debugging, not twenty HPACK lines per
//! request; `RUST_LOG` (`target=level,…`, e.g. `h2=debug`) asks for a
//! library's lines by target.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use tollgate_rules::{Diagnostic, Severity};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
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

/// The libraries whose lines stay at INFO or above unless `RUST_LOG` names them.
const QUIET_LIBRARIES: [&str; 14] = [
    "h2",
    "hyper",
    "hyper_util",
    "hyper_rustls",
    "tonic",
    "tower",
    "tower_http",
    "rustls",
    "tokio_rustls",
    "redis",
    "mio",
    "want",
    "notify",
    "opentelemetry_sdk",
];

/// What is written at `level`: Tollgate's lines at `level`, the quiet
/// libraries' at INFO at most, then whatever `rust_log` (`RUST_LOG`'s
/// `target=level,…`) asks for by target; a `rust_log` that does not parse
/// is returned as the error, to warn of once the log is up.
fn targets(level: tracing::Level, rust_log: Option<&str>) -> (Targets, Option<String>) {
    let level = LevelFilter::from_level(level);
    let quiet = level.min(LevelFilter::INFO);
    let mut targets = Targets::new()
        .with_default(level)
        .with_targets(QUIET_LIBRARIES.iter().map(|&name| (name, quiet)));
    let mut bad = None;
    if let Some(text) = rust_log.filter(|t| !t.trim().is_empty()) {
        match text.parse::<Targets>() {
            Ok(asked) => targets = targets.with_targets(asked),
            Err(error) => bad = Some(format!("RUST_LOG={text:?} is ignored: {error}")),
        }
    }
    (targets, bad)
}

/// Whether [`init`] chose JSON.
static JSON: AtomicBool = AtomicBool::new(false);

/// Installs the log subscriber for `level` and `format` on stderr (a second call keeps the first).
pub fn init(level: tracing::Level, format: LogFormat) {
    init_with(level, format, None);
}

/// [`init`], and with `traces` the layer that exports the request spans.
pub fn init_with(level: tracing::Level, format: LogFormat, traces: Option<TraceLayer>) {
    let (filter, bad_rust_log) = targets(level, std::env::var("RUST_LOG").ok().as_deref());
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs
            .with_ansi(std::io::stderr().is_terminal())
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => logs.json().with_ansi(false).with_filter(filter).boxed(),
    };
    let layers: Vec<TraceLayer> = std::iter::once(logs).chain(traces).collect();
    if tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .is_ok()
    {
        JSON.store(format == LogFormat::Json, Ordering::Relaxed);
        if let Some(bad) = bad_rust_log {
            tracing::warn!("{bad}");
        }
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

/// Announces on stdout where a command listens, a line each (`listening on
/// ADDR`, the harness's and the scripts' interface): as text, or with
/// `json` one object per line in the log's own shape (`timestamp`, `level`,
/// `fields.message`, `target`), so a collector reading stdout parses every
/// line too. A closed stdout is ignored: the log says the same.
pub fn announce(lines: &[String]) {
    let mut text = String::new();
    for line in lines {
        if json() {
            #[expect(
                clippy::disallowed_methods,
                reason = "a log line's wall-clock timestamp; no decision reads it"
            )]
            let now = std::time::SystemTime::now();
            let object = serde_json::json!({
                "timestamp": humantime::format_rfc3339_micros(now).to_string(),
                "level": "INFO",
                "fields": {"message": line},
                "target": "tollgate",
            });
            text.push_str(&object.to_string());
        } else {
            text.push_str(line);
        }
        text.push('\n');
    }
    let _ = crate::stdout_text::print(&text);
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

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    fn enabled(targets: &Targets, target: &str, level: Level) -> bool {
        targets.would_enable(target, &level)
    }

    #[test]
    fn libraries_stay_at_info_unless_asked_for_by_target() {
        let (debug, bad) = targets(Level::DEBUG, None);
        assert!(bad.is_none());
        assert!(enabled(&debug, "tollgate_server::grpc", Level::DEBUG));
        assert!(!enabled(&debug, "h2::codec::framed_write", Level::DEBUG));
        assert!(!enabled(&debug, "hyper_util::client", Level::DEBUG));
        assert!(enabled(&debug, "h2::proto", Level::INFO));
        // A quieter level applies to the libraries too.
        let (warn, _) = targets(Level::WARN, None);
        assert!(!enabled(&warn, "h2", Level::INFO));
        assert!(!enabled(&warn, "tollgate", Level::INFO));
        // RUST_LOG asks for one library by target.
        let (asked, bad) = targets(Level::INFO, Some("h2=debug"));
        assert!(bad.is_none());
        assert!(enabled(&asked, "h2::codec", Level::DEBUG));
        assert!(!enabled(&asked, "hyper", Level::DEBUG));
        let (_, bad) = targets(Level::INFO, Some("h2=loud"));
        assert!(
            bad.is_some_and(|b| b.contains("RUST_LOG")),
            "a bad RUST_LOG is named"
        );
    }
}
