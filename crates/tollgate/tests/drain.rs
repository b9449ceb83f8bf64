//! `tollgate serve`'s drain delay: at SIGTERM `/readyz` turns 503 while both listeners still accept new connections, until `--drain-delay` (default 5 s) has passed; then it stops.

use std::net::SocketAddr;
use std::time::Duration;

use tollgate_testkit::budget::{Stopwatch, eventually};
use tollgate_testkit::http::try_get;
use tollgate_testkit::tollgate::{Server, tollgate};

/// The default drain delay the test expects.
const DEFAULT_DELAY: Duration = Duration::from_secs(5);

fn start(env: &[(&str, &str)]) -> (Server, String, SocketAddr) {
    let server = Server::example_limits(&[], env);
    let grpc = server.address();
    let http = server.http_address();
    (server, grpc, http)
}

fn status(http: SocketAddr, path: &str) -> Option<u16> {
    try_get(http, path, &[]).ok().map(|r| r.status)
}

/// One decision over a new gRPC connection: `tollgate check`'s exit code.
fn check(grpc: &str) -> Option<i32> {
    let url = format!("http://{grpc}");
    let args = ["check", "--addr", url.as_str(), "--domain", "edge"];
    let output = tollgate(&args)
        .arg("client=internal")
        .output()
        .expect("tollgate check runs");
    output.status.code()
}

#[test]
fn readiness_fails_at_sigterm_and_the_listeners_serve_until_the_default_delay_ends() {
    let (mut server, grpc, http) = start(&[]);
    assert_eq!(status(http, "/readyz"), Some(200));
    assert_eq!(check(&grpc), Some(0));

    let since_signal = Stopwatch::start();
    server.terminate();
    eventually("/readyz answers 503", Duration::from_secs(3), || {
        status(http, "/readyz") == Some(503)
    });
    // Still within the delay: new connections on both listeners are served.
    assert_eq!(check(&grpc), Some(0), "the gRPC listener still serves");
    assert_eq!(status(http, "/healthz"), Some(200), "so does the HTTP one");
    assert!(
        since_signal.elapsed() < DEFAULT_DELAY,
        "the checks above ran within the delay ({:?}); the machine is too slow for this test",
        since_signal.elapsed()
    );

    let (code, _, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        since_signal.elapsed() >= DEFAULT_DELAY,
        "stopped {:?} after SIGTERM, before the drain delay; stderr:\n{stderr}",
        since_signal.elapsed()
    );
    assert!(stderr.contains("drain delay"), "{stderr}");
}

#[test]
fn a_zero_delay_from_the_environment_stops_at_once() {
    let (mut server, grpc, http) = start(&[("TOLLGATE_DRAIN_DELAY", "0s")]);
    assert_eq!(check(&grpc), Some(0));
    let since_signal = Stopwatch::start();
    server.terminate();
    let (code, _, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(since_signal.elapsed() < DEFAULT_DELAY, "{stderr}");
    assert_eq!(status(http, "/readyz"), None, "the listener is closed");
}

#[test]
fn a_drain_delay_that_is_not_a_duration_is_refused() {
    let output = tollgate(&[
        "serve",
        "--config",
        "../../examples/limits",
        "--drain-delay",
        "soon",
    ])
    .output()
    .expect("tollgate runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--drain-delay"), "{stderr}");
}
