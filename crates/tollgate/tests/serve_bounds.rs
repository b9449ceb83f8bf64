//! `tollgate serve`'s memory and connection bounds: each is a flag or `TOLLGATE_*` variable that the stores and listeners honour, and a gauge (current and limit) on `/metrics`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tollgate_testkit::budget::poll_until;
use tollgate_testkit::http::{Connection, Response, get, metric_value};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server};
use tollgate_testkit::window::{self, HOUR};

const BUDGET: Duration = Duration::from_secs(10);

const LIMITS: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: login
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_log}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// Starts `serve` on `LIMITS` with `flags` and `env`; the HTTP address.
fn start(dir: &TempDir, flags: &[&str], env: &[(&str, &str)]) -> (Server, SocketAddr) {
    start_on(dir, LIMITS, flags, env)
}

/// Starts `serve` on `limits` with `flags` and `env`; the HTTP address.
fn start_on(
    dir: &TempDir,
    limits: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (Server, SocketAddr) {
    let config = dir.limits(limits);
    let config = config.to_str().expect("a UTF-8 path");
    let mut args = vec!["serve", "--config", config, "--log-level", "warn"];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    args.extend_from_slice(flags);
    let server = Server::spawn_with_env(&args, env);
    let _grpc = server.address();
    let http = server
        .line_after("http listening on ")
        .parse()
        .expect("an address");
    (server, http)
}

fn post(http: SocketAddr, path: &str, body: &str) -> Response {
    Connection::open(http)
        .request("POST", path, &[("content-type", "application/json")], body)
        .unwrap_or_else(|error| panic!("POST {path}: {error}"))
}

fn check(http: SocketAddr, key: &str, value: &str) -> Response {
    post(
        http,
        "/v1/check",
        &format!(r#"{{"domain":"edge","descriptors":[{{"{key}":"{value}"}}]}}"#),
    )
}

#[test]
fn store_bounds_from_variables_are_honoured_and_reported_as_gauges() {
    let dir = TempDir::new("serve-bounds-memory");
    let (_server, http) = start(
        &dir,
        &[],
        &[
            ("TOLLGATE_MAX_KEYS", "64"),
            ("TOLLGATE_MAX_OVERRIDE_KEYS", "32"),
            ("TOLLGATE_MAX_OVERRIDE_STORES", "1"),
            ("TOLLGATE_MAX_LOG_ENTRIES", "48"),
            ("TOLLGATE_MAX_CONNECTIONS", "50"),
        ],
    );
    // The override counts below are per hour: one hour's window for all of them.
    window::wait_clear_of_window_end(HOUR, Duration::from_secs(60));
    // Keys per store: 300 distinct users through a store of 64 keys.
    for user in 0..300 {
        assert_eq!(check(http, "user", &user.to_string()).status, 200);
    }
    assert!(metric_value(http, r#"ratelimit_memory_keys{kind="rule"}"#) <= 3 * 64);
    assert_eq!(
        metric_value(http, r#"ratelimit_memory_stores{kind="rule"}"#),
        3
    );
    assert_eq!(
        metric_value(http, r#"ratelimit_memory_keys_limit{kind="rule"}"#),
        3 * 64
    );
    assert!(metric_value(http, r#"ratelimit_memory_bytes{kind="rule"}"#) > 0);
    // Sliding-log entries: one login sending 200 requests, each at its own instant.
    for _ in 0..200 {
        assert_eq!(check(http, "login", "alice").status, 200);
    }
    let entries = metric_value(http, r#"ratelimit_memory_log_entries{kind="rule"}"#);
    assert!((1..=48).contains(&entries), "{entries} entries");
    assert_eq!(
        metric_value(http, r#"ratelimit_memory_log_entries_limit{kind="rule"}"#),
        48
    );
    // Override stores: one allowed; a second distinct override is denied, the first keeps counting.
    let with_override = |per_hour: u32| {
        post(
            http,
            "/json",
            &format!(
                r#"{{"domain":"edge","descriptors":[{{"entries":[{{"key":"user","value":"o"}}],"limit":{{"requestsPerUnit":{per_hour},"unit":"HOUR"}}}}]}}"#
            ),
        )
    };
    assert_eq!(with_override(2).status, 200);
    let refused = with_override(3);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(with_override(2).status, 200);
    assert_eq!(with_override(2).status, 429, "2 per hour, used up");
    assert_eq!(
        metric_value(http, r#"ratelimit_memory_stores{kind="override"}"#),
        1
    );
    assert_eq!(
        metric_value(http, r#"ratelimit_memory_stores_limit{kind="override"}"#),
        1
    );
    assert_eq!(
        metric_value(http, r#"ratelimit_memory_keys_limit{kind="override"}"#),
        32
    );
    assert_eq!(
        metric_value(http, "ratelimit_memory_override_refused_total"),
        1
    );
    // Connections: the scrape's own connection is open; the limit is the setting.
    assert!(metric_value(http, r#"ratelimit_connections{listener="http"}"#) >= 1);
    assert_eq!(
        metric_value(http, r#"ratelimit_connections_limit{listener="http"}"#),
        50
    );
    assert_eq!(
        metric_value(http, r#"ratelimit_connections_limit{listener="grpc"}"#),
        50
    );
}

#[test]
fn the_quick_deny_cache_size_is_a_flag_and_a_gauge() {
    let redis = RedisServer::start();
    let dir = TempDir::new("serve-bounds-quick-deny");
    let url = redis.url();
    let (_server, http) = start(&dir, &["--store", &url, "--quick-deny-keys", "5"], &[]);
    // 1 per hour on Redis's clock: each address's two checks in one window.
    std::thread::sleep(redis.wait_clear_of_window_end(HOUR, Duration::from_secs(60)));
    assert_eq!(metric_value(http, "ratelimit_quick_deny_keys_limit"), 5);
    assert_eq!(metric_value(http, "ratelimit_quick_deny_keys"), 0);
    // Forty addresses over their 1 per hour: the cache keeps at most 5 of them.
    for ip in 0..40 {
        let ip = format!("10.0.0.{ip}");
        assert_eq!(check(http, "ip", &ip).status, 200);
        assert_eq!(check(http, "ip", &ip).status, 429);
    }
    let cached = metric_value(http, "ratelimit_quick_deny_keys");
    assert!((1..=5).contains(&cached), "{cached} keys cached");
}

/// The lease book's and the shares holder's key bounds are gauges beside
/// their flags, and so are the starter slots: the fleet's setting (the
/// first instance's, whatever a later one asks) and whether this instance
/// owns one; an owner that stops gracefully passes its slot on at once.
#[test]
fn the_lease_and_shares_bounds_and_the_starter_slots_are_gauges() {
    let redis = RedisServer::start();
    let url = redis.url();
    let limits = "
domain: edge
descriptors:
  - key: tenant
    shares: true
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}
";
    let dir = TempDir::new("serve-bounds-shares");
    let (mut first_server, first) = start_on(
        &dir,
        limits,
        &[
            "--store",
            &url,
            "--lease-max-keys",
            "7",
            "--shares-max-keys",
            "9",
            "--shares-starter-slots",
            "1",
        ],
        &[],
    );
    assert_eq!(metric_value(first, "ratelimit_store_lease_keys_limit"), 7);
    assert_eq!(metric_value(first, "ratelimit_store_shares_keys_limit"), 9);
    assert_eq!(
        metric_value(first, "ratelimit_store_shares_starter_slots_limit"),
        1
    );
    // No call yet: no slot.
    assert_eq!(
        metric_value(first, "ratelimit_store_shares_starter_slots_owned"),
        0
    );
    assert_eq!(check(first, "tenant", "a").status, 200);
    let owned = poll_until(BUDGET, || {
        (metric_value(first, "ratelimit_store_shares_starter_slots_owned") == 1).then_some(())
    });
    assert!(owned.is_some(), "the first instance owns the one slot");
    // A second instance asking for 4 slots follows the fleet's 1, taken.
    let (_second, second) = start_on(
        &dir,
        limits,
        &["--store", &url, "--shares-starter-slots", "4"],
        &[],
    );
    assert_eq!(
        metric_value(second, "ratelimit_store_shares_starter_slots_limit"),
        4
    );
    assert_eq!(check(second, "tenant", "b").status, 200);
    let followed = poll_until(BUDGET, || {
        (metric_value(second, "ratelimit_store_shares_starter_slots_limit") == 1).then_some(())
    });
    assert!(
        followed.is_some(),
        "the second instance reports the fleet's slots"
    );
    assert_eq!(
        metric_value(second, "ratelimit_store_shares_starter_slots_owned"),
        0
    );
    assert_eq!(
        metric_value(first, "ratelimit_store_shares_starter_slots_owned"),
        1
    );
    assert_eq!(
        metric_value(second, "ratelimit_store_shares_keys_limit"),
        1_000_000,
        "the default --shares-max-keys"
    );
    // The owner stops gracefully: it gives its slot back as it leaves, and
    // the second instance owns it after its next call, not the TTL (10 s).
    first_server.terminate();
    let (code, _, _) = first_server.finish();
    assert_eq!(code, Some(0));
    let passed_on = poll_until(Duration::from_secs(3), || {
        assert_eq!(check(second, "tenant", "b").status, 200);
        (metric_value(second, "ratelimit_store_shares_starter_slots_owned") == 1).then_some(())
    });
    assert!(
        passed_on.is_some(),
        "the slot passed to the second instance within 3 s of the owner's exit"
    );
}

#[test]
fn bad_bound_values_stop_serve_with_an_error_naming_the_flag() {
    let dir = TempDir::new("serve-bounds-bad");
    let config = dir.limits(LIMITS);
    let config = config.to_str().expect("a UTF-8 path");
    for (name, value, flag) in [
        ("TOLLGATE_MAX_KEYS", "0", "--max-keys"),
        ("TOLLGATE_MAX_LOG_ENTRIES", "many", "--max-log-entries"),
        ("TOLLGATE_QUICK_DENY_KEYS", "-3", "--quick-deny-keys"),
        ("TOLLGATE_MAX_CONNECTIONS", "0", "--max-connections"),
        (
            "TOLLGATE_REQUEST_HEADERS_TIMEOUT",
            "0s",
            "--request-headers-timeout",
        ),
    ] {
        let mut args = vec!["serve", "--config", config];
        args.extend_from_slice(&EPHEMERAL_ADDRS);
        let mut server = Server::spawn_with_env(&args, &[(name, value)]);
        let (code, lines, stderr) = server.finish();
        assert_eq!(code, Some(2), "{name}={value}: {stderr}");
        assert!(stderr.contains(flag), "{name}={value}: {stderr}");
        assert!(
            lines.is_empty(),
            "{name}={value} must not listen: {lines:?}"
        );
    }
}

/// Sends a request on `stream` and reads until the response's end (the server closes: `Connection: close`).
fn ask(stream: &mut TcpStream) -> std::io::Result<String> {
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

#[test]
fn connections_over_the_cap_wait_until_one_closes_and_the_wait_is_logged() {
    let dir = TempDir::new("serve-bounds-connections");
    let (mut server, http) = start(&dir, &["--max-connections", "2"], &[]);
    let first = TcpStream::connect(http).expect("connects");
    let second = TcpStream::connect(http).expect("connects");
    let mut third = TcpStream::connect(http).expect("the kernel's backlog takes it");
    third
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a read timeout");
    match ask(&mut third) {
        Ok(reply) => panic!("a third connection was served over the cap of 2: {reply:?}"),
        Err(error) => assert!(
            matches!(
                error.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{error}"
        ),
    }
    drop(first);
    third
        .set_read_timeout(Some(BUDGET))
        .expect("a read timeout");
    let mut reply = String::new();
    third
        .read_to_string(&mut reply)
        .expect("answered once a slot is free");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    drop(third);
    drop(second);
    // The service answers new clients again.
    let served = poll_until(BUDGET, || {
        let mut stream = TcpStream::connect(http).ok()?;
        stream.set_read_timeout(Some(BUDGET)).ok()?;
        ask(&mut stream).ok()
    })
    .expect("served after the others closed");
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    server.child.kill().expect("the server stops");
    let (_, _, stderr) = server.finish();
    assert!(
        stderr.contains("connection limit reached") && stderr.contains("max_connections=2"),
        "{stderr}"
    );
}

#[test]
fn an_http_client_that_never_finishes_its_request_head_is_disconnected() {
    let dir = TempDir::new("serve-bounds-header-timeout");
    let (_server, http) = start(&dir, &["--request-headers-timeout", "200ms"], &[]);
    let mut slow = TcpStream::connect(http).expect("connects");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .expect("half a head is sent");
    slow.set_read_timeout(Some(BUDGET)).expect("a read timeout");
    let mut rest = Vec::new();
    let read = slow.read_to_end(&mut rest);
    assert!(
        read.is_ok(),
        "the server closes the connection well within {BUDGET:?}: {read:?}"
    );
    let reply = String::from_utf8_lossy(&rest);
    assert!(!reply.contains("200 OK"), "{reply}");
    // Others are still served.
    assert_eq!(get(http, "/healthz", &[]).status, 200);
}
