//! gRPC fuzzing: generated and mutated protobuf bytes (truncations, bit flips,
//! insertions, huge length prefixes, deep nesting, oversize) and well-formed
//! requests with hostile values, sent as `ShouldRateLimit` messages over raw
//! HTTP/2: the server lives, answers OK, INVALID_ARGUMENT or
//! RESOURCE_EXHAUSTED (never INTERNAL or UNKNOWN), and still enforces the
//! known limit exactly.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use proptest::prelude::*;
use prost::Message;
use tollgate_protocol::rls::wire::{
    self, Entry, RateLimitDescriptor, RateLimitRequest, SHOULD_RATE_LIMIT_PATH, UInt64Value,
};

use super::{KNOWN_LIMIT, Served, runner};

/// gRPC codes a hostile message may get: OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
/// and OUT_OF_RANGE (tonic's answer to a message over the size cap, naming the cap).
const CLEAR_CODES: [u32; 4] = [0, 3, 8, 11];

/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One gRPC answer: the `grpc-status`, its message, and the response message bytes.
struct Answer {
    code: u32,
    message: String,
    body: Bytes,
}

/// Sends `message` as one uncompressed gRPC message to `addr` and reads the answer.
async fn call(addr: &str, message: &[u8]) -> Answer {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let (mut sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    let mut frame = Vec::with_capacity(message.len() + 5);
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(message.len()).expect("< 4 GiB").to_be_bytes());
    frame.extend_from_slice(message);
    let request = hyper::Request::post(format!("http://{addr}{SHOULD_RATE_LIMIT_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(frame)))
        .expect("a request");
    let response = tokio::time::timeout(CALL_TIMEOUT, sender.send_request(request))
        .await
        .expect("an answer in time")
        .expect("an HTTP/2 response");
    let (parts, body) = response.into_parts();
    let collected = tokio::time::timeout(CALL_TIMEOUT, body.collect())
        .await
        .expect("a body in time")
        .expect("a whole body");
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let field = |name: &str| {
        trailers
            .get(name)
            .or_else(|| parts.headers.get(name))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let code = field("grpc-status")
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no grpc-status (HTTP {})", parts.status));
    Answer {
        code,
        message: field("grpc-message").unwrap_or_default(),
        body: collected.to_bytes(),
    }
}

/// The overall code of `known=k` over gRPC.
async fn known_code(addr: &str) -> i32 {
    let request = RateLimitRequest {
        domain: "fuzz".to_owned(),
        descriptors: vec![descriptor(&[("known", "k")])],
        hits_addend: 0,
    };
    let answer = call(addr, &request.encode_to_vec()).await;
    assert_eq!(answer.code, 0, "{}", answer.message);
    let body = answer.body.get(5..).expect("a framed message");
    wire::RateLimitResponse::decode(body)
        .expect("a response message")
        .overall_code
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

/// A valid request for the `open` rule: the seed every mutation starts from.
fn seed() -> Vec<u8> {
    RateLimitRequest {
        domain: "fuzz".to_owned(),
        descriptors: vec![descriptor(&[("open", "a"), ("x", "y")]); 3],
        hits_addend: 1,
    }
    .encode_to_vec()
}

/// A mutation of the seed: truncation, bit flip, insertion, or a huge length prefix.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let seed = seed();
    let len = seed.len();
    prop_oneof![
        (0..len).prop_map({
            let s = seed.clone();
            move |n| s[..n].to_vec()
        }),
        (0..len, 0..8u8).prop_map({
            let s = seed.clone();
            move |(i, bit)| {
                let mut m = s.clone();
                m[i] ^= 1 << bit;
                m
            }
        }),
        (0..len, proptest::collection::vec(any::<u8>(), 1..8)).prop_map({
            let s = seed.clone();
            move |(i, bytes)| {
                let mut m = s.clone();
                m.splice(i..i, bytes);
                m
            }
        }),
        (0..len).prop_map(move |i| {
            // A length prefix of about 2^63 (or a wrong wire type) at `i`.
            let mut m = seed.clone();
            m.splice(
                i..i,
                [0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            );
            m
        }),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

/// Well-formed requests with hostile values: empty and odd keys, huge
/// addends, many descriptors, `limit` overrides of any size.
fn hostile_request() -> impl Strategy<Value = RateLimitRequest> {
    let entry = ("[a-z]{0,3}", "\\PC{0,4}").prop_map(|(key, value)| Entry { key, value });
    let descriptor = (
        proptest::collection::vec(entry, 0..4),
        proptest::option::of(any::<u64>()),
        any::<bool>(),
        proptest::option::of((any::<u32>(), -2..9i32)),
    )
        .prop_map(|(entries, hits, negative, limit)| RateLimitDescriptor {
            entries,
            hits_addend: hits.map(|value| UInt64Value { value }),
            is_negative_hits: negative,
            limit: limit.map(|(requests_per_unit, unit)| wire::RateLimitOverride {
                requests_per_unit,
                unit,
                unit_multiplier: None,
            }),
        });
    (
        prop_oneof!["fuzz", "", "\\PC{0,8}"],
        proptest::collection::vec(descriptor, 0..40),
        any::<u32>(),
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

/// Asserts `answer` carries a clear code.
fn assert_clear(answer: &Answer, what: &str) {
    assert!(
        CLEAR_CODES.contains(&answer.code),
        "{what}: grpc-status {} ({})",
        answer.code,
        answer.message
    );
    if answer.code != 0 {
        assert!(!answer.message.is_empty(), "{what}: the error says why");
    }
}

#[test]
fn hostile_grpc_messages_get_clear_codes_and_change_no_limit() {
    let mut served = Served::start("fuzz-grpc");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let addr = served.grpc.clone();

    // Fixed hostile shapes: deep nesting, a message over the size cap, a huge
    // length prefix with nothing behind it.
    let mut deep = Vec::new();
    for _ in 0..5000 {
        let mut outer = vec![0x12];
        let mut n = deep.len();
        while n >= 0x80 {
            outer.push(u8::try_from(n & 0x7f).expect("7 bits") | 0x80);
            n >>= 7;
        }
        outer.push(u8::try_from(n).expect("7 bits"));
        outer.extend_from_slice(&deep);
        deep = outer;
    }
    let fixed: [(&str, Vec<u8>); 3] = [
        ("deep nesting", deep),
        ("5 MiB", vec![0x0a; 5 << 20]),
        ("huge length", vec![0x12, 0xff, 0xff, 0xff, 0xff, 0x0f]),
    ];
    for (what, bytes) in &fixed {
        let answer = rt.block_on(call(&addr, bytes));
        assert_clear(&answer, what);
        assert_ne!(answer.code, 0, "{what} was accepted");
    }

    runner(64)
        .run(&mutated(), |bytes| {
            let answer = rt.block_on(call(&addr, &bytes));
            assert_clear(&answer, &format!("{bytes:02x?}"));
            Ok(())
        })
        .expect("every mutated message gets a clear code");
    runner(64)
        .run(&hostile_request(), |request| {
            let answer = rt.block_on(call(&addr, &request.encode_to_vec()));
            assert_clear(&answer, &format!("{request:?}"));
            Ok(())
        })
        .expect("every hostile request gets a clear code");

    assert!(served.alive(), "tollgate serve died");
    let codes: Vec<i32> = (0..=KNOWN_LIMIT)
        .map(|_| rt.block_on(known_code(&addr)))
        .collect();
    let mut expected = vec![wire::CODE_OK; KNOWN_LIMIT];
    expected.push(wire::CODE_OVER_LIMIT);
    assert_eq!(codes, expected, "the known limit");
}
