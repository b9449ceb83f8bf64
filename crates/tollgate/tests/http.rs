//! `tollgate serve` prints both listening lines and answers `/json` and `/metrics` on its HTTP address.

use std::time::Duration;

use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server, tollgate};
use tollgate_testkit::window;

/// `tollgate serve` on the example limits with free loopback ports.
fn spawn_server() -> Server {
    spawn_server_with_env(&[])
}

/// [`spawn_server`] with the variables `env` set.
fn spawn_server_with_env(env: &[(&str, &str)]) -> Server {
    let mut args = vec!["serve", "--config", "../../examples/limits"];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    args.extend_from_slice(&["--log-level", "warn"]);
    Server::spawn_with_env(&args, env)
}

/// Sends one JSON request; the status code and body.
fn exchange(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let response = tollgate_testkit::http::exchange(
        addr,
        method,
        path,
        &[("content-type", "application/json")],
        body,
    );
    (response.status, response.body)
}

#[test]
fn serve_answers_json_and_metrics_over_http() {
    let server = spawn_server();
    let grpc = server.line_after("listening on ");
    let http = server.line_after("http listening on ");
    assert!(grpc.starts_with("127.0.0.1:"), "{grpc}");
    assert!(http.starts_with("127.0.0.1:"), "{http}");
    assert_ne!(grpc, http);

    // 3 logins a minute: the five below in one minute's window.
    window::wait_clear_of_window_end(Duration::from_secs(60), Duration::from_secs(10));
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}]}]}"#;
    let codes: Vec<u16> = (0..4)
        .map(|_| exchange(&http, "POST", "/json", body).0)
        .collect();
    assert_eq!(codes, [200, 200, 200, 429]);
    let (status, reply) = exchange(&http, "POST", "/json", body);
    assert_eq!(status, 429);
    assert!(reply.contains(r#""overallCode":"OVER_LIMIT""#), "{reply}");

    // One gRPC call through `tollgate check` is counted in the same metrics.
    let url = format!("http://{grpc}");
    let output = tollgate(&["check", "--addr", &url, "--domain", "edge", "path=/login"])
        .output()
        .expect("tollgate check runs");
    assert!(
        !output.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let (status, text) = exchange(&http, "GET", "/metrics", "");
    assert_eq!(status, 200);
    for expected in [
        r#"ratelimit_service_rate_limit_total_hits{domain="edge",key1="path_/login"} 6"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="edge",key1="path_/login"} 3"#,
        r#"ratelimit_request_duration_seconds_count{api="http"} 5"#,
        r#"ratelimit_request_duration_seconds_count{api="grpc"} 1"#,
        r#"ratelimit_service_rate_limit_within_limit{domain="edge",key1="path_/login"} 3"#,
        "ratelimit_service_config_load_success 1",
    ] {
        assert!(
            text.lines().any(|l| l == expected),
            "no `{expected}` in:\n{text}"
        );
    }
    assert_eq!(
        exchange(&http, "GET", "/healthcheck", ""),
        (200, "OK".to_owned())
    );
    assert_eq!(exchange(&http, "GET", "/readyz", "").0, 200);
}

#[test]
fn check_with_zero_hits_asks_without_consuming() {
    let server = spawn_server();
    let url = format!("http://{}", server.line_after("listening on "));
    let check = |hits: &str| {
        let output = tollgate(&[
            "check",
            "--addr",
            &url,
            "--domain",
            "edge",
            "--hits",
            hits,
            "path=/login",
        ])
        .output()
        .expect("tollgate check runs");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    // 3 logins a minute: every check below in one minute's window.
    window::wait_clear_of_window_end(Duration::from_secs(60), Duration::from_secs(10));
    for _ in 0..4 {
        let out = check("0");
        assert!(out.contains(" remaining=3 "), "{out}");
    }
    let out = check("1");
    assert!(out.contains(" remaining=2 "), "{out}");
    let out = check("0");
    assert!(out.contains(" remaining=2 "), "{out}");
}

#[test]
fn request_caps_come_from_the_environment_and_a_page_cannot_post_plain_text() {
    let server = spawn_server_with_env(&[
        ("TOLLGATE_MAX_DESCRIPTORS", "2"),
        ("TOLLGATE_MAX_DESCRIPTOR_ENTRIES", "5"),
        ("TOLLGATE_MAX_REQUEST_BYTES", "512"),
    ]);
    let http = server.line_after("http listening on ");
    let login = r#"{"domain":"edge","descriptors":[{"path":"/login"}]}"#;
    // A cross-origin form or fetch without a preflight can only send these.
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let response = tollgate_testkit::http::exchange(
            &http,
            "POST",
            "/v1/check",
            &[("content-type", content_type)],
            login,
        );
        assert_eq!(response.status, 415, "{content_type}: {}", response.body);
        assert!(
            response.body.contains("application/json"),
            "{}",
            response.body
        );
    }
    let (status, reply) = exchange(&http, "POST", "/v1/check", login);
    assert_eq!(status, 200, "{reply}");
    assert!(
        reply.contains(r#""remaining":2"#),
        "nothing spent before: {reply}"
    );
    let three = r#"{"domain":"edge","descriptors":[{"a":"1"},{"b":"2"},{"c":"3"}]}"#;
    let (status, reply) = exchange(&http, "POST", "/v1/check", three);
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("max-descriptors"), "{reply}");
    let big = format!(
        r#"{{"domain":"{}","descriptors":[{{"a":"1"}}]}}"#,
        "e".repeat(600)
    );
    let (status, reply) = exchange(&http, "POST", "/v1/check", &big);
    assert_eq!(status, 413, "{reply}");
    let (status, metrics) = exchange(&http, "GET", "/metrics", "");
    assert_eq!(status, 200);
    for line in [
        "ratelimit_request_max_descriptors 2",
        "ratelimit_request_max_descriptor_entries 5",
        "ratelimit_request_max_bytes 512",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}
