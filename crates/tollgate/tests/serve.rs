//! `tollgate serve` answers `tollgate check` until the first OVER_LIMIT, stops on SIGTERM, and never starts on a bad config.

use std::process::{Command, Output};

use tollgate_testkit::tollgate::{Server, tollgate};

fn check(addr: &str, descriptors: &[&str]) -> Output {
    let url = format!("http://{addr}");
    let mut args = vec!["check", "--addr", url.as_str(), "--domain", "edge"];
    args.extend_from_slice(descriptors);
    tollgate(&args).output().expect("tollgate check runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_example_limits_validate() {
    let output = tollgate(&["validate", "../../examples/limits"])
        .output()
        .expect("tollgate validate runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout).trim_end(),
        "1 file, 1 domain, 5 rules: OK"
    );
    assert_eq!(text(&output.stderr), "");
}

#[test]
fn serve_answers_check_until_the_first_over_limit_and_drains_on_sigterm() {
    let mut server = Server::spawn(&[
        "serve",
        "--config",
        "../../examples/limits",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--log-level",
        "warn",
    ]);
    let addr = server.address();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");

    // 3 logins per minute: OK, OK, OK, OVER_LIMIT — or a few more OKs if a
    // minute boundary passes during the loop.
    let mut answers = Vec::new();
    let mut over_limit = None;
    for _ in 0..10 {
        let output = check(&addr, &["path=/login", "--descriptor", "client=internal"]);
        let code = output.status.code();
        answers.push(code);
        if code == Some(3) {
            over_limit = Some(output);
            break;
        }
        assert_eq!(
            code,
            Some(0),
            "{}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        let stdout = text(&output.stdout);
        assert!(stdout.starts_with("OK\n"), "{stdout}");
    }
    let output = over_limit.unwrap_or_else(|| panic!("no OVER_LIMIT in {answers:?}"));
    assert!(answers.len() >= 4, "{answers:?}");
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"OVER_LIMIT"), "{stdout}");
    let login = lines.get(1).copied().unwrap_or_default();
    assert!(
        login.starts_with("  path=/login: OVER_LIMIT limit=3/minute name=login remaining=0 reset="),
        "{stdout}"
    );
    assert_eq!(
        lines.get(2),
        Some(&"  client=internal: OK limit=none remaining=4294967295"),
        "{stdout}"
    );

    // A malformed request is an error (exit 1) with the service's message.
    let output = tollgate(&[
        "check",
        "--addr",
        &format!("http://{addr}"),
        "--domain",
        "",
        "path=/login",
    ])
    .output()
    .expect("tollgate check runs");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("rate limit domain must not be empty"),
        "{}",
        text(&output.stderr)
    );

    // SIGTERM: a graceful stop with exit code 0.
    let pid = server.child.id().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", pid.as_str()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let (code, _, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let mut server = Server::spawn_with_env(
        &[
            "serve",
            "--config",
            "../../examples/limits",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ],
        &[("LOG_FORMAT", "json")],
    );
    let addr = server.address();
    let output = check(&addr, &["path=/login"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let pid = server.child.id().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", pid.as_str()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let (code, _, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(!lines.is_empty(), "no log lines");
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
        assert!(value["level"].is_string(), "{line}");
        assert!(value["timestamp"].is_string(), "{line}");
    }
    assert!(
        stderr.contains("gRPC rate limit service listening"),
        "{stderr}"
    );
}

#[test]
fn upstream_variables_choose_the_address_and_shadow_mode() {
    let server = Server::spawn_with_env(
        &["serve", "--config", "../../examples/limits"],
        &[
            ("GRPC_HOST", "127.0.0.1"),
            ("GRPC_PORT", "0"),
            ("SHADOW_MODE", "true"),
            ("LOG_LEVEL", "warn"),
        ],
    );
    let addr = server.address();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    // Global shadow mode: the fourth login in a minute is still OK overall
    // while its status says OVER_LIMIT. Eight calls see four in one window
    // even if a minute boundary passes between two of them.
    let mut outputs = Vec::new();
    for _ in 0..8 {
        let output = check(&addr, &["path=/login"]);
        let stdout = text(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{stdout}{}",
            text(&output.stderr)
        );
        assert!(stdout.starts_with("OK\n"), "{stdout}");
        let over = stdout.contains("path=/login: OVER_LIMIT");
        outputs.push(stdout);
        if over {
            return;
        }
    }
    panic!("no OVER_LIMIT status in shadow mode: {outputs:?}");
}

#[test]
fn a_bad_config_exits_1_with_file_line_col_and_never_listens() {
    let path = "tests/fixtures/limits/bad/unknown_key.yaml";
    let mut server = Server::spawn(&[
        "serve",
        "--config",
        path,
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ]);
    let (code, stdout, stderr) = server.finish();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.lines().any(|l| l
            == format!("{path}:6:7: error: unknown key `requests_per_units` in `rate_limit`; did you mean `requests_per_unit`?")),
        "{stderr}"
    );
    assert!(
        stdout.iter().all(|l| !l.starts_with("listening on")),
        "{stdout:?}"
    );
}

#[test]
fn check_rejects_a_descriptor_that_is_not_key_value() {
    let output = tollgate(&["check", "--domain", "edge", "path"])
        .output()
        .expect("tollgate check runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("is not key=value"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn check_against_nothing_listening_fails_with_exit_1() {
    // Port 1 on loopback: nothing of ours listens there, and the refusal is immediate.
    let output = tollgate(&[
        "check",
        "--addr",
        "http://127.0.0.1:1",
        "--domain",
        "edge",
        "path=/",
        "--timeout",
        "2s",
    ])
    .output()
    .expect("tollgate check runs");
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("cannot connect"),
        "{}",
        text(&output.stderr)
    );
}
