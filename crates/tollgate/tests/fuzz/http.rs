//! HTTP fuzzing of serve's `/json` and `/v1/check`, raw over TCP: malformed
//! request lines and headers, smuggling shapes, bad chunking, pipelined
//! garbage. Each gets a 4xx (or a closed connection), never a 5xx, and the
//! known limit still holds afterwards.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::{KNOWN_LIMIT, Served};

/// How long a raw exchange waits for the server.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes `raw` and reads until the server closes or goes quiet; the status codes it answered.
pub(super) fn statuses(addr: &str, raw: &[u8]) -> Vec<u16> {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("a timeout");
    stream
        .set_write_timeout(Some(READ_TIMEOUT))
        .expect("a timeout");
    // The server may close before reading everything: a failed write is an answer too.
    let _ = stream.write_all(raw);
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply)
        .split("HTTP/1.1 ")
        .skip(1)
        .filter_map(|rest| rest.get(..3)?.parse().ok())
        .collect()
}

/// A request to `path` with `headers` (each ending in CRLF) and `body`.
fn post(path: &str, headers: &str, body: &str) -> Vec<u8> {
    format!("POST {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n{headers}\r\n{body}")
        .into_bytes()
}

const OPEN: &str = r#"{"domain":"fuzz","descriptors":[{"entries":[{"key":"open","value":"a"}]}]}"#;

/// Hostile requests, each with what its first answer must be: `4` a 4xx, `0` a 4xx or nothing.
pub(super) fn cases() -> Vec<(&'static str, Vec<u8>, u16)> {
    let json = "content-type: application/json\r\n";
    let mut cases = vec![
        (
            "garbage line",
            b"\x00\x01\x02 / HTTP/1.1\r\n\r\n".to_vec(),
            0,
        ),
        ("no version", b"POST /json\r\n\r\n".to_vec(), 0),
        (
            "bad version",
            b"POST /json HTTP/9.9\r\nhost: t\r\n\r\n".to_vec(),
            0,
        ),
        (
            "huge line",
            format!("GET /{} HTTP/1.1\r\nhost: t\r\n\r\n", "a".repeat(200_000)).into_bytes(),
            0,
        ),
        (
            "huge header",
            post(
                "/json",
                &format!("{json}x-big: {}\r\n", "b".repeat(200_000)),
                "",
            ),
            0,
        ),
        (
            "obs-fold",
            post(
                "/json",
                &format!("{json}x-fold: a\r\n b\r\ncontent-length: 2\r\n"),
                "{}",
            ),
            0,
        ),
        (
            "NUL in header",
            post(
                "/json",
                &format!("{json}x-nul: a\0b\r\ncontent-length: 2\r\n"),
                "{}",
            ),
            0,
        ),
        (
            "duplicate CL",
            post(
                "/json",
                &format!("{json}content-length: 2\r\ncontent-length: 3\r\n"),
                "{}x",
            ),
            0,
        ),
        (
            "CL and TE",
            post(
                "/json",
                &format!("{json}content-length: 4\r\ntransfer-encoding: chunked\r\n"),
                "0\r\n\r\n",
            ),
            0,
        ),
        (
            "bad chunk size",
            post(
                "/json",
                &format!("{json}transfer-encoding: chunked\r\n"),
                "zz\r\n{}\r\n0\r\n\r\n",
            ),
            0,
        ),
        (
            "huge chunk size",
            post(
                "/json",
                &format!("{json}transfer-encoding: chunked\r\n"),
                "ffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
            ),
            0,
        ),
        (
            "text/plain",
            post(
                "/json",
                &format!(
                    "content-type: text/plain\r\ncontent-length: {}\r\n",
                    OPEN.len()
                ),
                OPEN,
            ),
            4,
        ),
        (
            "bad json",
            post("/json", &format!("{json}content-length: 4\r\n"), "{\"do"),
            4,
        ),
        (
            "v1 bad json",
            post("/v1/check", &format!("{json}content-length: 3\r\n"), "[1]"),
            4,
        ),
        (
            "CL beyond body",
            post(
                "/json",
                &format!("{json}content-length: 99999999999\r\n"),
                "{}",
            ),
            0,
        ),
        (
            "negative CL",
            post("/json", &format!("{json}content-length: -1\r\n"), "{}"),
            0,
        ),
    ];
    // Pipelined: a good request, then garbage; the good one answers, the garbage is refused or dropped.
    let mut pipelined = format!(
        "POST /json HTTP/1.1\r\nhost: t\r\n{json}content-length: {}\r\n\r\n{OPEN}",
        OPEN.len()
    )
    .into_bytes();
    pipelined.extend_from_slice(b"\x7fGARBAGE\r\n\r\n");
    cases.push(("pipelined garbage", pipelined, 2));
    cases
}

#[test]
fn hostile_http_requests_get_4xx_and_change_no_limit() {
    let mut served = Served::start("fuzz-http");
    assert_eq!(served.known_json(1), [200]);
    for (what, raw, first) in cases() {
        let got = statuses(&served.http, &raw);
        assert!(got.iter().all(|s| *s < 500), "{what}: {got:?}");
        match (first, got.first()) {
            (4, Some(s)) => assert!((400..500).contains(s), "{what}: {got:?}"),
            (4, None) => panic!("{what}: no answer"),
            (2, _) => assert_eq!(got.first(), Some(&200), "{what}: {got:?}"),
            (_, Some(s)) => assert!((400..500).contains(s), "{what}: {got:?}"),
            (_, None) => {}
        }
        assert!(served.alive(), "{what}: tollgate serve died");
    }
    served.assert_known_limit_holds(KNOWN_LIMIT - 1);
}
