//! The gRPC fuzzer: generated and mutated protobuf bytes and gRPC frames sent to a running RLS over HTTP/2, each answered with a clear status, never INTERNAL or UNKNOWN, and the limit still enforced afterwards.
//!
//! Inputs come from a fixed-seed proptest runner (reproducible, a fixed
//! number of cases): arbitrary bytes; a valid request truncated, bit-flipped,
//! with bytes spliced in or a huge length prefix; messages nested past the
//! decoder's depth; oversize messages; and gRPC frames whose compression
//! flag or length prefix lie. The server is the production service on a
//! manual clock, so the closing check (three per minute, then OVER_LIMIT)
//! cannot race a window boundary.

mod fixed_engine;
mod minute;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use tokio::sync::oneshot;
use tollgate_protocol::rls::{RequestCaps, wire};
use tollgate_server::grpc;
use tollgate_testkit::async_http::{AsyncClient, IO_TIMEOUT};
use tollgate_testkit::fuzz::fixed_seed_runner;
use tollgate_testkit::ports::bind_loopback;

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /fuzz
    rate_limit: {unit: minute, requests_per_unit: 1000}
";

/// Cases per strategy: modest, so the suite stays within its time budget.
const CASES: u32 = 96;

/// The message size cap of the server under test.
const MAX_MESSAGE: usize = 16 * 1024;

/// gRPC status codes a client error must never get.
const INTERNAL: u32 = 13;
const UNKNOWN: u32 = 2;

/// A valid request for `path` = `value`, encoded.
fn valid(value: &str) -> Vec<u8> {
    use tonic_prost::prost::Message as _;
    wire::RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![wire::RateLimitDescriptor {
            entries: vec![wire::Entry {
                key: "path".to_owned(),
                value: value.to_owned(),
            }],
            ..wire::RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
    .encode_to_vec()
}

/// `message` in one gRPC frame: uncompressed, with its true length.
fn frame(message: &[u8]) -> Vec<u8> {
    frame_as(
        0,
        u32::try_from(message.len()).expect("a small message"),
        message,
    )
}

/// A gRPC frame with the given compression flag and length prefix, whatever the message is.
fn frame_as(compressed: u8, length: u32, message: &[u8]) -> Vec<u8> {
    let mut out = vec![compressed];
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The grpc-status and grpc-message of one `ShouldRateLimit` call whose body is `body`, and the decoded response when OK.
async fn call(client: &AsyncClient, addr: &str, body: Vec<u8>) -> (u32, String, Option<Vec<u8>>) {
    let (head, bytes, trailers) = exchange(client, addr, &[], body).await;
    let field = |name: &str| {
        head.get(name)
            .or_else(|| trailers.get(name))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let status: u32 = field("grpc-status")
        .expect("a grpc-status")
        .parse()
        .expect("a numeric grpc-status");
    let message = field("grpc-message").unwrap_or_default();
    let payload = (status == 0 && bytes.len() >= 5).then(|| bytes[5..].to_vec());
    (status, message, payload)
}

/// The overall codes of `calls` valid calls for `/login`, each answered OK.
async fn login_codes(client: &AsyncClient, addr: &str, calls: usize) -> Vec<i32> {
    let mut codes = Vec::new();
    for _ in 0..calls {
        let (status, message, payload) = call(client, addr, frame(&valid("/login"))).await;
        assert_eq!(status, 0, "{message}");
        let response: wire::RateLimitResponse =
            tonic_prost::prost::Message::decode(payload.expect("a response").as_slice())
                .expect("a response");
        codes.push(response.overall_code);
    }
    codes
}

/// Asserts a fuzzed call got a clear answer: OK, or a client-error status with a message.
fn assert_clear(what: &str, input: &[u8], (status, message, _): &(u32, String, Option<Vec<u8>>)) {
    assert!(
        *status != INTERNAL && *status != UNKNOWN,
        "{what} {input:02x?}: status {status} ({message})"
    );
    if *status != 0 {
        assert!(
            !message.is_empty(),
            "{what} {input:02x?}: status {status} without a message"
        );
    }
}

/// Runs `strategy` for [`CASES`] fixed-seed cases, sending each input as `to_body` makes it.
async fn fuzz<S>(
    what: &str,
    client: &AsyncClient,
    addr: &str,
    strategy: S,
    to_body: fn(&[u8]) -> Vec<u8>,
) where
    S: Strategy<Value = Vec<u8>>,
{
    let mut runner = fixed_seed_runner(CASES);
    let handle = tokio::runtime::Handle::current();
    let result = runner.run(&strategy, |input| {
        let answer =
            tokio::task::block_in_place(|| handle.block_on(call(client, addr, to_body(&input))));
        assert_clear(what, &input, &answer);
        Ok(())
    });
    result.unwrap_or_else(|error| panic!("{what}: {error}"));
}

/// A valid request with one mutation: truncated, a bit flipped, bytes spliced in, or a huge length prefix.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let base = valid("/fuzz");
    let len = base.len();
    prop_oneof![
        (0..len).prop_map({
            let base = base.clone();
            move |cut| base[..cut].to_vec()
        }),
        (0..len, 0..8u8).prop_map({
            let base = base.clone();
            move |(at, bit)| {
                let mut out = base.clone();
                out[at] ^= 1 << bit;
                out
            }
        }),
        (0..=len, proptest::collection::vec(any::<u8>(), 1..16)).prop_map({
            let base = base.clone();
            move |(at, bytes)| {
                let mut out = base.clone();
                out.splice(at..at, bytes);
                out
            }
        }),
        (0..len).prop_map(move |at| {
            // A length-delimited field claiming ~2^63 bytes.
            let mut out = base[..at].to_vec();
            out.extend_from_slice(&[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
            out
        }),
    ]
}

/// Every wire type under every field number of the request, with short payloads.
fn wrong_wire_types() -> impl Strategy<Value = Vec<u8>> {
    (
        1u8..16,
        0u8..8,
        proptest::collection::vec(any::<u8>(), 0..12),
    )
        .prop_map(|(field, wire_type, payload)| {
            let mut out = vec![(field << 3) | wire_type];
            out.extend_from_slice(&payload);
            out
        })
}

/// `payload` as a length-delimited field with the tag byte `tag`.
fn length_delimited(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let mut len = payload.len();
    while len >= 0x80 {
        out.push(u8::try_from(len & 0x7f).expect("7 bits") | 0x80);
        len >>= 7;
    }
    out.push(u8::try_from(len).expect("7 bits"));
    out.extend_from_slice(payload);
    out
}

/// A descriptor (field 2) whose entries are nested `depth` messages deep.
fn nested(depth: usize) -> Vec<u8> {
    let mut inner = vec![0x0a, 0x00];
    for _ in 0..depth {
        inner = length_delimited(0x0a, &inner);
    }
    let mut out = vec![0x0a, 0x04, b'e', b'd', b'g', b'e'];
    out.extend_from_slice(&length_delimited(0x12, &inner));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_protobuf_and_frames_get_clear_statuses_and_the_limit_still_holds() {
    let (engine, _clock) = fixed_engine::engine(LIMITS, 0);
    let caps = RequestCaps {
        max_message_bytes: MAX_MESSAGE,
        ..RequestCaps::default()
    };
    let listener = bind_loopback().await;
    let addr = listener.local_addr().expect("an address").to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(grpc::serve_with(
        listener,
        grpc::RateLimitGrpc::new(Arc::clone(&engine)).with_caps(caps),
        async {
            let _ = stopped.await;
        },
    ));
    let client = AsyncClient::h2c();
    fuzz(
        "arbitrary bytes",
        &client,
        &addr,
        proptest::collection::vec(any::<u8>(), 0..256),
        frame,
    )
    .await;
    fuzz("a mutated request", &client, &addr, mutated(), frame).await;
    fuzz(
        "a wrong wire type",
        &client,
        &addr,
        wrong_wire_types(),
        frame,
    )
    .await;
    // The frame lies: compressed without an encoding, or a length prefix
    // longer or shorter than what follows.
    fuzz("a compressed frame", &client, &addr, mutated(), |m| {
        frame_as(1, u32::try_from(m.len()).expect("small"), m)
    })
    .await;
    fuzz("a short frame", &client, &addr, mutated(), |m| {
        frame_as(0, u32::try_from(m.len()).expect("small") + 7, m)
    })
    .await;
    fuzz(
        "a frame with trailing bytes",
        &client,
        &addr,
        mutated(),
        |m| {
            let mut body = frame(m);
            body.extend_from_slice(&[0, 0, 0]);
            body
        },
    )
    .await;
    for (what, body) in [
        ("nesting past the decoder's depth", frame(&nested(200))),
        ("nesting within it", frame(&nested(20))),
        ("an oversize message", frame(&vec![0x0a; 4 * MAX_MESSAGE])),
        (
            "a huge length prefix",
            frame_as(0, u32::MAX, &valid("/fuzz")),
        ),
        ("an empty body", Vec::new()),
        (
            "two messages in one unary call",
            [frame(&valid("/fuzz")), frame(&valid("/fuzz"))].concat(),
        ),
    ] {
        let answer = call(&client, &addr, body.clone()).await;
        assert_clear(what, &body[..body.len().min(32)], &answer);
    }
    // The service still answers and enforces three per minute on /login.
    assert_eq!(
        login_codes(&client, &addr, 4).await,
        [
            wire::CODE_OK,
            wire::CODE_OK,
            wire::CODE_OK,
            wire::CODE_OVER_LIMIT
        ]
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(IO_TIMEOUT, server).await;
}

/// The head, body and trailers of one `ShouldRateLimit` call with `extra` request headers.
async fn exchange(
    client: &AsyncClient,
    addr: &str,
    extra: &[(&str, &str)],
    body: Vec<u8>,
) -> (
    tonic::codegen::http::HeaderMap,
    Bytes,
    tonic::codegen::http::HeaderMap,
) {
    let mut request = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{}", wire::SHOULD_RATE_LIMIT_PATH))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = client
        .start(
            request
                .body(Full::new(Bytes::from(body)))
                .expect("a request"),
        )
        .await;
    assert_eq!(response.status(), 200, "gRPC answers over HTTP 200");
    let head = response.headers().clone();
    let collected = tokio::time::timeout(IO_TIMEOUT, response.into_body().collect())
        .await
        .expect("the body in time")
        .expect("a body");
    let trailers = collected.trailers().cloned().unwrap_or_default();
    (head, collected.to_bytes(), trailers)
}

#[tokio::test]
async fn an_answer_is_one_exact_frame_and_a_compressed_request_is_refused_by_name() {
    let (engine, _clock) = fixed_engine::engine(LIMITS, 0);
    let listener = bind_loopback().await;
    let addr = listener.local_addr().expect("an address").to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(grpc::serve_with(
        listener,
        grpc::RateLimitGrpc::new(Arc::clone(&engine)),
        async {
            let _ = stopped.await;
        },
    ));
    let client = AsyncClient::h2c();

    // An answer: content-type gRPC, one uncompressed frame whose prefix is
    // the message's exact length, then grpc-status 0 alone in the trailers.
    let (head, body, trailers) = exchange(&client, &addr, &[], frame(&valid("/login"))).await;
    assert_eq!(head["content-type"], "application/grpc");
    assert!(head.get("grpc-status").is_none(), "{head:?}");
    assert!(head.get("content-length").is_none(), "{head:?}");
    assert_eq!(body[0], 0, "not compressed");
    let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(length, body.len() - 5, "{body:02x?}");
    let response: wire::RateLimitResponse =
        tonic_prost::prost::Message::decode(&body[5..]).expect("a response");
    assert_eq!(response.overall_code, wire::CODE_OK);
    assert_eq!(trailers.len(), 1, "{trailers:?}");
    assert_eq!(trailers["grpc-status"], "0");

    // `identity` is no compression; any other encoding is refused, naming it,
    // with what the server accepts, and spends nothing.
    let mut answers = Vec::new();
    for encoding in ["identity", "gzip"] {
        let extra = [("grpc-encoding", encoding)];
        answers.push(exchange(&client, &addr, &extra, frame(&valid("/login"))).await);
    }
    let (_, _, trailers) = &answers[0];
    assert_eq!(trailers["grpc-status"], "0");
    let (head, _, _) = &answers[1];
    assert_eq!(head["grpc-status"], "12", "UNIMPLEMENTED: {head:?}");
    assert!(
        head["grpc-message"]
            .to_str()
            .expect("ascii")
            .contains("gzip"),
        "{head:?}"
    );
    assert_eq!(head["grpc-accept-encoding"], "identity");
    // The refused call spent nothing: the third of three per minute is still OK.
    assert_eq!(
        login_codes(&client, &addr, 2).await,
        [wire::CODE_OK, wire::CODE_OVER_LIMIT]
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(IO_TIMEOUT, server).await;
}
