//! `--log-format json` (or `TOLLGATE_LOG_FORMAT=json`) on every subcommand: each line it writes on stderr — warnings, a limits file's diagnostics, the final error — is one JSON object with a level and a message.

use std::process::Output;

use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::tollgate;

/// A limits file with one error (an unknown unit) at line 4.
const BAD_LIMITS: &str =
    "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: parsec, requests_per_unit: 1}\n";

/// Every stderr line of `output`, parsed; panics naming the first that is not a JSON object with a level and a message.
fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|error| {
                panic!("not JSON ({error}): {line}\nall of stderr:\n{stderr}")
            });
            assert!(value["level"].is_string(), "no level: {line}");
            assert!(value["fields"]["message"].is_string(), "no message: {line}");
            value
        })
        .collect();
    assert!(!lines.is_empty(), "nothing on stderr");
    lines
}

fn run(args: &[&str], dir: &TempDir) -> Output {
    tollgate(args)
        .current_dir(&dir.0)
        .env_remove("TOLLGATE_LOG_FORMAT")
        .output()
        .expect("tollgate runs")
}

#[test]
fn every_subcommand_writes_json_lines_on_stderr_when_asked() {
    let dir = TempDir::new("json-logs");
    std::fs::write(dir.0.join("bad.yaml"), BAD_LIMITS).expect("written");

    // validate: the diagnostic with its file, line and column, then the error.
    let output = run(&["validate", "--log-format", "json", "bad.yaml"], &dir);
    assert_eq!(output.status.code(), Some(1));
    let lines = json_lines(&output);
    assert_eq!(lines[0]["level"], "ERROR");
    assert_eq!(lines[0]["fields"]["file"], "bad.yaml");
    assert_eq!(lines[0]["fields"]["line"], 4);
    assert!(
        lines[0]["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("parsec")
    );
    assert!(
        lines[1]["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("1 error")
    );

    // serve: a bad configuration stops the start, in JSON.
    let output = run(
        &[
            "serve",
            "--config",
            "bad.yaml",
            "--log-format",
            "json",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ],
        &dir,
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let lines = json_lines(&output);
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"].as_str().unwrap().contains("parsec")),
        "{lines:?}"
    );

    // proxy: a configuration file that is not there.
    let output = run(
        &["proxy", "--config", "missing.yaml", "--log-format", "json"],
        &dir,
    );
    assert_ne!(output.status.code(), Some(0));
    json_lines(&output);

    // check and bench: nothing listens on port 1.
    let output = run(
        &[
            "check",
            "--log-format",
            "json",
            "--addr",
            "http://127.0.0.1:1",
            "--domain",
            "x",
            "a=b",
        ],
        &dir,
    );
    assert_eq!(output.status.code(), Some(1));
    json_lines(&output);
    let output = run(
        &[
            "bench",
            "--log-format",
            "json",
            "http",
            "--url",
            "http://127.0.0.1:1/",
            "-d",
            "1s",
        ],
        &dir,
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    json_lines(&output);

    // simulate: a flag that does not apply to the algorithm.
    let output = run(
        &[
            "simulate",
            "--log-format",
            "json",
            "--algorithm",
            "token_bucket",
            "--rate",
            "0",
        ],
        &dir,
    );
    assert_ne!(output.status.code(), Some(0));
    json_lines(&output);

    // The environment variable does the same.
    let output = tollgate(&["validate", "bad.yaml"])
        .current_dir(&dir.0)
        .env("TOLLGATE_LOG_FORMAT", "json")
        .output()
        .expect("tollgate runs");
    assert_eq!(json_lines(&output).len(), 2);
    // And text stays text.
    let output = run(&["validate", "bad.yaml"], &dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("bad.yaml:4:"), "{stderr}");
    assert!(stderr.contains("\nerror: bad.yaml has 1 error"), "{stderr}");
}
