//! `tollgate bench rls` loads a `tollgate serve` child and reports consistent counts and latencies.

mod support;

use std::process::Output;

use support::{Server, tollgate};

/// A `tollgate serve` child on the example limits; its gRPC address as a URL.
fn spawn_server() -> (Server, String) {
    let server = Server::spawn(&[
        "serve",
        "--config",
        "../../examples/limits",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ]);
    let addr = format!("http://{}", server.address());
    (server, addr)
}

fn bench(addr: &str, descriptors: &[&str], extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "rls",
        "--addr",
        addr,
        "--domain",
        "edge",
        "-d",
        "1s",
        "--warmup",
        "0s",
        "-c",
        "4",
        "--connections",
        "2",
        "--json",
    ];
    for descriptor in descriptors {
        args.extend_from_slice(&["--descriptor", descriptor]);
    }
    args.extend_from_slice(extra);
    tollgate(&args).output().expect("tollgate bench runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn report(output: &Output) -> serde_json::Value {
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON object on stdout")
}

fn count(report: &serde_json::Value, field: &str) -> u64 {
    report[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {report}"))
}

/// The counts add up, nothing failed, and the percentiles are ordered.
fn assert_consistent(report: &serde_json::Value) {
    let requests = count(report, "requests");
    assert!(requests > 0, "{report}");
    assert_eq!(
        count(report, "ok") + count(report, "over_limit") + count(report, "errors"),
        requests,
        "{report}"
    );
    assert_eq!(count(report, "errors"), 0, "{report}");
    let latency = &report["latency_us"];
    let p = |name: &str| latency[name].as_u64().expect("a percentile");
    assert!(p("min") <= p("p50"), "{report}");
    assert!(p("p50") <= p("p90"), "{report}");
    assert!(p("p90") <= p("p99"), "{report}");
    assert!(p("p99") <= p("p99_9"), "{report}");
    assert!(p("p99_9") <= p("max"), "{report}");
    assert!(p("max") > 0, "{report}");
}

#[test]
fn a_closed_loop_over_ten_keys_counts_every_answer() {
    let (_server, addr) = spawn_server();
    let output = bench(&addr, &["path=/p{k}"], &["--keys", "10"]);
    let report = report(&output);
    assert_consistent(&report);
    assert_eq!(report["mode"], "closed");
    assert_eq!(count(&report, "keys"), 10);
}

#[test]
fn the_login_limit_shows_over_limit_and_lets_at_most_three_a_minute_through() {
    let (_server, addr) = spawn_server();
    let output = bench(&addr, &["path=/login"], &[]);
    let report = report(&output);
    assert_consistent(&report);
    assert!(count(&report, "over_limit") > 0, "{report}");
    let ok = count(&report, "ok");
    // 3 per minute window; a 1 s run touches at most two windows.
    assert!((1..=6).contains(&ok), "{report}");
}

#[test]
fn an_open_loop_keeps_its_rate() {
    let (_server, addr) = spawn_server();
    let output = bench(&addr, &["path=/p{k}"], &["--keys", "10", "--rate", "200"]);
    let report = report(&output);
    assert_consistent(&report);
    assert_eq!(report["mode"], "open");
    // 200 calls scheduled in the 1 s window, all sent.
    assert_eq!(count(&report, "requests"), 200, "{report}");
}

#[test]
fn a_bad_descriptor_is_a_usage_error() {
    let output = bench("http://127.0.0.1:9", &["user"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("--descriptor \"user\": `user` is not key=value"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "");
}

#[test]
fn nothing_listening_is_exit_1() {
    // Bind a port, then free it, so nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = format!("http://{}", listener.local_addr().expect("its address"));
    drop(listener);
    let output = bench(&addr, &["user={k}"], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains(&format!("error: cannot connect to {addr}")),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "");
}
