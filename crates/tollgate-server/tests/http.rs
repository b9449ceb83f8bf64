//! The HTTP API answers `/json`, `/v1/check`, health checks and `/rlconfig` over a real loopback connection.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_protocol::rls::{HeaderOptions, Jitter, LimitHeaderNames, ResponseHeaders};
use tollgate_server::LiveEngine;
use tollgate_server::http::{self, HttpState};
use tollgate_server::metrics::{ConfigStats, DEFAULT_NEAR_LIMIT_RATIO, Metrics};

/// How long one request may take, connection included.
const BUDGET: Duration = Duration::from_secs(10);

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: path
    value: /login
    rate_limit:
      name: login
      unit: minute
      requests_per_unit: 3
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 100
  - key: user
    detailed_metric: true
    rate_limit:
      unit: second
      requests_per_unit: 10
";

/// A running server on 127.0.0.1 that stops when dropped.
struct TestServer {
    addr: String,
    ready: Arc<AtomicBool>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server 45 s into a minute, adding the limit headers when `limit_headers`.
    async fn start(limit_headers: bool) -> TestServer {
        let (engine, _clock) = common::engine(LIMITS, 45_000);
        let headers = ResponseHeaders::new(
            HeaderOptions {
                limit_headers,
                limit_header_names: LimitHeaderNames::default(),
                ..HeaderOptions::default()
            },
            Jitter::seeded(1),
        );
        let ready = Arc::new(AtomicBool::new(true));
        let live = Arc::new(LiveEngine::fixed(engine));
        let metrics = Arc::new(Metrics::new(
            Arc::clone(&live) as Arc<dyn ConfigStats>,
            DEFAULT_NEAR_LIMIT_RATIO,
        ));
        let state =
            HttpState::new(live, Arc::new(headers), Arc::clone(&ready)).with_metrics(metrics);
        let listener = common::bind_loopback().await;
        let addr = listener.local_addr().expect("local address").to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(http::serve(listener, http::router(state), async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            ready,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Sends one request and reads the whole reply: status, lower-cased headers and body.
    async fn send(&self, method: &str, path: &str, body: &str) -> Reply {
        let exchange = async {
            let mut stream = TcpStream::connect(&self.addr).await.expect("connect");
            let request = format!(
                "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                self.addr,
                body.len()
            );
            stream
                .write_all(request.as_bytes())
                .await
                .expect("write the request");
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw).await.expect("read the reply");
            raw
        };
        let raw = tokio::time::timeout(BUDGET, exchange)
            .await
            .expect("the server answers in time");
        Reply::parse(&raw)
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(BUDGET, task)
                .await
                .expect("the server stops in time")
                .expect("the server task completes")
                .expect("the server ran without error");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// One HTTP reply.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let text = String::from_utf8_lossy(raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().expect("a status line");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status code");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Reply {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

const LOGIN_JSON: &str =
    r#"{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}]}]}"#;

#[tokio::test]
async fn json_answers_ok_then_429_with_proto3_json_fields() {
    let server = TestServer::start(false).await;
    for remaining in [2, 1, 0] {
        let reply = server.send("POST", "/json", LOGIN_JSON).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(
            reply.json(),
            json!({
                "overallCode": "OK",
                "statuses": [{
                    "code": "OK",
                    "currentLimit": {
                        "name": "login",
                        "requestsPerUnit": 3,
                        "unit": "MINUTE",
                        "unitMultiplier": 1
                    },
                    "limitRemaining": remaining,
                    "durationUntilReset": "15s"
                }]
            })
        );
    }
    let reply = server.send("POST", "/json", LOGIN_JSON).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(
        reply.json(),
        json!({
            "overallCode": "OVER_LIMIT",
            "statuses": [{
                "code": "OVER_LIMIT",
                "currentLimit": {
                    "name": "login",
                    "requestsPerUnit": 3,
                    "unit": "MINUTE",
                    "unitMultiplier": 1
                },
                "limitRemaining": 0,
                "durationUntilReset": "15s"
            }]
        })
    );
    server.stop().await;
}

#[tokio::test]
async fn json_accepts_snake_case_string_hits_and_overrides() {
    let server = TestServer::start(false).await;
    // hits_addend as a proto3 JSON string, in snake_case, checks without consuming.
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}],"hits_addend":"0"}]}"#;
    let reply = server.send("POST", "/json", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["statuses"][0]["limitRemaining"], json!(3));
    // The request's hitsAddend consumes all three at once.
    let body = r#"{"domain":"edge","hitsAddend":3,"descriptors":[{"entries":[{"key":"path","value":"/login"}]}]}"#;
    let reply = server.send("POST", "/json", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["statuses"][0]["limitRemaining"], json!(0));
    // A descriptor limit override by unit name.
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"a"}],"limit":{"requestsPerUnit":1,"unit":"SECOND"}}]}"#;
    let first = server.send("POST", "/json", body).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.json()["statuses"][0]["currentLimit"]["unit"],
        json!("SECOND")
    );
    let second = server.send("POST", "/json", body).await;
    assert_eq!(second.status, 429, "{}", second.body);
    server.stop().await;
}

#[tokio::test]
async fn bad_json_and_invalid_requests_are_400_naming_the_problem() {
    let server = TestServer::start(false).await;
    let reply = server.send("POST", "/json", "{\"domain\":").await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.body.starts_with("invalid RateLimitRequest JSON: "),
        "{}",
        reply.body
    );
    let reply = server.send("POST", "/json", r#"{"domain":7}"#).await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("invalid type"), "{}", reply.body);
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":1,"unit":"FORTNIGHT"}}]}"#;
    let reply = server.send("POST", "/json", body).await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("FORTNIGHT"), "{}", reply.body);
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"many"}]}"#;
    let reply = server.send("POST", "/json", body).await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("\"many\""), "{}", reply.body);

    // An empty domain is the engine's InvalidArgument, with its message.
    let body = r#"{"domain":"","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let reply = server.send("POST", "/json", body).await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("domain"), "{}", reply.body);
    let reply = server
        .send(
            "POST",
            "/v1/check",
            r#"{"domain":"","descriptors":[{"k":"v"}]}"#,
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("domain"), "{}", reply.body);
    let reply = server
        .send(
            "POST",
            "/v1/check",
            r#"{"domain":"edge","descriptors":[{"k":1}]}"#,
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.body.starts_with("invalid check request JSON: "),
        "{}",
        reply.body
    );
    server.stop().await;
}

#[tokio::test]
async fn check_answers_the_native_shape_with_limit_headers() {
    let server = TestServer::start(true).await;
    let body = r#"{"domain":"edge","descriptors":[{"path":"/login"}],"hits":1}"#;
    for remaining in [2, 1, 0] {
        let reply = server.send("POST", "/v1/check", body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            reply.json(),
            json!({
                "allowed": true,
                "statuses": [{
                    "code": "OK", "limit": 3, "unit": "minute", "window_s": 60,
                    "name": "login", "remaining": remaining, "reset_s": 15
                }]
            })
        );
        let names = LimitHeaderNames::default();
        assert_eq!(reply.header(&names.limit.to_ascii_lowercase()), Some("3"));
        let remaining = remaining.to_string();
        assert_eq!(
            reply.header(&names.remaining.to_ascii_lowercase()),
            Some(remaining.as_str())
        );
        assert_eq!(reply.header(&names.reset.to_ascii_lowercase()), Some("15"));
    }
    let reply = server.send("POST", "/v1/check", body).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(
        reply.json(),
        json!({
            "allowed": false,
            "statuses": [{
                "code": "OVER_LIMIT", "limit": 3, "unit": "minute", "window_s": 60,
                "name": "login", "remaining": 0, "reset_s": 15, "retry_after_s": 15
            }]
        })
    );
    // A key-only rule matches any value of its key.
    let reply = server
        .send(
            "POST",
            "/v1/check",
            r#"{"domain":"edge","descriptors":[{"remote_address":"10.0.0.1"}]}"#,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["statuses"][0]["limit"], json!(100));
    server.stop().await;
}

#[tokio::test]
async fn check_with_zero_hits_checks_without_consuming() {
    let server = TestServer::start(false).await;
    let check = r#"{"domain":"edge","descriptors":[{"path":"/login"}],"hits":0}"#;
    for _ in 0..5 {
        let reply = server.send("POST", "/v1/check", check).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.json()["statuses"][0]["remaining"], json!(3));
    }
    // Without `hits` a call costs one.
    let spend = r#"{"domain":"edge","descriptors":[{"path":"/login"}]}"#;
    let reply = server.send("POST", "/v1/check", spend).await;
    assert_eq!(reply.json()["statuses"][0]["remaining"], json!(2));
    let reply = server.send("POST", "/v1/check", check).await;
    assert_eq!(reply.json()["statuses"][0]["remaining"], json!(2));
    server.stop().await;
}

#[tokio::test]
async fn health_endpoints_and_readiness() {
    let server = TestServer::start(false).await;
    let reply = server.send("GET", "/healthcheck", "").await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "OK"));
    let reply = server.send("GET", "/healthz", "").await;
    assert_eq!(reply.status, 200);
    let reply = server.send("GET", "/readyz", "").await;
    assert_eq!(reply.status, 200);
    server.ready.store(false, Ordering::Release);
    let reply = server.send("GET", "/readyz", "").await;
    assert_eq!(reply.status, 503);
    let reply = server.send("GET", "/nowhere", "").await;
    assert_eq!(reply.status, 404);
    server.stop().await;
}

#[tokio::test]
async fn rlconfig_lists_one_line_per_rule() {
    let server = TestServer::start(false).await;
    let reply = server.send("GET", "/rlconfig", "").await;
    assert_eq!(reply.status, 200);
    let lines: Vec<&str> = reply.body.lines().collect();
    assert_eq!(
        lines,
        [
            "edge.path_/login: name=login requests_per_unit=3 window=60s algorithm=fixed_window",
            "edge.remote_address: requests_per_unit=100 window=3600s algorithm=fixed_window",
            "edge.user: requests_per_unit=10 window=1s algorithm=fixed_window, detailed_metric",
        ],
        "{}",
        reply.body
    );
    server.stop().await;
}

#[tokio::test]
async fn metrics_count_per_rule_with_bounded_labels() {
    let server = TestServer::start(false).await;
    for _ in 0..4 {
        server.send("POST", "/json", LOGIN_JSON).await;
    }
    for user in ["alice", "bob"] {
        let body = format!(r#"{{"domain":"edge","descriptors":[{{"user":"{user}"}}]}}"#);
        let reply = server.send("POST", "/v1/check", &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let reply = server
        .send(
            "POST",
            "/v1/check",
            r#"{"domain":"edge","descriptors":[{"remote_address":"10.0.0.1"}],"hits":5}"#,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Unmatched descriptors and rejected requests count nothing per rule.
    server
        .send(
            "POST",
            "/v1/check",
            r#"{"domain":"edge","descriptors":[{"x":"y"}]}"#,
        )
        .await;
    server.send("POST", "/json", "not json").await;

    let reply = server.send("GET", "/metrics", "").await;
    assert_eq!(reply.status, 200);
    let text = reply.body;
    let lines: Vec<&str> = text.lines().collect();
    for expected in [
        r#"ratelimit_total_hits_total{domain="edge",descriptor="path_/login"} 4"#,
        r#"ratelimit_within_limit_total{domain="edge",descriptor="path_/login"} 3"#,
        r#"ratelimit_over_limit_total{domain="edge",descriptor="path_/login"} 1"#,
        r#"ratelimit_near_limit_total{domain="edge",descriptor="path_/login"} 1"#,
        r#"ratelimit_total_hits_total{domain="edge",descriptor="remote_address"} 5"#,
        r#"ratelimit_within_limit_total{domain="edge",descriptor="remote_address"} 5"#,
        r#"ratelimit_total_hits_total{domain="edge",descriptor="user_alice"} 1"#,
        r#"ratelimit_total_hits_total{domain="edge",descriptor="user_bob"} 1"#,
        r#"ratelimit_request_duration_seconds_count{api="http"} 8"#,
    ] {
        assert!(lines.contains(&expected), "no `{expected}` in:\n{text}");
    }
    // Runtime values only label the detailed_metric rule.
    assert!(!text.contains("10.0.0.1"), "{text}");
    assert!(!text.contains("descriptor=\"x"), "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ratelimit_config_info{hash=\"") && l.ends_with("} 1")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ratelimit_config_load_success_total ")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ratelimit_config_load_error_total 0")),
        "{text}"
    );
    server.stop().await;
}
