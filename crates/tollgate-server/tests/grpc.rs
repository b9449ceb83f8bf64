//! The gRPC service answers Envoy's `ShouldRateLimit` and the health check over a real loopback connection.

mod fixed_engine;
mod minute;

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3 as rls;
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value, UInt64Value};
use rls::rate_limit_response::rate_limit::Unit as PbUnit;
use rls::rate_limit_response::{Code as PbCode, RateLimit};
use rls::rate_limit_service_client::RateLimitServiceClient;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_core::ManualClock;
use tollgate_protocol::rls::{
    HeaderOptions, Jitter, RequestCaps, ResponseHeaders, RlsClient, convert, wire,
};
use tollgate_server::{Engine, grpc};
use tollgate_testkit::ports::bind_loopback;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

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
  - key: client
    value: internal
    rate_limit:
      unlimited: true
  - key: report
    rate_limit:
      unit: minute
      unit_multiplier: 15
      requests_per_unit: 2
";

/// A running server on 127.0.0.1 that stops (and is awaited) when dropped or shut down.
struct TestServer {
    addr: String,
    clock: ManualClock,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server on an ephemeral port with the clock `millis_into_minute` after a minute boundary.
    async fn start(millis_into_minute: u64) -> TestServer {
        TestServer::start_with(millis_into_minute, None).await
    }

    /// [`TestServer::start`] with response headers rendered by `headers` (none when `None`).
    async fn start_with(millis_into_minute: u64, headers: Option<ResponseHeaders>) -> TestServer {
        TestServer::start_service(millis_into_minute, |engine| match headers {
            None => grpc::RateLimitGrpc::new(engine),
            Some(headers) => grpc::RateLimitGrpc::with_headers(engine, Arc::new(headers)),
        })
        .await
    }

    /// [`TestServer::start`] serving the service `build` makes of the engine.
    async fn start_service(
        millis_into_minute: u64,
        build: impl FnOnce(Arc<Engine<ManualClock>>) -> grpc::RateLimitGrpc<ManualClock>,
    ) -> TestServer {
        let (engine, clock) = fixed_engine::engine(LIMITS, millis_into_minute);
        let listener = bind_loopback().await;
        let addr = format!("http://{}", listener.local_addr().expect("local address"));
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let task = tokio::spawn(grpc::serve_with(listener, build(engine), shutdown));
        TestServer {
            addr,
            clock,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A channel to the server, retrying the connection within a bounded time budget.
    async fn channel(&self) -> Channel {
        let endpoint = Channel::from_shared(self.addr.clone()).expect("a valid address");
        let budget = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match endpoint.connect().await {
                    Ok(channel) => return channel,
                    Err(_) => tokio::task::yield_now().await,
                }
            }
        });
        budget.await.expect("the server accepts within 10 s")
    }

    async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel().await)
    }

    /// Stops the server and checks it shut down cleanly.
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the server stops within 10 s");
            result
                .expect("the server task")
                .expect("the server ends cleanly");
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

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> rls::RateLimitRequest {
    rls::RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    req: rls::RateLimitRequest,
) -> rls::RateLimitResponse {
    client
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit succeeds")
        .into_inner()
}

fn secs(seconds: i64) -> Option<PbDuration> {
    Some(PbDuration { seconds, nanos: 0 })
}

fn login_limit() -> Option<RateLimit> {
    Some(RateLimit {
        name: "login".to_owned(),
        requests_per_unit: 3,
        unit: PbUnit::Minute as i32,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_per_minute_answers_ok_ok_ok_over_limit_with_whole_second_resets() {
    // 10.25 s into the minute: the window resets in 49.75 s, reported as 50.
    let server = TestServer::start(10_250).await;
    let mut client = server.client().await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let response = call(
            &mut client,
            request("edge", vec![descriptor(&[("path", "/login")])]),
        )
        .await;
        assert_eq!(response.statuses.len(), 1);
        let status = &response.statuses[0];
        assert_eq!(status.current_limit, login_limit());
        assert_eq!(status.duration_until_reset, secs(50));
        assert_eq!(status.code, response.overall_code);
        seen.push((response.overall_code, status.limit_remaining));
    }
    let ok = PbCode::Ok as i32;
    let over = PbCode::OverLimit as i32;
    assert_eq!(seen, vec![(ok, 2), (ok, 1), (ok, 0), (over, 0)]);

    // A new window starts at the next minute boundary.
    server.clock.advance(Duration::from_millis(49_750));
    let response = call(
        &mut client,
        request("edge", vec![descriptor(&[("path", "/login")])]),
    )
    .await;
    assert_eq!(response.overall_code, ok);
    assert_eq!(response.statuses[0].limit_remaining, 2);
    assert_eq!(response.statuses[0].duration_until_reset, secs(60));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_descriptors_keep_their_order_and_unmatched_ones_have_no_limit() {
    let server = TestServer::start(0).await;
    let mut client = server.client().await;
    let response = call(
        &mut client,
        request(
            "edge",
            vec![
                descriptor(&[("remote_address", "10.0.0.1")]),
                descriptor(&[("nothing", "matches")]),
                descriptor(&[("client", "internal")]),
                descriptor(&[("path", "/login")]),
            ],
        ),
    )
    .await;
    let ok = PbCode::Ok as i32;
    assert_eq!(response.overall_code, ok);
    let statuses = &response.statuses;
    assert_eq!(statuses.len(), 4);

    assert_eq!(statuses[0].code, ok);
    assert_eq!(
        statuses[0].current_limit,
        Some(RateLimit {
            name: String::new(),
            requests_per_unit: 100,
            unit: PbUnit::Hour as i32,
        })
    );
    assert_eq!(statuses[0].limit_remaining, 99);

    assert_eq!(statuses[1].code, ok);
    assert_eq!(statuses[1].current_limit, None);
    assert_eq!(statuses[1].limit_remaining, 0);
    assert_eq!(statuses[1].duration_until_reset, None);

    assert_eq!(statuses[2].code, ok);
    assert_eq!(statuses[2].current_limit, None);
    assert_eq!(statuses[2].limit_remaining, u32::MAX);

    assert_eq!(statuses[3].current_limit, login_limit());
    assert_eq!(statuses[3].limit_remaining, 2);
    assert_eq!(statuses[3].duration_until_reset, secs(60));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addends_overrides_and_refunds_reach_the_engine() {
    let server = TestServer::start(0).await;
    let mut client = server.client().await;
    let login = || descriptor(&[("path", "/login")]);

    // Request-level hits_addend 2 consumes two of three.
    let mut req = request("edge", vec![login()]);
    req.hits_addend = 2;
    let response = call(&mut client, req).await;
    assert_eq!(response.statuses[0].limit_remaining, 1);

    // Descriptor-level hits_addend 0 only checks.
    let mut check_only = login();
    check_only.hits_addend = Some(UInt64Value { value: 0 });
    let response = call(&mut client, request("edge", vec![check_only])).await;
    assert_eq!(response.statuses[0].limit_remaining, 1);

    // is_negative_hits gives one back.
    let mut refund = login();
    refund.hits_addend = Some(UInt64Value { value: 1 });
    refund.is_negative_hits = true;
    let response = call(&mut client, request("edge", vec![refund])).await;
    assert_eq!(response.overall_code, PbCode::Ok as i32);
    assert_eq!(response.statuses[0].limit_remaining, 2);

    // A limit override replaces the rule: 1 per second.
    let mut overridden = descriptor(&[("path", "/login")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: envoy_types::pb::envoy::r#type::v3::RateLimitUnit::Second as i32,
    });
    let first = call(&mut client, request("edge", vec![overridden.clone()])).await;
    let second = call(&mut client, request("edge", vec![overridden])).await;
    let expected_limit = Some(RateLimit {
        name: String::new(),
        requests_per_unit: 1,
        unit: PbUnit::Second as i32,
    });
    assert_eq!(first.statuses[0].current_limit, expected_limit);
    assert_eq!(first.overall_code, PbCode::Ok as i32);
    assert_eq!(second.overall_code, PbCode::OverLimit as i32);
    assert_eq!(second.statuses[0].duration_until_reset, secs(1));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_invalid_argument_with_a_message() {
    let server = TestServer::start(0).await;
    let mut client = server.client().await;
    let cases = [
        (
            request("", vec![descriptor(&[("path", "/login")])]),
            "rate limit domain must not be empty",
        ),
        (
            request("edge", vec![]),
            "rate limit descriptor list must not be empty",
        ),
        (
            request("edge", vec![descriptor(&[])]),
            "descriptors[0].entries must not be empty",
        ),
    ];
    for (req, message) in cases {
        let status = client
            .should_rate_limit(req)
            .await
            .expect_err("a malformed request is rejected");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), message);
    }
    let mut unknown_unit = descriptor(&[("path", "/login")]);
    unknown_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 0,
    });
    let status = client
        .should_rate_limit(request("edge", vec![unknown_unit]))
        .await
        .expect_err("an UNKNOWN override unit is rejected");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("descriptors[0].limit.unit"),
        "{}",
        status.message()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_serving_for_the_server_and_upstreams_name() {
    let server = TestServer::start(0).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        let response = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("health check succeeds")
            .into_inner();
        assert_eq!(
            response.status,
            ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    server.shutdown().await;
}

fn wire_descriptor(entries: &[(&str, &str)]) -> wire::RateLimitDescriptor {
    wire::RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| wire::Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..wire::RateLimitDescriptor::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unit_multipliers_travel_both_ways() {
    // 10 s into a quarter hour (MINUTE_START is 13 minutes into one).
    let server = TestServer::start(2 * 60_000 + 10_000).await;
    let channel = server.channel().await;

    // A rule with `unit_multiplier: 15` reports it.
    let request = wire::RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![wire_descriptor(&[("report", "weekly")])],
        hits_addend: 0,
    };
    let response = RlsClient::new(channel.clone())
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit succeeds");
    let status = &response.statuses[0];
    assert_eq!(
        status.current_limit,
        Some(wire::RateLimit {
            name: String::new(),
            requests_per_unit: 2,
            unit: wire::UNIT_MINUTE,
            unit_multiplier: Some(UInt32Value { value: 15 }),
        })
    );
    assert_eq!(status.limit_remaining, 1);
    assert_eq!(status.duration_until_reset, secs(15 * 60 - 10));

    // An override of 1 per 2 hours: the window is two hours long.
    let mut overridden = wire_descriptor(&[("anything", "x")]);
    overridden.limit = Some(wire::RateLimitOverride {
        requests_per_unit: 1,
        unit: wire::UNIT_HOUR,
        unit_multiplier: Some(UInt32Value { value: 2 }),
    });
    let request = wire::RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![overridden],
        hits_addend: 0,
    };
    let first = RlsClient::new(channel.clone())
        .should_rate_limit(request.clone())
        .await
        .expect("ShouldRateLimit succeeds");
    let second = RlsClient::new(channel)
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit succeeds");
    assert_eq!(first.overall_code, wire::CODE_OK);
    assert_eq!(second.overall_code, wire::CODE_OVER_LIMIT);
    let limit = second.statuses[0].current_limit.clone().expect("a limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (1, wire::UNIT_HOUR));
    assert_eq!(limit.unit_multiplier, Some(UInt32Value { value: 2 }));
    let reset = second.statuses[0]
        .duration_until_reset
        .expect("a reset")
        .seconds;
    assert!(reset > 3600 && reset <= 7200, "{reset}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_method_of_the_service_is_unimplemented() {
    let server = TestServer::start(0).await;
    let mut client = tonic::client::Grpc::new(server.channel().await);
    client.ready().await.expect("the channel is ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldNotExist",
    );
    let codec =
        tonic_prost::ProstCodec::<wire::RateLimitRequest, wire::RateLimitResponse>::default();
    let request = wire::RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![wire_descriptor(&[("path", "/login")])],
        hits_addend: 0,
    };
    let status = client
        .unary(tonic::Request::new(request), path, codec)
        .await
        .expect_err("no such method");
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    server.shutdown().await;
}

#[test]
fn resets_round_up_to_whole_seconds() {
    let up = |d: Duration| convert::whole_seconds_up(d);
    assert_eq!(
        up(Duration::ZERO),
        PbDuration {
            seconds: 0,
            nanos: 0
        }
    );
    assert_eq!(
        up(Duration::from_nanos(1)),
        PbDuration {
            seconds: 1,
            nanos: 0
        }
    );
    assert_eq!(
        up(Duration::from_secs(59)),
        PbDuration {
            seconds: 59,
            nanos: 0
        }
    );
    assert_eq!(
        up(Duration::from_millis(59_001)),
        PbDuration {
            seconds: 60,
            nanos: 0
        }
    );
    assert_eq!(up(Duration::MAX).seconds, i64::MAX);
}

/// The headers of a wire response, as `(name, value)` pairs.
fn header_pairs(response: &wire::RateLimitResponse) -> Vec<(String, String)> {
    response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn login_request() -> wire::RateLimitRequest {
    wire::RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![wire_descriptor(&[("path", "/login")])],
        hits_addend: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_headers_and_no_body_by_default() {
    let server = TestServer::start(10_250).await;
    let channel = server.channel().await;
    for _ in 0..4 {
        let response = RlsClient::new(channel.clone())
            .should_rate_limit(login_request())
            .await
            .expect("ShouldRateLimit succeeds");
        assert!(response.response_headers_to_add.is_empty());
        assert!(response.raw_body.is_empty());
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_and_body_for_three_per_minute_when_switched_on() {
    // 10.25 s into the minute: the window resets in 49.75 s, reported as 50.
    let options = HeaderOptions {
        limit_headers: true,
        ietf_headers: true,
        retry_after: true,
        raw_body: true,
        ..HeaderOptions::default()
    };
    let server = TestServer::start_with(
        10_250,
        Some(ResponseHeaders::new(options, Jitter::seeded(3))),
    )
    .await;
    let channel = server.channel().await;
    for remaining in ["2", "1", "0"] {
        let response = RlsClient::new(channel.clone())
            .should_rate_limit(login_request())
            .await
            .expect("ShouldRateLimit succeeds");
        assert_eq!(response.overall_code, wire::CODE_OK);
        assert_eq!(
            header_pairs(&response),
            owned(&[
                ("RateLimit-Limit", "3"),
                ("RateLimit-Remaining", remaining),
                ("RateLimit-Reset", "50"),
                ("RateLimit-Policy", "\"login\";q=3;w=60"),
                ("RateLimit", &format!("\"login\";r={remaining};t=50")),
            ])
        );
        assert!(response.raw_body.is_empty(), "no body on OK");
    }
    let response = RlsClient::new(channel.clone())
        .should_rate_limit(login_request())
        .await
        .expect("ShouldRateLimit succeeds");
    assert_eq!(response.overall_code, wire::CODE_OVER_LIMIT);
    assert_eq!(
        header_pairs(&response),
        owned(&[
            ("RateLimit-Limit", "3"),
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "50"),
            ("RateLimit-Policy", "\"login\";q=3;w=60"),
            ("RateLimit", "\"login\";r=0;t=50"),
            ("Retry-After", "50"),
        ])
    );
    assert_eq!(
        String::from_utf8(response.raw_body).expect("UTF-8"),
        "{\"code\":\"OVER_LIMIT\",\"retry_after\":50,\"statuses\":[{\"code\":\"OVER_LIMIT\",\
         \"limit\":3,\"name\":\"login\",\"remaining\":0,\"reset\":50,\"retry_after\":50,\"window\":60}]}"
    );

    // Two descriptors: the unnamed hourly limit is named after its entries,
    // and the OVER_LIMIT login status is the one the trio and RateLimit describe.
    let request = wire::RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![
            wire_descriptor(&[("remote_address", "10.0.0.1")]),
            wire_descriptor(&[("path", "/login")]),
        ],
        hits_addend: 0,
    };
    let response = RlsClient::new(channel)
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit succeeds");
    assert_eq!(response.overall_code, wire::CODE_OVER_LIMIT);
    let headers = header_pairs(&response);
    assert_eq!(
        headers.get(3),
        Some(&(
            "RateLimit-Policy".to_owned(),
            "\"remote_address=10.0.0.1\";q=100;w=3600, \"login\";q=3;w=60".to_owned()
        ))
    );
    assert_eq!(
        headers.get(4),
        Some(&("RateLimit".to_owned(), "\"login\";r=0;t=50".to_owned()))
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_jitter_only_adds_and_stays_within_its_bound() {
    let options = HeaderOptions {
        retry_after: true,
        retry_after_jitter: Duration::from_secs(5),
        ..HeaderOptions::default()
    };
    let server = TestServer::start_with(
        10_250,
        Some(ResponseHeaders::new(options, Jitter::seeded(11))),
    )
    .await;
    let channel = server.channel().await;
    let mut seen = Vec::new();
    for _ in 0..40 {
        let response = RlsClient::new(channel.clone())
            .should_rate_limit(login_request())
            .await
            .expect("ShouldRateLimit succeeds");
        let headers = header_pairs(&response);
        if response.overall_code == wire::CODE_OK {
            assert!(headers.is_empty(), "{headers:?}");
            continue;
        }
        assert_eq!(headers.len(), 1, "{headers:?}");
        let (name, value) = &headers[0];
        assert_eq!(name, "Retry-After");
        let seconds: u64 = value.parse().expect("whole seconds");
        // The wait is 49.75 s: never earlier than 50, below 49.75 + 5 + 1.
        assert!((50..=55).contains(&seconds), "{seconds}");
        seen.push(seconds);
    }
    assert_eq!(seen.len(), 37);
    seen.sort_unstable();
    seen.dedup();
    assert!(seen.len() > 1, "the jitter spreads the answers: {seen:?}");
    server.shutdown().await;
}

/// A codec that sends its message as raw bytes and reads the answer with prost.
#[derive(Default)]
struct RawBytesCodec;

/// The encoder of [`RawBytesCodec`]: the bytes as they are.
struct RawBytesEncoder;

impl tonic::codec::Encoder for RawBytesEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use tonic_prost::prost::bytes::BufMut;
        buf.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Codec for RawBytesCodec {
    type Encode = Vec<u8>;
    type Decode = wire::RateLimitResponse;
    type Encoder = RawBytesEncoder;
    type Decoder = tonic_prost::ProstDecoder<wire::RateLimitResponse>;

    fn encoder(&mut self) -> Self::Encoder {
        RawBytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

/// One `ShouldRateLimit` call whose message is `bytes`.
async fn call_raw(
    channel: Channel,
    bytes: Vec<u8>,
) -> Result<wire::RateLimitResponse, tonic::Status> {
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.expect("the channel is ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(wire::SHOULD_RATE_LIMIT_PATH);
    client
        .unary(tonic::Request::new(bytes), path, RawBytesCodec)
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_a_request_are_invalid_argument_with_the_reason() {
    let server = TestServer::start(0).await;
    let channel = server.channel().await;
    for bytes in [
        // domain (field 1) of length 5 with one byte.
        vec![0x0a, 0x05, b'e'],
        // A descriptor (field 2) whose entry (field 1) claims 100 bytes.
        vec![0x12, 0x03, 0x0a, 0x64, 0x00],
        // A varint that never ends.
        vec![0x18, 0xff, 0xff, 0xff],
        // Field number 0.
        vec![0x00, 0x01],
        // An end-group with no start.
        vec![0x0c],
    ] {
        let status = call_raw(channel.clone(), bytes.clone())
            .await
            .expect_err("malformed bytes are refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{bytes:02x?}: {status:?}"
        );
        assert!(
            status
                .message()
                .starts_with("malformed RateLimitRequest protobuf: "),
            "{bytes:02x?}: {}",
            status.message()
        );
    }
    // The raw path answers a well-formed request as usual.
    let login = prost_bytes(&request("edge", vec![descriptor(&[("path", "/login")])]));
    let answer = call_raw(channel, login).await.expect("a valid request");
    assert_eq!(answer.overall_code, wire::CODE_OK);
    server.shutdown().await;
}

/// The protobuf bytes of a message.
fn prost_bytes(message: &impl tonic_prost::prost::Message) -> Vec<u8> {
    message.encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_a_cap_are_refused_naming_the_cap_and_spend_nothing() {
    let caps = RequestCaps {
        max_descriptors: 4,
        max_descriptor_entries: 3,
        max_message_bytes: 4096,
    };
    let server =
        TestServer::start_service(0, |engine| grpc::RateLimitGrpc::new(engine).with_caps(caps))
            .await;
    let mut client = server.client().await;
    let login = || descriptor(&[("path", "/login")]);
    let wide = descriptor(&[("path", "/login"), ("a", "1"), ("b", "2"), ("c", "3")]);
    for (req, cap) in [
        (request("edge", vec![login(); 5]), "max-descriptors"),
        (
            request("edge", vec![login(), wide]),
            "max-descriptor-entries",
        ),
    ] {
        let status = client.should_rate_limit(req).await.expect_err("over a cap");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(cap), "{}", status.message());
    }
    let status = client
        .should_rate_limit(request(&"e".repeat(5000), vec![login()]))
        .await
        .expect_err("over the message size");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("4096"), "{}", status.message());
    // At the caps it is answered, and nothing was spent before: each of the
    // four descriptors takes one of the three.
    let answer = call(&mut client, request("edge", vec![login(); 4])).await;
    assert_eq!(answer.overall_code, PbCode::OverLimit as i32);
    let remaining: Vec<u32> = answer.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(remaining, [2, 1, 0, 0]);
    server.shutdown().await;
}
