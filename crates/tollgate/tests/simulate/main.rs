//! Runs the real `tollgate simulate` binary and checks its output ([`runs`]) and its errors ([`errors`]), and the platform run ([`platform`]).

mod errors;
mod platform;
mod runs;

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `tollgate simulate` with `args`.
fn simulate<S: AsRef<str>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("simulate")
        .args(args.iter().map(AsRef::as_ref))
        .output()
        .expect("running the tollgate binary")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// Runs a simulation that must succeed and returns its JSON summary.
fn summary(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let output = simulate(&all);
    assert!(
        output.status.success(),
        "{args:?} failed: {}",
        stderr(&output)
    );
    serde_json::from_str(&stdout(&output)).expect("--json prints JSON")
}

/// A fresh path for an output file of this test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("simulate-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// Flags for every algorithm, each with a limit of about 10 per second.
const ALGORITHMS: [(&str, &[&str]); 8] = [
    (
        "token-bucket",
        &[
            "--max-tokens",
            "10",
            "--tokens-per-fill",
            "10",
            "--fill-interval",
            "1s",
        ],
    ),
    (
        "gcra",
        &["--limit", "10", "--period", "1s", "--burst", "10"],
    ),
    (
        "leaky-bucket",
        &["--rate", "10", "--period", "1s", "--burst", "9"],
    ),
    (
        "leaky-bucket",
        &[
            "--rate",
            "10",
            "--period",
            "1s",
            "--burst",
            "9",
            "--nodelay",
        ],
    ),
    (
        "leaky-bucket",
        &[
            "--rate", "10", "--period", "1s", "--burst", "9", "--delay", "4",
        ],
    ),
    ("fixed-window", &["--limit", "10", "--window", "1s"]),
    ("sliding-window", &["--limit", "10", "--window", "second"]),
    ("sliding-log", &["--limit", "10", "--window", "1000ms"]),
];

fn with_algorithm(name: &str, flags: &[&str], rest: &[&str]) -> Vec<String> {
    let mut args = vec!["--algorithm".to_owned(), name.to_owned()];
    args.extend(flags.iter().map(|s| s.to_string()));
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn number(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}
