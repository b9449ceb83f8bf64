//! `tollgate proxy --limits`: the global rate limit decided in the proxy itself; two proxies leasing from one real Redis keep the fleet's limit exactly, with a few Redis calls.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate_testkit::budget::eventually;
use tollgate_testkit::http::get;
use tollgate_testkit::limits::exact_rate_limit;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{LoggedChild, tollgate};
use tollgate_testkit::upstream::Upstream;

/// The leased algorithms.
const LEASED: [&str; 4] = ["fixed_window", "token_bucket", "gcra", "leaky_bucket"];

/// One rule per leased algorithm, keyed by the `x-algorithm` header: `limit` per day.
fn limits(limit: u64) -> String {
    let mut yaml = String::from("domain: fleet\ndescriptors:\n");
    for algorithm in LEASED {
        yaml.push_str(&format!(
            "  - key: algorithm\n    value: {algorithm}\n    on_store_error: deny\n    rate_limit: {}\n",
            exact_rate_limit(limit, "day", algorithm)
        ));
    }
    yaml
}

/// A proxy config whose global rate limit is decided in the proxy, one descriptor from `x-algorithm`.
fn proxy_config(upstream: SocketAddr) -> String {
    format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nadmin: {{address: 127.0.0.1:0}}\nglobal_ratelimit:\n  domain: fleet\n  rate_limit_service: {{in_process: true}}\n  timeout: 2s\n  enable_x_ratelimit_headers: DRAFT_VERSION_03\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{upstream}\"}}]\nroutes:\n  - name: api\n    cluster: backend\n    rate_limits:\n      - actions:\n          - request_headers: {{header_name: x-algorithm, descriptor_key: algorithm}}\n"
    )
}

/// `tollgate proxy --config CONFIG --limits LIMITS` with `extra` flags, logging to `name.log`.
fn proxy(dir: &TempDir, config: &Path, limits: &Path, extra: &[&str], name: &str) -> LoggedChild {
    let mut args = vec![
        "--config",
        config.to_str().expect("UTF-8"),
        "--limits",
        limits.to_str().expect("UTF-8"),
        "--log-level",
        "warn",
    ];
    args.extend_from_slice(extra);
    LoggedChild::proxy(&args, dir.0.join(format!("{name}.log")), true)
}

/// Demand above the limit through every proxy: 32 clients each, each
/// sending until its proxy has answered 16 denials or `cap` requests.
/// Returns (admitted, requests sent).
fn saturate(proxies: &[SocketAddr], algorithm: &str, cap: u64) -> (u64, u64) {
    let admitted = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for &proxy in proxies {
            let denials = Arc::new(AtomicU64::new(0));
            let calls = Arc::new(AtomicU64::new(0));
            for _ in 0..32 {
                let (admitted, sent, denials, calls) = (
                    Arc::clone(&admitted),
                    Arc::clone(&sent),
                    Arc::clone(&denials),
                    Arc::clone(&calls),
                );
                scope.spawn(move || {
                    while denials.load(Ordering::Relaxed) < 16
                        && calls.fetch_add(1, Ordering::Relaxed) < cap
                    {
                        sent.fetch_add(1, Ordering::Relaxed);
                        let response = get(proxy, "/", &[("x-algorithm", algorithm)]);
                        match response.status {
                            200 => {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                            429 => {
                                assert_eq!(
                                    response.header("x-envoy-ratelimited"),
                                    Some("true"),
                                    "{response:?}"
                                );
                                denials.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => panic!("{algorithm}: unexpected answer {response:?}"),
                        }
                    }
                });
            }
        }
    });
    (
        admitted.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
    )
}

#[test]
fn two_proxies_leasing_from_one_redis_never_pass_the_fleet_limit_and_rarely_call_redis() {
    let redis = RedisServer::start();
    std::thread::sleep(
        redis.wait_clear_of_window_end(Duration::from_secs(86_400), Duration::from_secs(120)),
    );
    let dir = TempDir::new("proxy-limits-fleet");
    let upstream = Upstream::spawn();
    let limit = 600;
    let limits = dir.write("limits.yaml", &limits(limit));
    let config = dir.write("proxy.yaml", &proxy_config(upstream.addr));
    let url = redis.url();
    let flags = [
        "--store",
        url.as_str(),
        "--store-timeout",
        "2s",
        "--lease-period",
        "1h",
        "--expected-instances",
        "2",
    ];
    let a = proxy(&dir, &config, &limits, &flags, "a");
    let b = proxy(&dir, &config, &limits, &flags, "b");
    for algorithm in LEASED {
        let calls_before = redis.script_calls();
        let (admitted, sent) = saturate(&[a.addr, b.addr], algorithm, limit);
        let calls = redis.script_calls() - calls_before;
        eprintln!(
            "{algorithm}: {admitted} of {limit} admitted, {sent} requests, {calls} Redis calls"
        );
        assert!(
            admitted <= limit,
            "{algorithm}: {admitted} admitted over a fleet limit of {limit}"
        );
        // Each proxy sends until it sees denials itself, so neither stops
        // with units in its lease, and nothing refills within the day. A
        // window's refill joins the lease: exactly the limit passes. A
        // schedule's refill leaves at most an eighth of the grant it
        // replaces to decay (tollgate_core::lease), and the grants add up
        // to at most the limit: at most an eighth of it is lost.
        let floor = if algorithm == "fixed_window" {
            limit
        } else {
            limit - limit / 8
        };
        assert!(
            admitted >= floor,
            "{algorithm}: {admitted} admitted, under {floor} for a fleet limit of {limit}"
        );
        assert!(
            calls * 4 < sent,
            "{algorithm}: {calls} Redis calls for {sent} requests; leases should answer most"
        );
    }
    let metrics = get(a.admin.expect("an admin address"), "/metrics", &[]).body;
    let leased = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("tollgate_proxy_ratelimit_store_decisions_total{path=\"leased\"} ")
        })
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no leased decisions in {metrics}"));
    assert!(leased > 0, "{metrics}");
}

#[test]
fn a_proxy_alone_keeps_its_limit_in_memory_and_reloads_it() {
    let dir = TempDir::new("proxy-limits-memory");
    let upstream = Upstream::spawn();
    let limits = dir.write("limits.yaml", &limits(3));
    let config = dir.write("proxy.yaml", &proxy_config(upstream.addr));
    let p = proxy(&dir, &config, &limits, &[], "memory");
    let statuses: Vec<u16> = (0..4)
        .map(|_| get(p.addr, "/", &[("x-algorithm", "fixed_window")]).status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    let limited = get(p.addr, "/", &[("x-algorithm", "fixed_window")]);
    assert_eq!(limited.header("x-ratelimit-remaining"), Some("0"));
    // No descriptor, no limit.
    assert_eq!(get(p.addr, "/", &[]).status, 200);

    // A broken limits file is refused (logged) and keeps the running rules;
    // a good one replaces them.
    std::fs::write(&limits, "domain: fleet\ndescriptors: [oops").expect("written");
    eventually(
        "the broken limits file is refused",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&p.log)
                .is_ok_and(|log| log.contains("keeping the running config"))
        },
    );
    assert_eq!(
        get(p.addr, "/", &[("x-algorithm", "fixed_window")]).status,
        429,
        "a bad file keeps the running limit"
    );
    std::fs::write(&limits, self::limits(1000)).expect("written");
    eventually(
        "the new limits file takes effect",
        Duration::from_secs(10),
        || get(p.addr, "/", &[("x-algorithm", "fixed_window")]).status == 200,
    );
}

/// Issue 21: `--config` and `--limits` relative to the proxy's working
/// directory are watched like absolute paths: a lowered limit is in force
/// after the write, with no signal.
#[test]
fn a_proxy_with_relative_paths_reloads_its_limits_on_a_file_change() {
    let dir = TempDir::new("proxy-limits-relative");
    let upstream = Upstream::spawn();
    let limits = dir.write("limits.yaml", &limits(1000));
    dir.write("proxy.yaml", &proxy_config(upstream.addr));
    let mut command = tollgate(&[
        "proxy",
        "--config",
        "proxy.yaml",
        "--limits",
        "limits.yaml",
        "--log-level",
        "warn",
    ]);
    command.current_dir(dir.path());
    let p = LoggedChild::spawn(command, dir.0.join("relative.log"), true);
    for _ in 0..3 {
        assert_eq!(
            get(p.addr, "/", &[("x-algorithm", "fixed_window")]).status,
            200
        );
    }

    // The three already counted are over the lowered limit of 2.
    std::fs::write(&limits, self::limits(2)).expect("written");
    eventually(
        "the lowered limit is in force",
        Duration::from_secs(10),
        || get(p.addr, "/", &[("x-algorithm", "fixed_window")]).status == 429,
    );
}

#[test]
fn in_process_without_limits_or_with_an_address_is_refused_at_start() {
    let dir = TempDir::new("proxy-limits-refused");
    let config = dir.write(
        "proxy.yaml",
        &proxy_config("127.0.0.1:9".parse().expect("addr")),
    );
    let output = tollgate(&["proxy", "--config", config.to_str().expect("UTF-8")])
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("global_ratelimit.rate_limit_service.in_process")
            && stderr.contains("--limits"),
        "{stderr}"
    );

    let both = proxy_config("127.0.0.1:9".parse().expect("addr")).replace(
        "{in_process: true}",
        "{in_process: true, address: \"127.0.0.1:1\"}",
    );
    let config = dir.write("both.yaml", &both);
    let limits = dir.write("limits.yaml", &limits(3));
    let output = tollgate(&[
        "proxy",
        "--config",
        config.to_str().expect("UTF-8"),
        "--limits",
        limits.to_str().expect("UTF-8"),
    ])
    .output()
    .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("excludes `address`"), "{stderr}");

    let bad_limits = dir.write("bad.yaml", "domain: fleet\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    let output = tollgate(&[
        "proxy",
        "--config",
        dir.0.join("proxy.yaml").to_str().expect("UTF-8"),
        "--limits",
        bad_limits.to_str().expect("UTF-8"),
    ])
    .output()
    .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.yaml:") && stderr.contains("has errors; not starting"),
        "{stderr}"
    );
}

/// Four requests at once through `proxy` on the `x-algorithm: shape` descriptor:
/// each one's status, the delay header and how long it took, slowest last.
fn shaped_burst(proxy: SocketAddr) -> Vec<(u16, Option<u64>, Duration)> {
    let connections: Vec<tollgate_testkit::http::Connection> = (0..4)
        .map(|_| {
            let connection = tollgate_testkit::http::Connection::open(proxy);
            // Warm the connection on a path with no descriptor.
            let warm = connection.send("GET", "/", &[]).expect("warm-up");
            assert_eq!(warm.status, 200);
            connection
        })
        .collect();
    let start = std::sync::Barrier::new(4);
    let mut seen: Vec<(u16, Option<u64>, Duration)> = std::thread::scope(|scope| {
        let handles: Vec<_> = connections
            .iter()
            .map(|connection| {
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    let sent = tollgate_testkit::budget::Stopwatch::start();
                    let response = connection
                        .send("GET", "/", &[("x-algorithm", "shape")])
                        .expect("an answer");
                    (
                        response.status,
                        response
                            .header("x-tollgate-delay-ms")
                            .and_then(|v| v.parse().ok()),
                        sent.elapsed(),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("joined"))
            .collect()
    });
    seen.sort_by_key(|s| s.2);
    seen
}

/// Checks a shaped burst: all pass, three wait about 100, 200 and 300 ms, and say so.
fn assert_shaped(how: &str, seen: &[(u16, Option<u64>, Duration)]) {
    assert!(seen.iter().all(|s| s.0 == 200), "{how}: {seen:?}");
    let told: Vec<u64> = seen.iter().filter_map(|s| s.1).collect();
    assert_eq!(told.len(), 3, "{how}: three requests waited: {seen:?}");
    for (_, delay, took) in seen {
        if let Some(ms) = delay {
            // Held at least as long as it says (a few ms of clock granularity aside).
            assert!(
                *took + Duration::from_millis(5) >= Duration::from_millis(*ms),
                "{how}: said {ms} ms, took {took:?}"
            );
        }
    }
    let mut sorted = told.clone();
    sorted.sort_unstable();
    // The waits are the bucket's steps, 100 ms apart (within the arrivals' spread).
    assert!(
        sorted[0] >= 50 && sorted[2] >= 250 && sorted[2] <= 300,
        "{how}: waits {sorted:?}"
    );
}

#[test]
fn a_shaping_limits_file_holds_requests_in_the_proxy_and_through_tollgate_serve() {
    let dir = TempDir::new("proxy-limits-shape");
    let upstream = Upstream::spawn();
    let limits = dir.write(
        "limits.yaml",
        "domain: fleet\ndescriptors:\n  - key: algorithm\n    value: shape\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 3, delay: 0}\n",
    );
    // In the proxy itself.
    let config = dir.write("proxy.yaml", &proxy_config(upstream.addr));
    let p = proxy(&dir, &config, &limits, &[], "in-process");
    assert_shaped("in process", &shaped_burst(p.addr));

    // Through `tollgate serve`, which holds its OK answer for the wait; the
    // proxy's timeout must be longer than the longest wait.
    let serve = LoggedChild::serve(&limits, dir.path().join("serve.log"));
    let remote = proxy_config(upstream.addr).replace(
        "rate_limit_service: {in_process: true}\n  timeout: 2s",
        &format!(
            "rate_limit_service: {{address: \"{}\"}}\n  timeout: 2s",
            serve.addr
        ),
    );
    let remote = dir.write("remote.yaml", &remote);
    let r = LoggedChild::proxy(
        &[
            "--config",
            remote.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.path().join("remote.log"),
        false,
    );
    assert_shaped("through tollgate serve", &shaped_burst(r.addr));
}
