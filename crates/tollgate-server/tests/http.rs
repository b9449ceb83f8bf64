//! The HTTP API answers `/json`, `/v1/check`, health checks and `/rlconfig` over a real loopback connection.

mod fixed_engine;
mod minute;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_protocol::rls::{
    HeaderOptions, Jitter, LimitHeaderNames, RequestCaps, ResponseHeaders,
};
use tollgate_server::LiveEngine;
use tollgate_server::http::{self, HttpState};
use tollgate_server::metrics::{ConfigStats, DEFAULT_NEAR_LIMIT_RATIO, Metrics};
use tollgate_testkit::async_http::{AsyncClient, Response as Reply};
use tollgate_testkit::ports::bind_loopback;

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
        TestServer::start_with_caps(limit_headers, RequestCaps::default()).await
    }

    /// [`TestServer::start`] refusing requests over `caps`.
    async fn start_with_caps(limit_headers: bool, caps: RequestCaps) -> TestServer {
        TestServer::start_with(limit_headers, caps, http::Refunds::Allowed).await
    }

    /// [`TestServer::start_with_caps`], giving units back or refusing to.
    async fn start_with(
        limit_headers: bool,
        caps: RequestCaps,
        refunds: http::Refunds,
    ) -> TestServer {
        let (engine, _clock) = fixed_engine::engine(LIMITS, 45_000);
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
        let metrics = Arc::new(
            Metrics::new(
                Arc::clone(&live) as Arc<dyn ConfigStats>,
                DEFAULT_NEAR_LIMIT_RATIO,
            )
            .with_request_caps(&caps),
        );
        let state = HttpState::new(live, Arc::new(headers), Arc::clone(&ready))
            .with_metrics(metrics)
            .with_caps(caps)
            .with_refunds(refunds);
        let listener = bind_loopback().await;
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

    /// Sends one request and reads the whole reply: status, headers and body.
    async fn send(&self, method: &str, path: &str, body: &str) -> Reply {
        self.send_as(method, path, Some("application/json"), body)
            .await
    }

    /// [`TestServer::send`] with another `Content-Type` (none when `None`).
    async fn send_as(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> Reply {
        let mut headers = vec![("connection", "close")];
        headers.extend(content_type.map(|value| ("content-type", value)));
        AsyncClient::http1()
            .send(method, &self.addr, path, &headers, body)
            .await
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
async fn refunds_refused_give_nothing_back_and_spend_nothing() {
    let server =
        TestServer::start_with(false, RequestCaps::default(), http::Refunds::Refused).await;
    let reply = server.send("POST", "/json", LOGIN_JSON).await;
    assert_eq!(reply.json()["statuses"][0]["limitRemaining"], json!(2));
    let refund = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}],"isNegativeHits":true}]}"#;
    let reply = server.send("POST", "/json", refund).await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(reply.body.contains("--http-refunds"), "{}", reply.body);
    // Nothing was given back: the next request sees one unit spent, then this one.
    let reply = server.send("POST", "/json", LOGIN_JSON).await;
    assert_eq!(reply.json()["statuses"][0]["limitRemaining"], json!(1));
    server.stop().await;
    // Allowed (upstream's behaviour), the same refund gives the unit back.
    let server = TestServer::start(false).await;
    server.send("POST", "/json", LOGIN_JSON).await;
    let reply = server.send("POST", "/json", refund).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = server.send("POST", "/json", LOGIN_JSON).await;
    assert_eq!(reply.json()["statuses"][0]["limitRemaining"], json!(2));
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
async fn json_carries_the_limit_headers_the_grpc_answer_carries() {
    let server = TestServer::start(true).await;
    let reply = server.send("POST", "/json", LOGIN_JSON).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let names = LimitHeaderNames::default();
    assert_eq!(
        reply.json()["responseHeadersToAdd"],
        json!([
            {"key": names.limit, "value": "3"},
            {"key": names.remaining, "value": "2"},
            {"key": names.reset, "value": "15"}
        ]),
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
            "edge.path_/login: name=login requests_per_unit=3 window=60s algorithm=fixed_window, source=file",
            "edge.remote_address: requests_per_unit=100 window=3600s algorithm=fixed_window, source=file",
            "edge.user: requests_per_unit=10 window=1s algorithm=fixed_window, detailed_metric, source=file",
        ],
        "{}",
        reply.body
    );
    server.stop().await;
}

#[test]
fn rlconfig_shows_a_shapers_delay_a_lease_and_staggered_windows() {
    let yaml = "domain: edge\ndescriptors:\n  - key: user\n    stagger: true\n    lease: 1s\n    rate_limit: {unit: minute, requests_per_unit: 100}\n  - key: upload\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 5, delay: 2}\n";
    let loaded = tollgate_rules::load_sources(
        [(std::path::Path::new("edge.yaml"), yaml)],
        tollgate_rules::LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors(), "{:?}", loaded.diagnostics);
    let dump = http::rules_dump(&loaded.rule_set);
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(
        lines,
        [
            "edge.user: requests_per_unit=100 window=60s algorithm=fixed_window, lease=1s, stagger, source=file",
            "edge.upload: requests_per_unit=10 window=1s algorithm=leaky_bucket burst=5 delay=2, source=file",
        ],
        "{dump}"
    );
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
        r#"ratelimit_service_rate_limit_total_hits{domain="edge",key1="path_/login"} 4"#,
        r#"ratelimit_service_rate_limit_within_limit{domain="edge",key1="path_/login"} 3"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="edge",key1="path_/login"} 1"#,
        r#"ratelimit_service_rate_limit_near_limit{domain="edge",key1="path_/login"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="edge",key1="remote_address"} 5"#,
        r#"ratelimit_service_rate_limit_within_limit{domain="edge",key1="remote_address"} 5"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="edge",key1="user_alice"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="edge",key1="user_bob"} 1"#,
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
            .any(|l| l.starts_with("ratelimit_service_config_load_success ")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ratelimit_service_config_load_error 0")),
        "{text}"
    );
    server.stop().await;
}

/// A `/v1/check` body of `descriptors` descriptors of `entries` entries each.
fn check_body(descriptors: usize, entries: usize) -> String {
    let descriptor: Vec<String> = (0..entries).map(|i| format!("\"k{i}\":\"v\"")).collect();
    let descriptor = format!("{{{}}}", descriptor.join(","));
    let all = vec![descriptor; descriptors].join(",");
    format!(r#"{{"domain":"edge","descriptors":[{all}]}}"#)
}

/// A `/json` body of `descriptors` descriptors of `entries` entries each.
fn json_body(descriptors: usize, entries: usize) -> String {
    let entry = r#"{"key":"k","value":"v"}"#;
    let descriptor = format!(r#"{{"entries":[{}]}}"#, vec![entry; entries].join(","));
    let all = vec![descriptor; descriptors].join(",");
    format!(r#"{{"domain":"edge","descriptors":[{all}]}}"#)
}

#[tokio::test]
async fn only_application_json_is_read_and_anything_else_is_415_spending_nothing() {
    let server = TestServer::start(false).await;
    let check = r#"{"domain":"edge","descriptors":[{"path":"/login"}],"hits":1}"#;
    // What a web page may send cross-origin without a preflight, and no type at all.
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        None,
    ] {
        for (path, body) in [("/v1/check", check), ("/json", LOGIN_JSON)] {
            let reply = server.send_as("POST", path, content_type, body).await;
            assert_eq!(reply.status, 415, "{path} {content_type:?}: {}", reply.body);
            assert!(
                reply.body.contains("application/json"),
                "{path} {content_type:?}: {}",
                reply.body
            );
        }
    }
    // Nothing was spent: the limit of 3 is whole, read with parameters and any case.
    for (content_type, remaining) in [
        ("application/json; charset=utf-8", 2),
        ("Application/JSON", 1),
        ("application/json;charset=\"UTF-8\"", 0),
    ] {
        let reply = server
            .send_as("POST", "/v1/check", Some(content_type), check)
            .await;
        assert_eq!(reply.status, 200, "{content_type}: {}", reply.body);
        assert_eq!(reply.json()["statuses"][0]["remaining"], json!(remaining));
    }
    server.stop().await;
}

#[tokio::test]
async fn requests_over_a_cap_are_400_or_413_naming_the_cap_and_spend_nothing() {
    let caps = RequestCaps {
        max_descriptors: 4,
        max_descriptor_entries: 3,
        max_message_bytes: 2048,
    };
    let server = TestServer::start_with_caps(false, caps).await;
    for (path, body, status, cap) in [
        ("/v1/check", check_body(5, 1), 400, "max-descriptors"),
        ("/json", json_body(5, 1), 400, "max-descriptors"),
        ("/v1/check", check_body(1, 4), 400, "max-descriptor-entries"),
        ("/json", json_body(1, 4), 400, "max-descriptor-entries"),
        ("/v1/check", check_body(4, 100), 413, "max-request-bytes"),
        ("/json", json_body(4, 100), 413, "max-request-bytes"),
    ] {
        let reply = server.send("POST", path, &body).await;
        assert_eq!(reply.status, status, "{path} {cap}: {}", reply.body);
        assert!(reply.body.contains(cap), "{path}: {}", reply.body);
    }
    let reply = server.send("POST", "/v1/check", &check_body(4, 3)).await;
    assert_eq!(reply.status, 200, "at the caps: {}", reply.body);
    let reply = server.send("POST", "/json", &json_body(4, 3)).await;
    assert_eq!(reply.status, 200, "at the caps: {}", reply.body);
    let login = r#"{"domain":"edge","descriptors":[{"path":"/login"}],"hits":1}"#;
    let reply = server.send("POST", "/v1/check", login).await;
    assert_eq!(reply.json()["statuses"][0]["remaining"], json!(2));
    // Each cap is a gauge of its setting.
    let metrics = server.send("GET", "/metrics", "").await.body;
    for line in [
        "ratelimit_request_max_descriptors 4",
        "ratelimit_request_max_descriptor_entries 3",
        "ratelimit_request_max_bytes 2048",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    server.stop().await;
}
