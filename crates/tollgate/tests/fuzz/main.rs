//! The standing adversarial suite against running processes: raw HTTP
//! requests to `tollgate serve` ([`http`]) and through `tollgate proxy`
//! ([`proxy`]), and mutated limits files reloaded into serve ([`limits`]),
//! each asserting no panic, a clear error, and that the process still
//! answers correctly afterwards (a known limit still enforced exactly). (Hostile gRPC frames are
//! fuzzed in-process by tollgate-server's `adversarial_grpc` test.)
//!
//! Case counts are fixed and the generators seeded (testkit's
//! `fixed_seed_runner`), so a failure reproduces; every wait is bounded.

mod http;
mod limits;
mod proxy;

use std::path::PathBuf;

use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;

/// The known limit every suite checks afterwards: `known=k`, this many per hour
/// in a token bucket, which (unlike an epoch-aligned window) cannot reset
/// while a suite runs: its next token is 20 minutes away.
const KNOWN_LIMIT: usize = 3;

/// The limits file the fuzzed server runs: the known limit, and a rule fuzz
/// cases may hit (`open`, many per hour) without touching the known one.
const LIMITS: &str = "\
domain: fuzz
descriptors:
  - key: known
    value: k
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 1000000}
";

/// The `/json` body that asks for the known limit.
const KNOWN_JSON: &str =
    r#"{"domain":"fuzz","descriptors":[{"entries":[{"key":"known","value":"k"}]}]}"#;

/// A `tollgate serve` on [`LIMITS`] in a scratch directory, in memory.
struct Served {
    dir: TempDir,
    config: PathBuf,
    server: Server,
    http: String,
}

impl Served {
    fn start(name: &str) -> Served {
        let dir = TempDir::new(name);
        let config = dir.limits(LIMITS);
        let server = Server::serve(&config, "memory", &["--log-level", "warn"]);
        let http = server.line_after("http listening on ");
        Served {
            dir,
            config,
            server,
            http,
        }
    }

    /// Whether the child is still running.
    fn alive(&mut self) -> bool {
        self.server
            .child
            .try_wait()
            .expect("the child can be polled")
            .is_none()
    }

    /// `/json` statuses of `n` requests for the known limit.
    fn known_json(&self, n: usize) -> Vec<u16> {
        (0..n)
            .map(|_| {
                tollgate_testkit::http::exchange(
                    &self.http,
                    "POST",
                    "/json",
                    &[("content-type", "application/json")],
                    KNOWN_JSON,
                )
                .status
            })
            .collect()
    }

    /// Asserts the server lives and the known limit admits exactly `left` more, then denies.
    fn assert_known_limit_holds(&mut self, left: usize) {
        assert!(self.alive(), "tollgate serve died");
        let mut expected = vec![200; left];
        expected.push(429);
        assert_eq!(self.known_json(left + 1), expected, "the known limit");
    }
}
