//! HTTP fuzzing of `tollgate proxy`, raw over TCP: the same hostile requests
//! as serve's ([`super::http`]). A request the proxy cannot read as HTTP gets
//! a 4xx or a closed connection, never a 5xx, and never reaches the upstream;
//! a well-formed one is forwarded whole, and the proxy still forwards
//! afterwards.

use std::sync::atomic::Ordering;

use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::LoggedChild;
use tollgate_testkit::upstream::Upstream;

use super::http::{cases, statuses};

#[test]
fn hostile_requests_through_the_proxy_never_reach_the_upstream_half_formed() {
    let dir = TempDir::new("fuzz-proxy");
    let upstream = Upstream::spawn();
    let upstream_addr = upstream.addr.to_string();
    let proxy = LoggedChild::proxy(
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream_addr,
            "--log-level",
            "warn",
        ],
        dir.0.join("proxy.log"),
        false,
    );
    let addr = proxy.addr.to_string();
    let served = || upstream.served.load(Ordering::SeqCst);
    for (what, raw, first) in cases() {
        let before = served();
        let got = statuses(&addr, &raw);
        assert!(got.iter().all(|s| *s < 500), "{what}: {got:?}");
        let forwarded = served() - before;
        match first {
            // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length. The
            // proxy's HTTP/1 server drops the Content-Length and reads the
            // chunked body; the upstream gets that one request, framed anew,
            // never a second one hidden in the body.
            0 if what == "CL and TE" => {
                assert!(forwarded <= 1, "{what}: {forwarded} requests upstream");
            }
            // Not HTTP the proxy can read: refused or dropped, nothing upstream.
            0 => {
                assert!(
                    got.iter().all(|s| (400..500).contains(s)),
                    "{what}: {got:?}"
                );
                assert_eq!(forwarded, 0, "{what}: reached the upstream");
            }
            // Well-formed HTTP (the JSON inside is the service's business): forwarded once.
            4 => assert_eq!((got.as_slice(), forwarded), (&[200][..], 1), "{what}"),
            // A good request then garbage: the good one alone goes through.
            _ => {
                assert_eq!(got.first(), Some(&200), "{what}: {got:?}");
                assert_eq!(forwarded, 1, "{what}: the garbage reached the upstream");
            }
        }
    }
    let before = served();
    let after = statuses(
        &addr,
        b"GET / HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
    );
    assert_eq!(
        (after, served() - before),
        (vec![200], 1),
        "the proxy still forwards"
    );
}
