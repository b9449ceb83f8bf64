//! Upstream's metrics dialects from a running `serve`: the Prometheus exposition
//! (typed, parsed by promtool, on `USE_PROMETHEUS`'s own listener), `EXTRA_TAGS`,
//! `/stats` on the debug port, upstream's stats that were missing, and statsd
//! over TCP (reconnecting, bounded) and as DogStatsD.
//!
//! Every socket is on 127.0.0.1; every wait is bounded by the test kit's budget.

mod rls_client;
mod rls_load;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use rls_client::{channel, request};
use rls_load::admitted;
use tollgate_testkit::budget::{BUDGET, Stopwatch, poll_until, poll_until_async};
use tollgate_testkit::http::get;
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server};
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};

/// 2 per day for `k`; a store error denies.
const LIMITS: &str = "domain: u
descriptors:
  - key: k
    on_store_error: deny
    rate_limit: {unit: day, requests_per_unit: 2}
";

/// Upstream's series and their types, from its default statsd_exporter
/// mapping (counters keep their statsd names, without `_total`) and, for
/// the Redis pool, the exporter's escaping of unmapped names.
const UPSTREAM_TYPES: [(&str, &str); 12] = [
    ("ratelimit_service_rate_limit_total_hits", "counter"),
    ("ratelimit_service_rate_limit_over_limit", "counter"),
    ("ratelimit_service_rate_limit_near_limit", "counter"),
    ("ratelimit_service_rate_limit_within_limit", "counter"),
    ("ratelimit_service_rate_limit_shadow_mode", "counter"),
    ("ratelimit_service_should_rate_limit_error", "counter"),
    ("ratelimit_service_total_requests", "counter"),
    ("ratelimit_service_response_time_seconds", "histogram"),
    ("ratelimit_service_config_load_success", "counter"),
    ("ratelimit_service_config_load_error", "counter"),
    ("ratelimit_redis_pool_cx_active", "gauge"),
    ("ratelimit_redis_pool_cx_total", "counter"),
];

/// `serve --config CONFIG` on ephemeral loopback ports, plus `extra`, with `env`.
fn spawn(config: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let mut args = vec!["serve", "--config", config];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    args.extend_from_slice(&["--store-timeout", "2s"]);
    args.extend_from_slice(extra);
    Server::spawn_with_env(&args, env)
}

/// The `# TYPE` of each family in a Prometheus text exposition.
fn types(exposition: &str) -> BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

/// Checks `exposition` with `promtool check metrics` (Prometheus's own text
/// parser): it must parse, and the only lint allowed is the one upstream's
/// names draw (counters without `_total`).
fn promtool_parses(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian package prometheus; scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(exposition.as_bytes())
        .expect("write the exposition");
    let output = child.wait_with_output().expect("promtool ends");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // promtool exits 1 when the text does not parse, 3 when it parses with lint problems.
    assert!(
        matches!(output.status.code(), Some(0 | 3)) && !report.contains("parsing error"),
        "Prometheus's parser refused the exposition: {report}\n{exposition}"
    );
    for problem in report.lines() {
        let name = problem.split_whitespace().next().unwrap_or_default();
        let upstream = UPSTREAM_TYPES.iter().any(|(n, _)| *n == name)
            || name.starts_with("ratelimit_service_rate_limit_");
        assert!(
            upstream && problem.contains("should have \"_total\" suffix"),
            "a lint problem on a name that is not upstream's: {problem}"
        );
    }
}

/// Counters are typed `counter` under upstream's names (no family is
/// `unknown`, as it was in the OpenMetrics encoding), the Redis pool and
/// local-cache stats are there, and Prometheus's parser reads it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exposition_types_upstreams_counters_and_parses() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let redis = RedisServer::start();
    let scratch = TempDir::new("exposition");
    let config = scratch.limits(LIMITS);
    let url = redis.url();
    // One worker: one Redis connection, whatever the machine's cores
    // (serve_workers.rs counts the connections of several).
    let server = spawn(
        config.to_str().unwrap(),
        &["--store", &url, "--worker-threads", "1"],
        &[("DEBUG_HOST", "127.0.0.1"), ("DEBUG_PORT", "0")],
    );
    let channel = channel(&server.address()).await;
    let http = server.http_address();
    let debug: SocketAddr = server
        .line_after("debug listening on ")
        .parse()
        .expect("an address");
    // Three calls at once: the third is denied by Redis and remembered; the
    // two after it are denied from the quick-deny cache (upstream's local cache).
    let limited = request("u", "k", "v");
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &limited, 3).await,
        2
    );
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &limited, 2).await,
        0
    );
    assert_eq!(
        admitted(
            std::slice::from_ref(&channel),
            &request("nope", "k", "v"),
            1
        )
        .await,
        1
    );
    let response = get(http, "/metrics", &[]);
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = response.body;
    promtool_parses(&text);
    let types = types(&text);
    for (name, kind) in UPSTREAM_TYPES {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some(kind),
            "{name} in {types:?}"
        );
    }
    assert!(
        types
            .values()
            .all(|kind| kind != "unknown" && kind != "untyped"),
        "{types:?}"
    );
    for line in [
        r#"ratelimit_service_rate_limit_over_limit{domain="u",key1="k"} 3"#,
        r#"ratelimit_service_rate_limit_over_limit_with_local_cache{domain="u",key1="k"} 2"#,
        r#"ratelimit_service_rate_limit_domain_not_found{domain="nope"} 1"#,
        "ratelimit_redis_pool_cx_active 1",
        "ratelimit_redis_pool_cx_total 1",
        "ratelimit_store_errors_total 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    // Upstream's debug port lists the stats under their statsd names.
    let stats = get(debug, "/stats", &[]);
    assert_eq!(stats.status, 200, "{}", stats.body);
    for line in [
        "ratelimit.service.rate_limit.u.k.over_limit: 3",
        "ratelimit.service.rate_limit.u.k.over_limit_with_local_cache: 2",
        "ratelimit.service.rate_limit.u.k.total_hits: 5",
        "ratelimit.service.rate_limit.nope.domain_not_found: 1",
        "ratelimit.redis_pool.cx_active: 1",
        "ratelimit_server.ShouldRateLimit.total_requests: 6",
    ] {
        assert!(
            stats.body.lines().any(|l| l == line),
            "no `{line}` in:\n{}",
            stats.body
        );
    }
}

/// `USE_PROMETHEUS` serves the exposition at `PROMETHEUS_ADDR` and
/// `PROMETHEUS_PATH`, and `EXTRA_TAGS` labels every series there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_prometheus_serves_extra_tags_on_every_series_at_its_address_and_path() {
    let scratch = TempDir::new("use-prometheus");
    let config = scratch.limits(LIMITS);
    let server = spawn(
        config.to_str().unwrap(),
        &["--store", "memory"],
        &[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", "127.0.0.1:0"),
            ("PROMETHEUS_PATH", "/prom"),
            ("EXTRA_TAGS", "zone:eu-1,app:rl"),
        ],
    );
    let channel = channel(&server.address()).await;
    let prometheus: SocketAddr = server
        .line_after("prometheus listening on ")
        .parse()
        .expect("an address");
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &request("u", "k", "v"), 3).await,
        2
    );
    let response = get(prometheus, "/prom", &[]);
    assert_eq!(response.status, 200, "{}", response.body);
    promtool_parses(&response.body);
    let samples: Vec<&str> = response
        .body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(samples.len() > 20, "{}", response.body);
    for sample in &samples {
        assert!(
            sample.contains(r#"zone="eu-1""#) && sample.contains(r#"app="rl""#),
            "a series without the extra tags: {sample}"
        );
    }
    assert!(
        samples.contains(
            &r#"ratelimit_service_rate_limit_over_limit{domain="u",key1="k",zone="eu-1",app="rl"} 1"#
        ),
        "{}",
        response.body
    );
    // Only the exposition, only at its path.
    assert_eq!(get(prometheus, "/metrics", &[]).status, 404);
}

/// A bad metrics setting stops start-up with an error naming the variable.
#[test]
fn a_bad_metrics_setting_stops_start_up_naming_it() {
    let scratch = TempDir::new("bad-metrics");
    let config = scratch.limits(LIMITS);
    for (name, env) in [
        ("EXTRA_TAGS", vec![("EXTRA_TAGS", "zone=eu")]),
        ("EXTRA_TAGS", vec![("EXTRA_TAGS", "bad-name:v")]),
        (
            "PROMETHEUS_ADDR",
            vec![("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", "9090")],
        ),
        (
            "PROMETHEUS_PATH",
            vec![("USE_PROMETHEUS", "true"), ("PROMETHEUS_PATH", "metrics")],
        ),
        (
            "STATSD_PROTOCOL",
            vec![("USE_STATSD", "true"), ("STATSD_PROTOCOL", "sctp")],
        ),
        (
            "USE_DOG_STATSD",
            vec![("USE_STATSD", "true"), ("USE_DOG_STATSD", "true")],
        ),
        (
            "USE_DOG_STATSD_MOGRIFIERS",
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_DOG_STATSD_MOGRIFIERS", "A"),
            ],
        ),
    ] {
        let mut server = spawn(config.to_str().unwrap(), &["--store", "memory"], &env);
        let (code, lines, stderr) = server.finish();
        assert_eq!(code, Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(name), "{env:?}: {stderr}");
        assert!(lines.is_empty(), "{env:?}: it listened: {lines:?}");
    }
}

/// `serve` in memory sending statsd to 127.0.0.1:`port` every 50 ms, with
/// `flags` and `env` added, after three calls of `u`/`k` (two admitted):
/// the scratch directory, the server and a channel to it.
async fn serve_with_statsd(
    name: &str,
    port: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (TempDir, Server, tonic::transport::Channel) {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new(name);
    let config = scratch.limits(LIMITS);
    let mut all_flags = vec!["--store", "memory"];
    all_flags.extend_from_slice(flags);
    let mut all_env = vec![
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", port),
        ("STATS_FLUSH_INTERVAL", "50ms"),
    ];
    all_env.extend_from_slice(env);
    let server = spawn(config.to_str().unwrap(), &all_flags, &all_env);
    let channel = channel(&server.address()).await;
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &request("u", "k", "v"), 3).await,
        2
    );
    (scratch, server, channel)
}

/// Accepts one connection on `listener` within the budget.
fn accept(listener: &TcpListener) -> Option<TcpStream> {
    listener.set_nonblocking(true).expect("non-blocking");
    let stream = poll_until(BUDGET, || match listener.accept() {
        Ok((stream, _)) => Some(stream),
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(error) => panic!("accept: {error}"),
    })?;
    stream.set_nonblocking(false).expect("blocking");
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    Some(stream)
}

/// The sum of the counter lines `name:N|c` + `tags` among `lines` (a count may come in several flushes).
fn counted(lines: &[String], name: &str, tags: &str) -> u64 {
    lines
        .iter()
        .filter_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(':')?
                .strip_suffix(tags)?
                .strip_suffix("|c")
        })
        .map(|n| n.parse::<u64>().expect("a whole count"))
        .sum()
}

/// Reads `stream` until the lines satisfy `done` or the budget ends; the lines read.
fn read_until(stream: &mut TcpStream, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut text = String::new();
    let mut buffer = [0_u8; 4096];
    let watch = Stopwatch::start();
    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    while !done(&lines(&text)) && !watch.exceeded(BUDGET) {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buffer[..n])),
            Err(_) => {}
        }
    }
    lines(&text)
}

/// statsd goes over TCP by default, as upstream's does, with `EXTRA_TAGS`
/// in upstream's stats library's form; when the server drops the
/// connection, the flusher connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_goes_over_tcp_with_tags_and_reconnects() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a TCP port");
    let port = listener.local_addr().expect("bound").port().to_string();
    let env = [("USE_STATSD", "true"), ("EXTRA_TAGS", "zone:eu.1,app:rl")];
    let (_scratch, server, channel) = serve_with_statsd("statsd-tcp", &port, &[], &env).await;
    let http = server.http_address();
    let listener_for_reader = listener.try_clone().expect("a clone");
    let first = tokio::task::spawn_blocking(move || {
        let mut stream = accept(&listener_for_reader).expect("the flusher connects");
        read_until(&mut stream, |lines| {
            counted(
                lines,
                "ratelimit.service.rate_limit.u.k.total_hits.__app=rl.__zone=eu_1",
                "",
            ) == 3
        })
        // The stream is dropped here: the server side goes away.
    })
    .await
    .expect("the reader ends");
    for (name, count) in [
        ("ratelimit.service.rate_limit.u.k.total_hits", 3),
        ("ratelimit.service.rate_limit.u.k.within_limit", 2),
        ("ratelimit.service.rate_limit.u.k.over_limit", 1),
        ("ratelimit.service.config_load_success", 1),
    ] {
        let tagged = format!("{name}.__app=rl.__zone=eu_1");
        assert_eq!(counted(&first, &tagged, ""), count, "{tagged} in {first:?}");
    }
    assert!(
        first.iter().any(|l| l
            .starts_with("ratelimit_server.ShouldRateLimit.response_time.__app=rl.__zone=eu_1:")
            && l.ends_with("|ms")),
        "{first:?}"
    );
    // Keep calling until the flusher, having found the connection gone, connects again.
    let reconnected = {
        let listener = listener.try_clone().expect("a clone");
        tokio::task::spawn_blocking(move || accept(&listener))
    };
    let (calling, waiting) = (&channel, &reconnected);
    let _ = poll_until_async(BUDGET, || async move {
        if waiting.is_finished() {
            return Some(());
        }
        admitted(std::slice::from_ref(calling), &request("u", "k", "v"), 1).await;
        None
    })
    .await;
    let mut second = reconnected
        .await
        .expect("the acceptor ends")
        .expect("the flusher connected again");
    let lines = tokio::task::spawn_blocking(move || {
        read_until(&mut second, |lines| {
            counted(
                lines,
                "ratelimit.service.rate_limit.u.k.over_limit.__app=rl.__zone=eu_1",
                "",
            ) > 0
        })
    })
    .await
    .expect("the reader ends");
    assert!(
        counted(
            &lines,
            "ratelimit.service.rate_limit.u.k.over_limit.__app=rl.__zone=eu_1",
            ""
        ) > 0,
        "nothing after the reconnection: {lines:?}"
    );
    let metrics = get(http, "/metrics", &[]).body;
    assert!(
        metrics.contains("ratelimit_statsd_dropped_lines_total"),
        "{metrics}"
    );
}

/// With no statsd server, lines wait in a bounded buffer, the rest are
/// dropped and counted, and decisions are answered as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_statsd_keeps_a_bounded_buffer_and_counts_what_it_drops() {
    let port = free_port().to_string();
    let flags = ["--statsd-buffer-bytes", "200"];
    let env = [("USE_STATSD", "true")];
    let (_scratch, server, channel) = serve_with_statsd("statsd-down", &port, &flags, &env).await;
    let http = server.http_address();
    let value = |text: &str, name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    let text = poll_until(BUDGET, || {
        let text = get(http, "/metrics", &[]).body;
        value(&text, "ratelimit_statsd_dropped_lines_total")
            .is_some_and(|d| d > 0)
            .then_some(text)
    })
    .unwrap_or_else(|| get(http, "/metrics", &[]).body);
    assert!(
        value(&text, "ratelimit_statsd_dropped_lines_total").is_some_and(|d| d > 0),
        "{text}"
    );
    assert_eq!(
        value(&text, "ratelimit_statsd_buffer_limit_bytes"),
        Some(200)
    );
    assert!(
        value(&text, "ratelimit_statsd_pending_bytes").is_some_and(|p| p > 0 && p <= 200),
        "{text}"
    );
    // Still answering, by the same count.
    assert_eq!(
        admitted(std::slice::from_ref(&channel), &request("u", "k", "v"), 3).await,
        0
    );
}

/// `USE_DOG_STATSD` sends DogStatsD over UDP, with `EXTRA_TAGS` after the type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_dog_statsd_sends_tags_after_the_type() {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a read timeout");
    let port = socket.local_addr().expect("bound").port().to_string();
    let env = [
        ("USE_DOG_STATSD", "true"),
        ("EXTRA_TAGS", "zone:eu.1,app:rl"),
    ];
    let (_scratch, _server, _channel) = serve_with_statsd("dogstatsd", &port, &[], &env).await;
    let (name, tags) = (
        "ratelimit.service.rate_limit.u.k.total_hits",
        "|#app:rl,zone:eu_1",
    );
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        let mut buffer = [0_u8; 2048];
        let watch = Stopwatch::start();
        while counted(&lines, name, tags) < 3 && !watch.exceeded(BUDGET) {
            if let Ok(n) = socket.recv(&mut buffer) {
                lines.extend(
                    String::from_utf8_lossy(&buffer[..n])
                        .lines()
                        .map(str::to_owned),
                );
            }
        }
        lines
    })
    .await
    .expect("the reader ends");
    assert_eq!(counted(&lines, name, tags), 3, "{lines:?}");
    assert!(
        lines.iter().any(
            |l| l.starts_with("ratelimit_server.ShouldRateLimit.response_time:")
                && l.ends_with("|ms|#app:rl,zone:eu_1")
        ),
        "{lines:?}"
    );
}
