//! Runs the real `tollgate simulate` binary and checks its output and errors.

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

#[test]
fn every_algorithm_runs_and_its_summary_is_sane() {
    // 20 req/s for 30 s against 10/s: about half pass, never more than twice
    // the limit in one window, and the shaper delays what it admits.
    for (name, flags) in ALGORITHMS {
        let args = with_algorithm(name, flags, &["--arrival-rate", "20", "--duration", "30s"]);
        let s = summary(&as_strs(&args));
        let label = format!("{args:?}: {s}");
        assert_eq!(s["algorithm"], name, "{label}");
        assert_eq!(number(&s, "arrivals"), 600, "{label}");
        let admitted = number(&s, "admitted");
        assert_eq!(
            admitted + number(&s, "denied") + number(&s, "exceeded"),
            600,
            "{label}"
        );
        // 10/s for 30 s is 300, plus the initial burst for the rate-based
        // ones (≤ 10); the sliding window counter, estimating evenly spread
        // past traffic, settles at 9 per second here (271).
        assert!((270..=310).contains(&admitted), "{label}");
        let rate = s["acceptance_rate"].as_f64().unwrap();
        assert!((rate - admitted as f64 / 600.0).abs() < 1e-12, "{label}");
        assert_eq!(number(&s, "limit"), 10, "{label}");
        assert!(number(&s, "window_ns") > 0, "{label}");
        let busiest = number(&s, "max_admitted_in_window");
        assert!((10..=20).contains(&busiest), "{label}");
        let delayed = number(&s, "delayed");
        if name == "leaky-bucket" && !flags.contains(&"--nodelay") {
            assert!(delayed > 0, "{label}");
        } else {
            assert_eq!(delayed, 0, "{label}");
        }
    }
}

#[test]
fn the_token_bucket_example_gives_the_hand_computed_figures() {
    // 5 tokens, 2/s; 10 req/s for 10 s: 5 + ⌊9.9 s / 0.5 s⌋ = 24 admitted.
    let output = simulate(&[
        "--algorithm",
        "token-bucket",
        "--max-tokens",
        "5",
        "--tokens-per-fill",
        "2",
        "--fill-interval",
        "1s",
        "--arrival-rate",
        "10",
        "--duration",
        "10s",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("arrivals   100\n"), "{text}");
    assert!(text.contains("admitted   24 (24.00%)\n"), "{text}");
    assert!(text.contains("rejected   76 (76 denied"), "{text}");
    assert!(
        text.contains("9 units admitted in one 2.5s window"),
        "{text}"
    );
    assert!(output.stderr.is_empty());
}

#[test]
fn the_same_seed_gives_byte_identical_output() {
    let csv_a = scratch("seed-a.csv");
    let csv_b = scratch("seed-b.csv");
    let csv_c = scratch("seed-c.csv");
    let run = |seed: &str, path: &PathBuf| {
        simulate(&[
            "--algorithm",
            "gcra",
            "--limit",
            "50",
            "--period",
            "1s",
            "--burst",
            "20",
            "--traffic",
            "poisson",
            "--arrival-rate",
            "80",
            "--duration",
            "20s",
            "--seed",
            seed,
            "--decisions",
            path.to_str().unwrap(),
        ])
    };
    let a = run("7", &csv_a);
    let b = run("7", &csv_b);
    let c = run("8", &csv_c);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(
        std::fs::read(&csv_a).unwrap(),
        std::fs::read(&csv_b).unwrap()
    );
    assert_ne!(
        std::fs::read(&csv_a).unwrap(),
        std::fs::read(&csv_c).unwrap(),
        "another seed draws other arrivals"
    );
    assert_ne!(a.stdout, c.stdout);
}

#[test]
fn the_csv_has_a_header_and_one_row_per_arrival() {
    let path = scratch("decisions.csv");
    let s = summary(&[
        "--algorithm",
        "fixed-window",
        "--limit",
        "10",
        "--window",
        "minute",
        "--traffic",
        "square",
        "--peak-rate",
        "5",
        "--base-rate",
        "0.5",
        "--wave-period",
        "20s",
        "--duty",
        "0.25",
        "--duration",
        "2m",
        "--decisions",
        path.to_str().unwrap(),
    ]);
    // Per 20 s wave: 5 s at 5/s (25) and 15 s at 0.5/s (8); six waves.
    assert_eq!(number(&s, "arrivals"), 6 * 33);
    let csv = std::fs::read_to_string(&path).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("index,offset_ns,at_ns,outcome,remaining,retry_after_ns,delay_ns,state_level")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, number(&s, "arrivals"));
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 8, "row {i}: {row:?}");
        assert_eq!(row[0], i.to_string());
        let offset: u64 = row[1].parse().unwrap();
        let at: u64 = row[2].parse().unwrap();
        assert_eq!(at, 1_700_000_000_000_000_000 + offset);
        match row[3] {
            "allowed" => assert_eq!(row[5], "", "row {i}"),
            "denied" => assert!(row[5].parse::<u64>().is_ok(), "row {i}"),
            other => panic!("row {i}: unexpected outcome {other}"),
        }
    }
    let allowed = rows.iter().filter(|r| r[3] == "allowed").count() as u64;
    assert_eq!(allowed, number(&s, "admitted"));
    // Two minutes at 10 per minute, and the run starts 20 s into a minute: 3 windows.
    assert_eq!(allowed, 30);
}

#[test]
fn compared_decisions_carry_their_lane_and_client() {
    // Two algorithms, three clients: one row per arrival per lane, in arrival
    // order with the lanes in --compare order, adding up to each lane's summary.
    let path = scratch("compared.csv");
    let s = summary(&[
        "--compare",
        "fixed_window,sliding_log",
        "--limit",
        "5",
        "--window",
        "1s",
        "--traffic",
        "poisson",
        "--arrival-rate",
        "20",
        "--duration",
        "5s",
        "--clients",
        "3",
        "--decisions",
        path.to_str().unwrap(),
    ]);
    let arrivals = number(&s, "arrivals");
    assert!(arrivals > 50, "{arrivals}");
    let csv = std::fs::read_to_string(&path).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "lane,client,sidecar,index,offset_ns,at_ns,outcome,remaining,retry_after_ns,delay_ns,state_level"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, 2 * arrivals);
    let lanes = s["lanes"].as_array().unwrap();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 11, "row {i}: {row:?}");
        assert_eq!(row[0], ["fixed_window", "sliding_log"][i % 2], "row {i}");
        assert!(
            ["0", "1", "2"].contains(&row[1]),
            "row {i}: client {}",
            row[1]
        );
        assert_eq!(row[3], (i / 2).to_string(), "row {i}");
    }
    for lane in lanes {
        let label = lane["label"].as_str().unwrap();
        let allowed = rows
            .iter()
            .filter(|r| r[0] == label && r[6] == "allowed")
            .count() as u64;
        assert_eq!(allowed, lane["admitted"].as_u64().unwrap(), "{label}");
    }
    // Both lanes saw each arrival from the same client.
    assert!(rows.chunks(2).all(|pair| pair[0][1] == pair[1][1]));
    let clients: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[1]).collect();
    assert_eq!(clients.len(), 3);

    // A replay writes them too, as JSON lines on stdout, the summary moving to stderr.
    let replay = scratch("replay-for-decisions.csv");
    std::fs::write(&replay, "t\n10.0\n10.1\n10.2\n12.0\n").unwrap();
    let output = simulate(&[
        "--algorithm",
        "sliding-log",
        "--limit",
        "2",
        "--window",
        "1s",
        "--traffic",
        "replay",
        "--replay",
        replay.to_str().unwrap(),
        "--duration",
        "3s",
        "--decisions",
        "-",
        "--decisions-format",
        "jsonl",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let decisions: Vec<Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcomes: Vec<&str> = decisions
        .iter()
        .map(|d| d["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["allowed", "allowed", "denied", "allowed"]);
    assert!(
        decisions
            .iter()
            .all(|d| d["lane"] == "sliding_log" && d["client"] == 0)
    );
    assert_eq!(decisions[2]["retry_after_ns"], 800_000_000u64);
    assert!(
        stderr(&output).contains("sliding-log: 2 per 1s"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn decisions_as_a_json_array_and_as_json_lines() {
    let array = scratch("decisions.json");
    let lines = scratch("decisions.jsonl");
    let args = |path: &PathBuf| {
        vec![
            "--algorithm".to_owned(),
            "sliding-log".into(),
            "--limit".into(),
            "3".into(),
            "--window".into(),
            "1s".into(),
            "--arrival-rate".into(),
            "5".into(),
            "--duration".into(),
            "2s".into(),
            "--decisions".into(),
            path.to_str().unwrap().into(),
        ]
    };
    let s = summary(&as_strs(&args(&array)));
    assert_eq!(number(&s, "arrivals"), 10);
    let parsed: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&array).unwrap()).unwrap();
    assert_eq!(parsed.len(), 10);
    assert_eq!(parsed[0]["outcome"], "allowed");
    assert_eq!(parsed[3]["outcome"], "denied");
    assert_eq!(parsed[3]["retry_after_ns"], 400_000_000u64);
    assert_eq!(parsed[2]["state_level"], 3.0);

    summary(&as_strs(&args(&lines)));
    let text = std::fs::read_to_string(&lines).unwrap();
    let from_lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(from_lines, parsed);
}

#[test]
fn decisions_to_stdout_move_the_summary_to_stderr() {
    let output = simulate(&[
        "--algorithm",
        "fixed-window",
        "--limit",
        "2",
        "--window",
        "1s",
        "--arrival-rate",
        "4",
        "--duration",
        "1s",
        "--decisions",
        "-",
        "--decisions-format",
        "csv",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let csv = stdout(&output);
    assert_eq!(csv.lines().count(), 1 + 4, "{csv}");
    assert!(csv.starts_with("index,"), "{csv}");
    assert!(stderr(&output).contains("arrivals   4\n"));

    let output = simulate(&[
        "--algorithm",
        "fixed-window",
        "--limit",
        "2",
        "--window",
        "1s",
        "--arrival-rate",
        "4",
        "--decisions",
        "-",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--decisions-format"));
}

#[test]
fn unit_names_and_humantime_durations_are_accepted() {
    for window in ["minute", "1m", "60s", "60000ms", "1 minute"] {
        let s = summary(&[
            "--algorithm",
            "sliding-log",
            "--limit",
            "10",
            "--window",
            window,
            "--arrival-rate",
            "1",
            "--duration",
            "5m",
        ]);
        assert_eq!(number(&s, "window_ns"), 60_000_000_000, "{window}");
        assert_eq!(number(&s, "admitted"), 50, "{window}");
    }
    let s = summary(&[
        "--algorithm",
        "fixed-window",
        "--limit",
        "10",
        "--window",
        "month",
        "--arrival-rate",
        "0.001",
        "--duration",
        "1d",
    ]);
    assert_eq!(number(&s, "window_ns"), 30 * 86_400 * 1_000_000_000);
}

/// Runs a command line that must fail with exit code 2 and one line naming `expected`.
fn fails_with_usage_error<S: AsRef<str> + std::fmt::Debug>(args: &[S], expected: &[&str]) {
    let output = simulate(args);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
    assert!(output.stdout.is_empty(), "{args:?}");
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("error: "), "{args:?}: {err}");
    for needle in expected {
        assert!(
            first.contains(needle),
            "{args:?}: {first:?} lacks {needle:?}"
        );
    }
}

const TOKEN_BUCKET: [&str; 8] = [
    "--algorithm",
    "token-bucket",
    "--max-tokens",
    "5",
    "--tokens-per-fill",
    "1",
    "--fill-interval",
    "1s",
];

fn token_bucket_and(rest: &[&str]) -> Vec<String> {
    TOKEN_BUCKET
        .iter()
        .chain(rest)
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn a_missing_algorithm_flag_is_named() {
    fails_with_usage_error(
        &[
            "--algorithm",
            "token-bucket",
            "--max-tokens",
            "5",
            "--fill-interval",
            "1s",
            "--arrival-rate",
            "1",
        ],
        &["--tokens-per-fill is required for --algorithm token-bucket"],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "gcra",
            "--limit",
            "5",
            "--period",
            "1s",
            "--arrival-rate",
            "1",
        ],
        &["--burst is required for --algorithm gcra"],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "sliding-log",
            "--limit",
            "5",
            "--arrival-rate",
            "1",
        ],
        &["--window is required for --algorithm sliding-log"],
    );
    fails_with_usage_error(
        &TOKEN_BUCKET,
        &["--arrival-rate is required for --traffic steady"],
    );
    fails_with_usage_error(
        &token_bucket_and(&["--traffic", "square", "--peak-rate", "5"]),
        &["--wave-period is required for --traffic square"],
    );
    // clap's own: no --algorithm at all.
    let output = simulate(&["--arrival-rate", "1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--algorithm"));
}

#[test]
fn a_parameter_the_core_rejects_is_named() {
    fails_with_usage_error(
        &[
            "--algorithm",
            "token-bucket",
            "--max-tokens",
            "0",
            "--tokens-per-fill",
            "1",
            "--fill-interval",
            "1s",
            "--arrival-rate",
            "1",
        ],
        &["max_tokens: must be at least 1", "--max-tokens"],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "token-bucket",
            "--max-tokens",
            "1",
            "--tokens-per-fill",
            "1",
            "--fill-interval",
            "0s",
            "--arrival-rate",
            "1",
        ],
        &["fill_interval: must be longer than zero", "--fill-interval"],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "leaky-bucket",
            "--rate",
            "10",
            "--period",
            "1s",
            "--burst",
            "2",
            "--delay",
            "3",
            "--arrival-rate",
            "1",
        ],
        &["delay: delay=3 is larger than burst=2", "--delay"],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "sliding-window",
            "--limit",
            "0",
            "--window",
            "1s",
            "--arrival-rate",
            "1",
        ],
        &["limit:", "--limit"],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "gcra",
            "--limit",
            "2000000000",
            "--period",
            "1s",
            "--burst",
            "1",
            "--arrival-rate",
            "1",
        ],
        &["limit:", "faster than one per nanosecond", "--limit"],
    );
}

#[test]
fn a_flag_of_another_algorithm_or_profile_is_refused() {
    fails_with_usage_error(
        &token_bucket_and(&["--window", "1m", "--arrival-rate", "1"]),
        &[
            "--window does not apply to --algorithm token-bucket",
            "fixed-window",
        ],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "fixed-window",
            "--limit",
            "5",
            "--window",
            "1m",
            "--burst",
            "3",
            "--arrival-rate",
            "1",
        ],
        &[
            "--burst does not apply to --algorithm fixed-window",
            "gcra, leaky-bucket",
        ],
    );
    fails_with_usage_error(
        &[
            "--algorithm",
            "gcra",
            "--limit",
            "5",
            "--period",
            "1s",
            "--burst",
            "3",
            "--nodelay",
            "--arrival-rate",
            "1",
        ],
        &[
            "--nodelay does not apply to --algorithm gcra",
            "leaky-bucket",
        ],
    );
    fails_with_usage_error(
        &token_bucket_and(&["--arrival-rate", "1", "--peak-rate", "5"]),
        &["--peak-rate does not apply to --traffic steady", "square"],
    );
    fails_with_usage_error(
        &token_bucket_and(&[
            "--traffic",
            "square",
            "--peak-rate",
            "5",
            "--wave-period",
            "1s",
            "--arrival-rate",
            "1",
        ]),
        &["--arrival-rate does not apply to --traffic square"],
    );
}

#[test]
fn a_bad_duration_is_refused_with_the_flag_named() {
    fails_with_usage_error(
        &[
            "--algorithm",
            "fixed-window",
            "--limit",
            "5",
            "--window",
            "fortnight",
            "--arrival-rate",
            "1",
        ],
        &["--window", "fortnight"],
    );
    fails_with_usage_error(
        &token_bucket_and(&["--arrival-rate", "1", "--duration", "ten"]),
        &["--duration"],
    );
    fails_with_usage_error(
        &token_bucket_and(&["--arrival-rate", "1", "--duration", "0s"]),
        &["duration: must be longer than zero", "--duration"],
    );
    fails_with_usage_error(
        &token_bucket_and(&["--arrival-rate", "1", "--duration", "1y 2M"]),
        &["--duration", "30 days"],
    );
}

#[test]
fn a_rate_that_is_not_positive_and_finite_is_refused() {
    for bad in ["0", "-1", "nan", "inf", "-inf", "fast"] {
        let flag = format!("--arrival-rate={bad}");
        fails_with_usage_error(&token_bucket_and(&[&flag]), &["--arrival-rate"]);
        let flag = format!("--peak-rate={bad}");
        fails_with_usage_error(
            &token_bucket_and(&["--traffic", "square", &flag, "--wave-period", "1s"]),
            &["--peak-rate"],
        );
    }
    fails_with_usage_error(
        &token_bucket_and(&[
            "--traffic",
            "square",
            "--peak-rate",
            "5",
            "--base-rate=-1",
            "--wave-period",
            "1s",
        ]),
        &["--base-rate", "at least 0"],
    );
    fails_with_usage_error(
        &token_bucket_and(&[
            "--traffic",
            "square",
            "--peak-rate",
            "5",
            "--duty",
            "1.5",
            "--wave-period",
            "1s",
        ]),
        &["--duty", "(0, 1]"],
    );
    fails_with_usage_error(
        &token_bucket_and(&["--arrival-rate", "2e9"]),
        &["rate:", "--arrival-rate"],
    );
    fails_with_usage_error(
        &token_bucket_and(&["--arrival-rate", "1", "--cost", "0"]),
        &["cost:", "--cost"],
    );
}

#[test]
fn an_unwritable_decisions_file_is_an_io_error_naming_the_path() {
    let missing_dir = scratch("no-such-dir").join("decisions.csv");
    let path = missing_dir.to_str().unwrap();
    let output = simulate(&token_bucket_and(&[
        "--arrival-rate",
        "1",
        "--decisions",
        path,
    ]));
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: cannot write decisions to "),
        "{err}"
    );
    assert!(err.contains(path), "{err}");
}

#[test]
fn an_unknown_decisions_extension_asks_for_a_format() {
    let path = scratch("decisions.txt");
    fails_with_usage_error(
        &token_bucket_and(&["--arrival-rate", "1", "--decisions", path.to_str().unwrap()]),
        &["--decisions-format", ".csv"],
    );
    assert!(
        !path.exists(),
        "nothing is written when the format is unknown"
    );
}

#[test]
fn compare_runs_algorithms_on_one_trace_and_judges_them_against_the_exact_log() {
    let report = summary(&[
        "--compare",
        "fixed_window,sliding-window,sliding_log",
        "--limit",
        "20",
        "--window",
        "2s",
        "--traffic",
        "poisson",
        "--arrival-rate",
        "30",
        "--duration",
        "60s",
        "--seed",
        "3",
    ]);
    let lanes = report["lanes"].as_array().unwrap();
    let labels: Vec<&str> = lanes.iter().map(|l| l["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["fixed_window", "sliding_window", "sliding_log"]);
    let arrivals = number(&report, "arrivals");
    assert!(lanes.iter().all(|l| number(l, "arrivals") == arrivals));
    // The log is exact by definition; the fixed window over-admits at its edges.
    let log = &lanes[2];
    assert_eq!(
        (number(log, "over_admitted"), number(log, "under_admitted")),
        (0, 0)
    );
    assert_eq!(number(log, "max_admitted_in_window"), 20);
    assert!(number(&lanes[0], "over_admitted") > 0);
    assert!(number(&lanes[0], "max_admitted_in_window") > 20);
    // Each lane carries its expectation.
    assert_eq!(lanes[2]["expectation"]["ceiling"], 600.0);
    // The same seed gives the same comparison.
    let again = summary(&[
        "--compare",
        "fixed_window,sliding-window,sliding_log",
        "--limit",
        "20",
        "--window",
        "2s",
        "--traffic",
        "poisson",
        "--arrival-rate",
        "30",
        "--duration",
        "60s",
        "--seed",
        "3",
    ]);
    assert_eq!(report, again);
}

#[test]
fn ramp_spike_replay_and_clients_are_simulated() {
    let bucket = [
        "--algorithm",
        "token-bucket",
        "--max-tokens",
        "5",
        "--tokens-per-fill",
        "1",
        "--fill-interval",
        "1s",
    ];
    let with = |rest: &[&str]| {
        let mut args = bucket.to_vec();
        args.extend_from_slice(rest);
        summary(&args)
    };
    // A ramp 0 → 20 req/s over 10 s: 100 arrivals.
    let ramp = with(&["--traffic", "ramp", "--to-rate", "20", "--duration", "10s"]);
    assert_eq!(number(&ramp, "arrivals"), 100);
    // 1 req/s with a 2 s spike to 50 req/s: 8 + 100 arrivals in 10 s.
    let spike = with(&[
        "--traffic",
        "spike",
        "--base-rate",
        "1",
        "--peak-rate",
        "50",
        "--spike-at",
        "4s",
        "--spike-length",
        "2s",
        "--duration",
        "10s",
    ]);
    assert_eq!(number(&spike, "arrivals"), 108);
    // A replay of a CSV: a header, then timestamps in seconds, out of order.
    let trace = scratch("trace.csv");
    std::fs::write(&trace, "ts\n100.0\n100.5\n100.25\n101\n").unwrap();
    let replay = with(&[
        "--traffic",
        "replay",
        "--replay",
        trace.to_str().unwrap(),
        "--duration",
        "5s",
    ]);
    assert_eq!(number(&replay, "arrivals"), 4);
    assert_eq!(number(&replay["lanes"][0], "admitted"), 4);
    // Four clients, each with its own bucket of 5 at 1/s: 20 req/s for 10 s admits 4 × (5 + ~10).
    let clients = with(&[
        "--arrival-rate",
        "20",
        "--duration",
        "10s",
        "--clients",
        "4",
    ]);
    let admitted = number(&clients["lanes"][0], "admitted");
    assert!((54..=60).contains(&admitted), "{admitted}");
}

#[test]
fn compare_and_replay_mistakes_are_named() {
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "--compare",
                "gcra,gcra",
                "--limit",
                "1",
                "--period",
                "1s",
                "--burst",
                "1",
                "--arrival-rate",
                "1",
            ],
            "--compare names gcra twice",
        ),
        (
            &[
                "--compare",
                "token_bucket,gcra",
                "--window",
                "1s",
                "--arrival-rate",
                "1",
            ],
            "--window does not apply to any of token-bucket, gcra",
        ),
        (
            &[
                "--algorithm",
                "sliding-log",
                "--limit",
                "5",
                "--window",
                "1s",
                "--traffic",
                "replay",
            ],
            "--replay is required for --traffic replay",
        ),
        (
            &[
                "--algorithm",
                "sliding-log",
                "--limit",
                "5",
                "--window",
                "1s",
                "--traffic",
                "ramp",
                "--to-rate",
                "0",
            ],
            "to: a ramp from 0 to 0",
        ),
    ];
    for (args, needle) in cases {
        let output = simulate(args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let trace = scratch("bad-trace.csv");
    std::fs::write(&trace, "1\n2\nlater\n").unwrap();
    let output = simulate(&[
        "--algorithm",
        "sliding-log",
        "--limit",
        "5",
        "--window",
        "1s",
        "--traffic",
        "replay",
        "--replay",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("line 3: \"later\" is not a number of seconds"),
        "{}",
        stderr(&output)
    );
}
