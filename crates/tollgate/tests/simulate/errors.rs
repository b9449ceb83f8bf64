//! Command lines that fail: each mistake is named, with the flag and what was expected.

use crate::*;

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
