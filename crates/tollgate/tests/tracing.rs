//! OpenTelemetry tracing end to end: `tollgate proxy` and `tollgate serve` with `--tracing` export their spans over OTLP/gRPC to a collector started here, continue the client's W3C trace (or its B3 trace with `--trace-propagation b3`), and pass it on to the upstream and to the rate limit service.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use parking_lot::Mutex;
use tollgate_testkit::bootstrap::repository_file;
use tollgate_testkit::budget::Stopwatch;
use tollgate_testkit::http::get;
use tollgate_testkit::ports::free_port;
use tollgate_testkit::process::log_tail;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{LoggedChild, tollgate};
use tollgate_testkit::upstream::Upstream;

/// One span as the collector got it.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    events: Vec<String>,
}

/// An OTLP/gRPC trace collector keeping every span it is sent.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    /// Keeps every span of `request`.
    fn record(&self, request: ExportTraceServiceRequest) {
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let mut spans = self.spans.lock();
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref())
                .map(|v| format!("{:?}", v.value))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Received {
                        service: service.clone(),
                        name: span.name.clone(),
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent: hex(&span.parent_span_id),
                        events: span.events.iter().map(|e| e.name.clone()).collect(),
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.record(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/HTTP collector on a free loopback port: protobuf bodies posted to
/// `/v1/traces`, on a runtime of its own (kept while the guard lives).
fn start_http_collector() -> (Collector, SocketAddr, tokio::runtime::Runtime) {
    use http_body_util::BodyExt;
    use prost::Message;

    let collector = Collector::default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a port");
    let addr = listener.local_addr().expect("bound");
    let keeper = collector.clone();
    runtime.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let keeper = keeper.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let keeper = keeper.clone();
                        async move {
                            let status = if request.uri().path() != "/v1/traces" {
                                hyper::StatusCode::NOT_FOUND
                            } else {
                                let body = request.into_body().collect().await;
                                let decoded = body.ok().and_then(|b| {
                                    ExportTraceServiceRequest::decode(b.to_bytes()).ok()
                                });
                                match decoded {
                                    Some(export) => {
                                        keeper.record(export);
                                        hyper::StatusCode::OK
                                    }
                                    None => hyper::StatusCode::BAD_REQUEST,
                                }
                            };
                            let mut response = hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::new(),
                            ));
                            *response.status_mut() = status;
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (collector, addr, runtime)
}

/// Starts the collector on a free loopback port, on a runtime of its own (kept while the guard lives).
fn start_collector() -> (Collector, SocketAddr, tokio::runtime::Runtime) {
    let collector = Collector::default();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let service = TraceServiceServer::new(collector.clone());
    runtime.spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve(addr)
            .await;
    });
    (collector, addr, runtime)
}

/// Waits (at most 20 s) until the collector holds spans named `names` of trace `trace_id`.
fn wait_for(collector: &Collector, trace_id: &str, names: &[&str]) -> Vec<Received> {
    let clock = Stopwatch::start();
    loop {
        let spans: Vec<Received> = collector
            .spans
            .lock()
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect();
        if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
            return spans;
        }
        assert!(
            clock.elapsed() < Duration::from_secs(20),
            "spans {names:?} of trace {trace_id} never arrived; got {spans:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `serve` on the example limits with `extra` flags and `env`; its log in `dir`.
fn serve_examples(dir: &TempDir, extra: &[&str], env: &[(&str, &str)]) -> LoggedChild {
    // The batch exporter sends every 100 ms (OTEL_BSP_SCHEDULE_DELAY), not every 5 s.
    let mut serve = tollgate(&["serve", "--config"]);
    serve
        .arg(repository_file("examples/limits"))
        .args([
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--log-level",
            "warn",
        ])
        .args(extra)
        .envs(env.iter().copied())
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    LoggedChild::spawn(serve, dir.0.join("serve.log"), false)
}

/// `serve` on the example limits with `--tracing` to `endpoint`, plus `extra`; its log in `dir`.
fn serve_traced(dir: &TempDir, endpoint: &str, extra: &[&str]) -> LoggedChild {
    let mut flags = vec!["--tracing", "--otlp-endpoint", endpoint];
    flags.extend_from_slice(extra);
    serve_examples(dir, &flags, &[])
}

#[test]
fn a_proxied_request_and_its_check_continue_the_clients_trace_to_the_upstream() {
    let (collector, collector_addr, _collector_runtime) = start_collector();
    let endpoint = format!("http://{collector_addr}");
    let dir = TempDir::new("tracing");
    let upstream = Upstream::spawn();
    let rls = serve_traced(&dir, &endpoint, &["--tracing-service-name", "rls"]);
    let config = dir.0.join("proxy.yaml");
    std::fs::write(
        &config,
        format!(
            "listeners: [{{address: 127.0.0.1:0}}]\nglobal_ratelimit:\n  domain: edge\n  rate_limit_service: {{address: \"{}\"}}\n  timeout: 2s\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{}\"}}]\nroutes:\n  - name: all\n    cluster: backend\n    rate_limits:\n      - actions:\n          - request_headers: {{header_name: x-key, descriptor_key: api_key}}\n",
            rls.addr, upstream.addr
        ),
    )
    .expect("written");
    let mut proxy = tollgate(&["proxy", "--config"]);
    proxy
        .arg(&config)
        .args([
            "--log-level",
            "warn",
            "--tracing",
            "--otlp-endpoint",
            &endpoint,
        ])
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let proxy = LoggedChild::spawn(proxy, dir.0.join("proxy.log"), false);

    // A client in a sampled trace.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let response = get(
        proxy.addr,
        "/echo",
        &[("traceparent", &traceparent), ("x-key", "k")],
    );
    assert_eq!(
        response.status,
        200,
        "{response:#?}; proxy log:\n{}",
        log_tail(&proxy.log)
    );
    // The upstream got the same trace, from the proxy's upstream span.
    let passed_on = response
        .body
        .lines()
        .find_map(|line| line.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("no traceparent upstream: {response:#?}"))
        .to_owned();
    assert!(
        passed_on.starts_with(&format!("00-{trace_id}-")),
        "{passed_on}"
    );
    assert!(passed_on.ends_with("-01"), "still sampled: {passed_on}");
    assert_ne!(
        passed_on, traceparent,
        "a span of the proxy's own is the parent"
    );

    let spans = wait_for(
        &collector,
        trace_id,
        &["proxy", "upstream", "ShouldRateLimit"],
    );
    let one = |name: &str| spans.iter().find(|s| s.name == name).expect("seen").clone();
    let (server, client, check) = (one("proxy"), one("upstream"), one("ShouldRateLimit"));
    assert_eq!(
        server.parent, "00f067aa0ba902b7",
        "the client's span is the proxy span's parent"
    );
    assert_eq!(
        client.parent, server.span_id,
        "the upstream call is a child of the request"
    );
    assert_eq!(
        check.parent, server.span_id,
        "the check continues the request's trace"
    );
    assert!(
        passed_on.contains(&client.span_id),
        "the upstream's parent is the upstream span"
    );
    assert!(check.service.contains("rls"), "{check:?}");
    assert!(
        check.events.iter().any(|e| e == "rules matched"),
        "{check:?}"
    );
    assert!(server.service.contains("tollgate"), "{server:?}");

    // Without a client trace, a request starts its own; without --tracing nothing is made.
    let response = get(proxy.addr, "/", &[("x-key", "k")]);
    assert_eq!(response.status, 200);
}

/// `tollgate serve` on `dir`'s `limits.yaml` with upstream's variables `env`: its exit code and stderr (it must not start).
fn refused_start(dir: &TempDir, flags: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = tollgate(&[
        "serve",
        "--config",
        "limits.yaml",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ]);
    command
        .args(flags)
        .current_dir(&dir.0)
        .envs(env.iter().copied());
    let output = command.output().expect("runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_tracing_settings_stop_the_start_naming_them() {
    let dir = TempDir::new("tracing-env");
    std::fs::write(dir.0.join("limits.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n").expect("written");
    for (flags, env, named) in [
        (
            &[][..],
            &[
                ("TRACING_ENABLED", "true"),
                ("TRACING_EXPORTER_PROTOCOL", "thrift"),
            ][..],
            "TRACING_EXPORTER_PROTOCOL=\"thrift\"",
        ),
        // OTLP/HTTP goes to plain http:// collectors only.
        (
            &[][..],
            &[
                ("TRACING_ENABLED", "true"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
            ][..],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        (
            &["--tracing-sampling-rate", "2"][..],
            &[][..],
            "not between 0 and 1",
        ),
    ] {
        let (code, stderr) = refused_start(&dir, flags, env);
        assert_eq!(code, Some(2), "{env:?} {flags:?}: {stderr}");
        assert!(stderr.contains(named), "{env:?} {flags:?}: {stderr}");
    }
}

/// Sends one check (domain `edge`, `api_key: k`) to the `serve` at `addr`
/// with the trace header `name: value`, and waits for its `ShouldRateLimit`
/// span of trace `trace_id` at `collector`.
fn check_span(
    collector: &Collector,
    runtime: &tokio::runtime::Runtime,
    addr: SocketAddr,
    (name, value): (&'static str, String),
    trace_id: &str,
) -> Received {
    use tollgate_protocol::rls::RlsClient;
    use tollgate_protocol::rls::wire::{Entry, RateLimitDescriptor, RateLimitRequest};

    let mut metadata = http::HeaderMap::new();
    metadata.insert(name, value.parse().expect("a header value"));
    runtime.block_on(async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("a URI")
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("serve accepts connections");
        let request = RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "api_key".to_owned(),
                    value: "k".to_owned(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        };
        RlsClient::new(channel)
            .should_rate_limit_with(request, metadata)
            .await
            .expect("answered");
    });
    wait_for(collector, trace_id, &["ShouldRateLimit"])
        .into_iter()
        .find(|s| s.name == "ShouldRateLimit")
        .expect("seen")
}

/// With `--trace-propagation b3`, a check continues the trace of the caller's `b3` header.
#[test]
fn a_check_continues_the_callers_b3_trace() {
    let (collector, collector_addr, collector_runtime) = start_collector();
    let endpoint = format!("http://{collector_addr}");
    let dir = TempDir::new("tracing-b3");
    let rls = serve_traced(&dir, &endpoint, &["--trace-propagation", "b3"]);
    let trace_id = "80f198ee56343ba864fe8b2a57d3eff7";
    let caller_span = "e457b5a2e4d86bd1";
    let b3 = ("b3", format!("{trace_id}-{caller_span}-1"));
    let check = check_span(&collector, &collector_runtime, rls.addr, b3, trace_id);
    assert_eq!(
        check.parent, caller_span,
        "the caller's B3 span is the parent"
    );
}

/// Upstream's variables alone (`TRACING_ENABLED=true`, its default protocol,
/// http) export the check's spans over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT`.
#[test]
fn upstreams_tracing_variables_export_over_otlp_http() {
    let (collector, collector_addr, collector_runtime) = start_http_collector();
    let dir = TempDir::new("tracing-http");
    let endpoint = format!("http://{collector_addr}");
    let env = [
        ("TRACING_ENABLED", "true"),
        ("TRACING_SERVICE_NAME", "rls-over-http"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
    ];
    let rls = serve_examples(&dir, &[], &env);
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let traceparent = ("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"));
    let check = check_span(
        &collector,
        &collector_runtime,
        rls.addr,
        traceparent,
        trace_id,
    );
    assert_eq!(check.parent, "b7ad6b7169203331");
    assert!(check.service.contains("rls-over-http"), "{check:?}");
}
