//! `tollgate serve` prints both listening lines and answers `/json` and `/metrics` on its HTTP address.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;

use support::{BUDGET, Server, tollgate};

/// `tollgate serve` on the example limits with free loopback ports.
fn spawn_server() -> Server {
    Server::spawn(&[
        "serve",
        "--config",
        "../../examples/limits",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--log-level",
        "warn",
    ])
}

/// Sends one HTTP/1.1 request with `Connection: close`; the status code and body.
fn exchange(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP address");
    stream.set_read_timeout(Some(BUDGET)).expect("read timeout");
    stream
        .set_write_timeout(Some(BUDGET))
        .expect("write timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .expect("send the request");
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .expect("read the whole reply");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status code");
    (status, body.to_owned())
}

#[test]
fn serve_answers_json_and_metrics_over_http() {
    let server = spawn_server();
    let grpc = server.line_after("listening on ");
    let http = server.line_after("http listening on ");
    assert!(grpc.starts_with("127.0.0.1:"), "{grpc}");
    assert!(http.starts_with("127.0.0.1:"), "{http}");
    assert_ne!(grpc, http);

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
        r#"ratelimit_total_hits_total{domain="edge",descriptor="path_/login"} 6"#,
        r#"ratelimit_over_limit_total{domain="edge",descriptor="path_/login"} 3"#,
        r#"ratelimit_request_duration_seconds_count{api="http"} 5"#,
        r#"ratelimit_request_duration_seconds_count{api="grpc"} 1"#,
        r#"ratelimit_within_limit_total{domain="edge",descriptor="path_/login"} 3"#,
        "ratelimit_config_load_success_total 1",
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
    for _ in 0..4 {
        let out = check("0");
        assert!(out.contains(" remaining=3 "), "{out}");
    }
    let out = check("1");
    assert!(out.contains(" remaining=2 "), "{out}");
    let out = check("0");
    assert!(out.contains(" remaining=2 "), "{out}");
}
