//! `tollgate serve` answers `tollgate check` until the first OVER_LIMIT, stops on SIGTERM, and never starts on a bad config.

use std::process::{Command, Output};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tollgate_testkit::process::memory_kib;
use tollgate_testkit::scratch::TempDir;
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
    let server = Server::spawn(&[
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
    stop(server);
}

#[test]
fn json_logs_are_one_object_per_line() {
    let server = Server::spawn_with_env(
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
    let (stdout, stderr) = stop_with_stdout(server);
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
    // stdout's announcements are JSON too, in the log's shape (the first,
    // `listening on`, was read by `address()`).
    assert!(!stdout.is_empty(), "{stdout:?}");
    for line in &stdout {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
        assert!(value["timestamp"].is_string(), "{line}");
        let message = value["fields"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("listening on 127.0.0.1:"), "{line}");
    }
}

/// `serve` on the example limits, gRPC on a free loopback port, HTTP on `http_addr`, no drain delay.
fn serve_examples(http_addr: &str) -> Server {
    Server::spawn(&[
        "serve",
        "--config",
        "../../examples/limits",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        http_addr,
        "--drain-delay",
        "0s",
    ])
}

/// `serve` on the example limits with upstream's variables `env`, on free loopback ports, no drain delay.
fn serve_examples_with_env(env: &[(&str, &str)]) -> Server {
    let mut all = vec![
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("PORT", "0"),
        ("TOLLGATE_DRAIN_DELAY", "0s"),
    ];
    all.extend_from_slice(env);
    Server::spawn_with_env(&["serve", "--config", "../../examples/limits"], &all)
}

/// Stops `server` with SIGTERM and returns its stderr (it must exit 0).
fn stop(server: Server) -> String {
    stop_with_stdout(server).1
}

/// Stops `server` with SIGTERM (a graceful stop: it must exit 0); the stdout lines not yet read, and its stderr.
fn stop_with_stdout(mut server: Server) -> (Vec<String>, String) {
    let pid = server.child.id().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", pid.as_str()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let (code, stdout, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
    (stdout, stderr)
}

#[test]
fn a_variable_that_changes_nothing_is_a_warning_at_upstreams_log_level_warn() {
    let server = serve_examples_with_env(&[
        ("LOG_LEVEL", "warn"),
        ("MEMCACHE_HOST_PORT", "memcached:11211"),
    ]);
    let _serving = server.address();
    let stderr = stop(server);
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("MEMCACHE_HOST_PORT is set and changes nothing"))
        .collect();
    assert_eq!(notes.len(), 1, "said once, at WARN: {stderr}");
    assert!(notes[0].contains("WARN"), "{}", notes[0]);
}

#[test]
fn sigterm_right_after_the_listening_line_drains_and_exits_0() {
    // A process manager may stop a server the moment it says where it
    // listens: the handlers must be in place by then, or SIGTERM kills it.
    for _ in 0..8 {
        let server = serve_examples("127.0.0.1:0");
        let _serving = server.address();
        let stderr = stop(server);
        assert!(stderr.contains("SIGTERM received"), "{stderr}");
    }
}

#[test]
fn an_http_api_open_beyond_loopback_without_client_certificates_is_warned_of() {
    let warning = "the HTTP API answers anyone who reaches it";
    let open = serve_examples("0.0.0.0:0");
    let _serving = open.address();
    let stderr = stop(open);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(warning)).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("WARN") && lines[0].contains("--http-refunds refuse"),
        "{}",
        lines[0]
    );
    // On loopback, nothing to warn of.
    let local = serve_examples("127.0.0.1:0");
    let _serving = local.address();
    let stderr = stop(local);
    assert!(!stderr.contains(warning), "{stderr}");
}

#[test]
fn log_level_debug_is_tollgates_debugging_not_the_http2_librarys() {
    let server = serve_examples_with_env(&[("LOG_LEVEL", "debug"), ("RUST_LOG", "")]);
    let addr = server.address();
    for _ in 0..3 {
        let output = check(&addr, &["path=/login"]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    }
    let stderr = stop(server);
    let chatter: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            l.contains(" h2::")
                || l.contains(" hyper")
                || l.contains(" tonic::")
                || l.contains(" tower::")
        })
        .collect();
    assert!(
        chatter.is_empty(),
        "{} library lines, e.g. {:?}",
        chatter.len(),
        chatter.first()
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
fn check_and_validate_end_quietly_when_the_reader_of_their_output_is_gone() {
    let server = Server::spawn(&[
        "serve",
        "--config",
        "../../examples/limits",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ]);
    let url = format!("http://{}", server.address());
    let runs: [Vec<&str>; 2] = [
        vec!["check", "--addr", &url, "--domain", "edge", "path=/login"],
        vec!["validate", "../../examples/limits"],
    ];
    for args in runs {
        // `… | head -0`: the pipe's reader is gone before anything is written.
        let mut child = tollgate(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("tollgate runs");
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("tollgate ends");
        let stderr = text(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
    }
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

/// A length-delimited protobuf field: key, length, bytes.
fn pb_field(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push(field << 3 | 2);
    let mut len = bytes.len();
    while len >= 0x80 {
        out.push(u8::try_from(len & 0x7f).expect("seven bits") | 0x80);
        len >>= 7;
    }
    out.push(u8::try_from(len).expect("seven bits"));
    out.extend_from_slice(bytes);
}

/// A `RateLimitRequest` of domain `edge` with `descriptors` descriptors of one
/// `user` entry each (20 bytes a descriptor), framed as one gRPC message.
fn grpc_request(descriptors: usize) -> Bytes {
    let mut message = Vec::with_capacity(descriptors * 20 + 8);
    pb_field(&mut message, 1, b"edge");
    for i in 0..descriptors {
        let mut entry = Vec::new();
        pb_field(&mut entry, 1, b"user");
        pb_field(&mut entry, 2, format!("{i:08}").as_bytes());
        let mut descriptor = Vec::new();
        pb_field(&mut descriptor, 1, &entry);
        pb_field(&mut message, 2, &descriptor);
    }
    let mut framed = BytesMut::with_capacity(message.len() + 5);
    framed.put_u8(0);
    framed.put_u32(u32::try_from(message.len()).expect("under 4 GiB"));
    framed.extend_from_slice(&message);
    framed.freeze()
}

type H2Client = Client<HttpConnector, Full<Bytes>>;

/// An HTTP/2 (prior knowledge) client: every call on one connection.
fn h2_client() -> H2Client {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// One raw `ShouldRateLimit` call: its `grpc-status` and `grpc-message`.
async fn should_rate_limit(client: &H2Client, addr: &str, framed: Bytes) -> (String, String) {
    let request = hyper::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Full::new(framed))
    .expect("a request");
    let response = tokio::time::timeout(Duration::from_secs(60), client.request(request))
        .await
        .expect("answered within 60 s")
        .expect("an HTTP/2 response");
    let mut fields = response.headers().clone();
    if !fields.contains_key("grpc-status") {
        let body = response.into_body().collect().await.expect("the body");
        fields.extend(body.trailers().cloned().unwrap_or_default());
    }
    let field = |name: &str| {
        fields
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    (field("grpc-status"), field("grpc-message"))
}

/// Sends 16 concurrent requests of `framed` on one connection while another
/// caller keeps asking on its own; checks that each of the 16 is refused with
/// `grpc-status` `status` and a message containing `naming`, that the other
/// caller is answered every time, and that the server's peak RSS (VmHWM)
/// grew by less than `budget_kib`.
async fn flood_is_refused(
    addr: &str,
    pid: u32,
    framed: &Bytes,
    (status, naming): (&str, &str),
    budget_kib: u64,
) {
    let before = memory_kib(pid, "VmHWM");
    let flooder = h2_client();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (client, addr, framed) = (flooder.clone(), addr.to_owned(), framed.clone());
            tokio::spawn(async move { should_rate_limit(&client, &addr, framed).await })
        })
        .collect();
    let other = h2_client();
    let small = grpc_request(1);
    let mut others = Vec::new();
    for _ in 0..20 {
        others.push(should_rate_limit(&other, addr, small.clone()).await);
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.expect("the call task"));
    }
    let grown = memory_kib(pid, "VmHWM").saturating_sub(before);
    eprintln!(
        "16 × {} bytes, refused for {naming}: peak RSS +{grown} KiB",
        framed.len()
    );
    for (answer, message) in &answers {
        assert_eq!(answer, status, "{message}");
        assert!(message.contains(naming), "{message}");
    }
    assert!(others.iter().all(|(status, _)| status == "0"), "{others:?}");
    assert!(grown < budget_kib, "peak RSS grew by {grown} KiB");
}

/// The most 16 requests refused by their length prefix may add to the server's peak RSS.
const OVERSIZE_RSS_BUDGET_KIB: u64 = 4 * 1024;
/// The most 16 requests of just under 1 MiB, refused by the descriptor cap,
/// may add: their bytes, which are buffered whole (16 MiB at most), plus 8 MiB.
const AT_CAP_RSS_BUDGET_KIB: u64 = 24 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_requests_are_refused_before_they_are_decoded_and_others_are_still_answered() {
    let dir = TempDir::new("serve-caps");
    let limits = dir.write(
        "limits.yaml",
        "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 1000}\n",
    );
    // mimalloc backs its arena with transparent huge pages, so the peak RSS
    // would move in 2 MiB steps whatever the flood makes the server hold;
    // without them it counts what the requests cost, a 4 KiB page at a time.
    let server = Server::serve_with_env(
        &limits,
        "memory",
        &["--log-level", "error"],
        &[("MIMALLOC_ALLOW_THP", "0")],
    );
    let addr = server.address();
    let pid = server.child.id();
    let warm = h2_client();
    for _ in 0..50 {
        let (status, message) = should_rate_limit(&warm, &addr, grpc_request(1)).await;
        assert_eq!(status, "0", "{message}");
    }

    // 3.9 MB and 200k descriptors (what fitted under tonic's 4 MiB default):
    // refused by the length prefix, over --max-request-bytes (1 MiB).
    let oversize = grpc_request(195_000);
    assert!(oversize.len() > 3_900_000 && oversize.len() < 4 << 20);
    flood_is_refused(
        &addr,
        pid,
        &oversize,
        ("11", "1048576"),
        OVERSIZE_RSS_BUDGET_KIB,
    )
    .await;

    // Just under 1 MiB, 50k descriptors: refused by the descriptor cap
    // before the decoded request (~8× its size) is built.
    let at_cap = grpc_request(50_000);
    assert!(at_cap.len() < 1 << 20);
    flood_is_refused(
        &addr,
        pid,
        &at_cap,
        ("3", "max-descriptors"),
        AT_CAP_RSS_BUDGET_KIB,
    )
    .await;
}

#[test]
fn an_empty_config_directory_never_starts_unless_allowed() {
    let dir = TempDir::new("serve-empty");
    let config = dir.path().to_str().expect("a UTF-8 path");
    let mut server = Server::serve(dir.path(), "memory", &[]);
    let (code, stdout, stderr) = server.finish();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{config}:1:1: error: no limits file")),
        "{stderr}"
    );
    assert!(
        stdout.iter().all(|l| !l.starts_with("listening on")),
        "{stdout:?}"
    );

    // A dangling link is no better than no file.
    std::os::unix::fs::symlink("..data/limits.yaml", dir.path().join("limits.yaml"))
        .expect("linked");
    let mut server = Server::serve(dir.path(), "memory", &[]);
    let (code, _, stderr) = server.finish();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("limits.yaml:1:1: error: a dangling symbolic link"),
        "{stderr}"
    );

    // Asked for, it serves with no limits.
    std::fs::remove_file(dir.path().join("limits.yaml")).expect("removed");
    let server = Server::serve(dir.path(), "memory", &["--allow-empty-config"]);
    let addr = server.address();
    let output = check(&addr, &["path=/login"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}
