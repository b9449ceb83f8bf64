//! `tollgate proxy` end to end: the Istio examples on two "pods", config
//! errors, the global rate limit against a real `tollgate serve`, trusted
//! client addresses, hot reload and the admin endpoints.
//!
//! Every server is a child or a thread on 127.0.0.1; every wait is bounded.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tollgate_core::{Clock, MonotonicClock};
use tollgate_testkit::http::{Connection, get};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::process::{ChildGuard, log_tail};
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::LoggedChild;
use tollgate_testkit::upstream::Upstream;
use tollgate_testkit::window::{self, HOUR};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/istio")
        .join(name)
}

fn sidecar(dir: &TempDir, name: &str, upstream: SocketAddr, filter: &Path) -> LoggedChild {
    LoggedChild::proxy(
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream.to_string(),
            "--local-ratelimit",
            filter.to_str().expect("a UTF-8 path"),
            "--worker-threads",
            "2",
            "--log-level",
            "warn",
        ],
        dir.0.join(format!("{name}.log")),
        false,
    )
}

/// Sends `count` requests to `pod` as fast as one client can; the admitted count and the seconds taken.
fn burst(pod: &LoggedChild, count: usize, clock: &MonotonicClock) -> (usize, f64) {
    let start = clock.now();
    let mut admitted = 0;
    for _ in 0..count {
        let response = get(pod.addr, "/", &[]);
        match response.status {
            200 => admitted += 1,
            429 => {
                assert_eq!(response.body, "local_rate_limited");
                assert_eq!(response.header("x-local-rate-limit"), Some("true"));
            }
            other => panic!(
                "unexpected {other}: {response:?}; log:\n{}",
                log_tail(&pod.log)
            ),
        }
    }
    let elapsed = clock.now().saturating_since(start).as_secs_f64();
    (admitted, elapsed)
}

/// The most a full bucket of `rate` tokens refilled at `rate` per second can admit in `elapsed` seconds.
fn most(rate: f64, elapsed: f64) -> usize {
    (rate + (rate * elapsed).ceil()) as usize
}

#[test]
fn two_pods_with_the_istio_3tps_filter_admit_3_each_and_6_together() {
    let dir = TempDir::new("proxy-two-pods");
    let upstream = Upstream::spawn();
    let filter = example("local-ratelimit-3tps.yaml");
    let pod_a = sidecar(&dir, "pod-a", upstream.addr, &filter);
    let pod_b = sidecar(&dir, "pod-b", upstream.addr, &filter);
    let clock = MonotonicClock::new();

    // A client that sticks to pod A: A caps it at 3 per second, B's bucket is untouched.
    let (a, a_secs) = burst(&pod_a, 12, &clock);
    assert!(
        (3..=most(3.0, a_secs)).contains(&a),
        "pod A admitted {a} of 12 in {a_secs:.3}s"
    );
    let (b, b_secs) = burst(&pod_b, 12, &clock);
    assert!(
        (3..=most(3.0, b_secs)).contains(&b),
        "pod B admitted {b} of 12 in {b_secs:.3}s"
    );
    let total = a + b;
    assert!(
        (6..=most(6.0, a_secs.max(b_secs))).contains(&total),
        "two pods admitted {total}"
    );
    if a_secs < 0.33 && b_secs < 0.33 {
        // No token could have come back: exactly 3 + 3.
        assert_eq!((a, b), (3, 3));
    }
    assert_eq!(
        upstream.served.load(std::sync::atomic::Ordering::SeqCst),
        total
    );
}

#[test]
fn the_10tps_example_loads_unchanged_and_admits_10_per_burst() {
    let dir = TempDir::new("proxy-10tps");
    let upstream = Upstream::spawn();
    let pod = sidecar(
        &dir,
        "pod",
        upstream.addr,
        &example("local-ratelimit-10tps.yaml"),
    );
    let clock = MonotonicClock::new();
    let (admitted, secs) = burst(&pod, 25, &clock);
    assert!(
        (10..=most(10.0, secs)).contains(&admitted),
        "admitted {admitted} of 25 in {secs:.3}s"
    );
}

/// Runs `tollgate proxy ARGS` expecting it to refuse to start; its stderr.
fn refuses(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("proxy")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bad_filters_are_refused_with_the_file_and_place() {
    let dir = TempDir::new("proxy-bad-config");
    let typo = dir.write(
        "typo.yaml",
        "stat_prefix: x\ntoken_bucket:\n  max_token: 3\n  fill_interval: 1s\n",
    );
    let too_fast = dir.write(
        "fast.yaml",
        "stat_prefix: x\ntoken_bucket: {max_tokens: 3, fill_interval: 0.01s}\n",
    );
    let wrong_type = dir.write(
        "filter.yaml",
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nspec:\n  configPatches:\n    - applyTo: HTTP_FILTER\n      patch:\n        operation: INSERT_BEFORE\n        value:\n          name: envoy.filters.http.local_ratelimit\n          typed_config:\n            \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct\n            type_url: type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n            value: {stat_prefix: x}\n",
    );
    let run = |file: &Path| {
        refuses(&[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--local-ratelimit",
            file.to_str().expect("a UTF-8 path"),
        ])
    };
    let error = run(&typo);
    assert!(
        error.contains(&format!("{}:3:", typo.display())) && error.contains("max_token"),
        "{error}"
    );
    let error = run(&too_fast);
    assert!(
        error.contains(
            "token_bucket.fill_interval: local rate limit token bucket fill timer must be >= 50ms"
        ),
        "{error}"
    );
    let error = run(&wrong_type);
    assert!(
        error.contains("spec.configPatches[0].patch.value.typed_config: type_url is"),
        "{error}"
    );
    let missing = refuses(&["--config", "no/such/proxy.yaml"]);
    assert!(
        missing.contains("no/such/proxy.yaml: cannot read"),
        "{missing}"
    );
}

/// `tollgate serve` on free ports, killed on drop.
fn serve_rls(dir: &TempDir, limits: &str) -> (ChildGuard, SocketAddr) {
    let file = dir.write("limits.yaml", limits);
    let LoggedChild { child, addr, .. } = LoggedChild::serve(&file, dir.0.join("serve.log"));
    (child, addr)
}

fn global_config(upstream: SocketAddr, rls: SocketAddr, deny: bool) -> String {
    format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nadmin: {{address: 127.0.0.1:0}}\nglobal_ratelimit:\n  domain: proxy-e2e\n  rate_limit_service: {{address: \"{rls}\"}}\n  timeout: 2s\n  failure_mode_deny: {deny}\n  enable_x_ratelimit_headers: DRAFT_VERSION_03\n  enable_retry_after_header: true\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{upstream}\"}}]\nroutes:\n  - name: api\n    cluster: backend\n    rate_limits:\n      - actions:\n          - generic_key: {{descriptor_value: proxy}}\n          - request_headers: {{header_name: x-user, descriptor_key: user}}\n"
    )
}

/// `tollgate proxy --config file`, logging to `name.log` in `dir`, with or without an admin listener to wait for.
fn proxy_with(dir: &TempDir, file: &Path, name: &str, admin: bool) -> LoggedChild {
    LoggedChild::proxy(
        &[
            "--config",
            file.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.0.join(format!("{name}.log")),
        admin,
    )
}

#[test]
fn the_global_limit_asks_tollgate_serve_and_follows_envoys_failure_modes() {
    let dir = TempDir::new("proxy-global");
    let upstream = Upstream::spawn();
    let (mut rls, rls_addr) = serve_rls(
        &dir,
        "domain: proxy-e2e\ndescriptors:\n  - key: generic_key\n    value: proxy\n    descriptors:\n      - key: user\n        rate_limit:\n          name: per-user\n          unit: hour\n          requests_per_unit: 2\n          algorithm: token_bucket\n",
    );
    let allow_file = dir.write("allow.yaml", &global_config(upstream.addr, rls_addr, false));
    let deny_file = dir.write("deny.yaml", &global_config(upstream.addr, rls_addr, true));
    let start = |file: &Path, name: &str| proxy_with(&dir, file, name, true);
    let allow = start(&allow_file, "allow");
    let deny = start(&deny_file, "deny");

    let alice: Vec<_> = (0..3)
        .map(|_| get(allow.addr, "/", &[("x-user", "alice")]))
        .collect();
    assert_eq!(
        alice.iter().map(|r| r.status).collect::<Vec<_>>(),
        [200, 200, 429],
        "{alice:#?}"
    );
    assert_eq!(alice[0].header("x-ratelimit-remaining"), Some("1"));
    assert!(
        alice[0]
            .header("x-ratelimit-limit")
            .is_some_and(|l| l.starts_with("2, 2;w=3600;name=\"per-user\"")),
        "{:?}",
        alice[0]
    );
    let limited = &alice[2];
    assert_eq!(limited.header("x-envoy-ratelimited"), Some("true"));
    assert_eq!(limited.header("x-ratelimit-remaining"), Some("0"));
    let retry: u64 = limited
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a retry-after on the 429");
    // Envoy's rule: the longest duration_until_reset of the OVER_LIMIT statuses
    // (for a token bucket, until it is full again).
    assert!((1..=3600).contains(&retry), "retry-after {retry}");
    // Without x-user the action drops the descriptor: no call, no limit.
    for _ in 0..4 {
        let r = get(allow.addr, "/", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-limit"), None);
    }

    rls.stop();
    let r = get(allow.addr, "/", &[("x-user", "bob")]);
    assert_eq!(
        r.status, 200,
        "failure_mode_deny false lets the request through: {r:?}"
    );
    let r = get(deny.addr, "/", &[("x-user", "bob")]);
    assert_eq!(
        r.status, 500,
        "failure_mode_deny true answers status_on_error: {r:?}"
    );
    assert_eq!(r.body, "");

    let admin = deny.admin.expect("an admin address");
    let metrics = get(admin, "/metrics", &[]).body;
    assert!(
        metrics.contains(
            "tollgate_proxy_rate_limit_service_denied_total{route=\"api\",cluster=\"backend\"} 1"
        ),
        "{metrics}"
    );
    let metrics = get(allow.admin.expect("an admin address"), "/metrics", &[]).body;
    assert!(
        metrics.contains(
            "tollgate_proxy_global_rate_limited_total{route=\"api\",cluster=\"backend\"} 1"
        ),
        "{metrics}"
    );
}

#[test]
fn a_request_costs_its_hits_addend_on_the_rate_limit_service() {
    let dir = TempDir::new("proxy-cost");
    // 10 per hour, counted down below: all in one hour's window.
    window::wait_clear_of_window_end(HOUR, Duration::from_secs(60));
    let upstream = Upstream::spawn();
    let (_rls, rls_addr) = serve_rls(
        &dir,
        "domain: proxy-e2e\ndescriptors:\n  - key: generic_key\n    value: proxy\n    descriptors:\n      - key: user\n        rate_limit: {name: per-user, unit: hour, requests_per_unit: 10}\n",
    );
    let config = global_config(upstream.addr, rls_addr, false).replace(
        "descriptor_key: user}\n",
        "descriptor_key: user}\n        hits_addend: {format: '%REQ(x-cost)%'}\n",
    );
    let proxy = proxy_with(&dir, &dir.write("cost.yaml", &config), "proxy", true);
    let send = |cost: Option<&str>| {
        let mut headers = vec![("x-user", "alice")];
        headers.extend(cost.map(|c| ("x-cost", c)));
        let r = get(proxy.addr, "/", &headers);
        (
            r.status,
            r.header("x-ratelimit-remaining").map(str::to_owned),
        )
    };
    assert_eq!(send(Some("4")), (200, Some("6".to_owned())));
    // No header: the default cost, 1.
    assert_eq!(send(None), (200, Some("5".to_owned())));
    // A header that is not a cost: 400 naming it, nothing charged.
    let bad = get(proxy.addr, "/", &[("x-user", "alice"), ("x-cost", "lots")]);
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(bad.body.contains("`x-cost` header"), "{}", bad.body);
    // Cost 0 checks without consuming: the 400 charged nothing.
    assert_eq!(send(Some("0")), (200, Some("5".to_owned())));
    assert_eq!(send(Some("6")).0, 429);
}

#[test]
fn a_cost_header_holds_one_cost_in_digits_or_the_request_is_refused() {
    let dir = TempDir::new("proxy-cost-strict");
    // 10 per hour for each of two users, counted down below: all in one hour's window.
    window::wait_clear_of_window_end(HOUR, Duration::from_secs(60));
    let upstream = Upstream::spawn();
    let (_rls, rls_addr) = serve_rls(
        &dir,
        "domain: proxy-e2e\ndescriptors:\n  - key: generic_key\n    value: proxy\n    descriptors:\n      - key: user\n        rate_limit: {name: per-user, unit: hour, requests_per_unit: 10}\n",
    );
    let with_cost = |hits_addend: &str| {
        global_config(upstream.addr, rls_addr, false).replace(
            "descriptor_key: user}\n",
            &format!("descriptor_key: user}}\n        hits_addend: {hits_addend}\n"),
        )
    };
    let strict = proxy_with(
        &dir,
        &dir.write("strict.yaml", &with_cost("{format: '%REQ(x-cost)%'}")),
        "strict",
        true,
    );
    let last = proxy_with(
        &dir,
        &dir.write(
            "last.yaml",
            &with_cost("{format: '%REQ(x-cost)%', repeated_header: last}"),
        ),
        "last",
        true,
    );
    let send = |proxy: &LoggedChild, user: &str, costs: &[&str]| {
        let mut headers = vec![("x-user", user)];
        headers.extend(costs.iter().map(|c| ("x-cost", *c)));
        get(proxy.addr, "/", &headers)
    };
    let remaining = |proxy: &LoggedChild, user: &str, cost: &str| {
        let r = send(proxy, user, &[cost]);
        assert_eq!(r.status, 200, "{r:?}");
        r.header("x-ratelimit-remaining").map(str::to_owned)
    };
    // A client's `x-cost: 0` ahead of the `x-cost: 5` a trusted hop appends:
    // a 400 naming the header, nothing charged.
    let twice = send(&strict, "alice", &["0", "5"]);
    assert_eq!(twice.status, 400, "{twice:?}");
    assert!(
        twice.body.contains("`x-cost` header came 2 times"),
        "{}",
        twice.body
    );
    // Anything but digits, and anything past 1 000 000 000: a 400 naming the header.
    for bad in [
        "+1",
        "-0",
        "1e3",
        "0x5",
        "1000000001",
        "18446744073709551617",
    ] {
        let r = send(&strict, "alice", &[bad]);
        assert_eq!(r.status, 400, "x-cost {bad:?}: {r:?}");
        assert!(r.body.contains("`x-cost` header"), "{}", r.body);
    }
    assert_eq!(
        remaining(&strict, "alice", "1"),
        Some("9".to_owned()),
        "the refused requests charged nothing"
    );
    // `repeated_header: last`: the trusted hop's appended value is charged.
    let r = send(&last, "bob", &["0", "5"]);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-ratelimit-remaining"), Some("5"));
    assert_eq!(send(&last, "bob", &["5", "+1"]).status, 400);
    assert_eq!(remaining(&last, "bob", "0"), Some("5".to_owned()));
}

#[test]
fn a_spoofed_forwarded_for_does_not_buy_a_fresh_bucket() {
    let dir = TempDir::new("proxy-xff");
    let upstream = Upstream::spawn();
    let config = dir.write(
        "proxy.yaml",
        &format!(
            "listeners: [{{address: 127.0.0.1:0}}]\nclusters: [{{name: backend, endpoints: [{{address: \"{}\"}}]}}]\nroutes:\n  - name: api\n    cluster: backend\n    rate_limits: [{{actions: [{{remote_address: {{}}}}]}}]\n    local_ratelimit:\n      stat_prefix: per_client\n      token_bucket: {{max_tokens: 100, tokens_per_fill: 100, fill_interval: 3600s}}\n      filter_enabled: {{default_value: {{numerator: 100}}}}\n      filter_enforced: {{default_value: {{numerator: 100}}}}\n      descriptors:\n        - entries: [{{key: remote_address}}]\n          token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}}\n",
            upstream.addr
        ),
    );
    let proxy = proxy_with(&dir, &config, "proxy", false);
    assert_eq!(
        get(proxy.addr, "/", &[("x-forwarded-for", "203.0.113.7")]).status,
        200
    );
    assert_eq!(
        get(proxy.addr, "/", &[("x-forwarded-for", "198.51.100.9")]).status,
        429
    );
    assert_eq!(get(proxy.addr, "/", &[]).status, 429);
}

#[test]
fn a_reload_applies_a_new_limit_and_a_bad_file_keeps_the_running_one() {
    let dir = TempDir::new("proxy-reload");
    let upstream = Upstream::spawn();
    let config = |max: u32, header: &str| {
        format!(
            "listeners: [{{address: 127.0.0.1:0}}]\nadmin: {{address: 127.0.0.1:0}}\nclusters: [{{name: backend, endpoints: [{{address: \"{}\"}}]}}]\nroutes:\n  - name: api\n    cluster: backend\n    local_ratelimit:\n      stat_prefix: r\n      token_bucket: {{max_tokens: {max}, tokens_per_fill: 1, fill_interval: 3600s}}\n      filter_enabled: {{default_value: {{numerator: 100}}}}\n      filter_enforced: {{default_value: {{numerator: 100}}}}\n      response_headers_to_add: [{{header: {{key: x-generation, value: '{header}'}}}}]\n",
            upstream.addr
        )
    };
    let file = dir.write("proxy.yaml", &config(1, "one"));
    let proxy = LoggedChild::proxy(
        &[
            "--config",
            file.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.0.join("proxy.log"),
        true,
    );
    assert_eq!(get(proxy.addr, "/", &[]).status, 200);
    let denied = get(proxy.addr, "/", &[]);
    assert_eq!(
        (denied.status, denied.header("x-generation")),
        (429, Some("one"))
    );

    // Replace the file by a rename, as editors and ConfigMaps do.
    let next = dir.write("proxy.yaml.next", &config(3, "two"));
    fs::rename(&next, &file).expect("the new config is renamed in");
    let mut reloaded = false;
    for _ in 0..200 {
        let r = get(proxy.addr, "/", &[]);
        if r.status == 200 {
            reloaded = true;
            break;
        }
        assert_eq!(r.status, 429);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        reloaded,
        "the new limit never applied; log:\n{}",
        log_tail(&proxy.log)
    );
    let admin = proxy.admin.expect("admin");
    // A broken file: the running config stays, the failure is counted.
    fs::write(&file, "listeners: [{address: 127.0.0.1:0}]\nroutes: 7\n").expect("written");
    let mut rejected = false;
    for _ in 0..200 {
        if get(admin, "/metrics", &[])
            .body
            .contains("tollgate_proxy_config_reloads_total{result=\"failure\"}")
        {
            rejected = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(rejected, "the bad file was not seen");
    let mut statuses = Vec::new();
    let mut generation = None;
    for _ in 0..3 {
        let r = get(proxy.addr, "/", &[]);
        statuses.push(r.status);
        if r.status == 429 {
            generation = r.header("x-generation").map(str::to_owned);
        }
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(generation.as_deref(), Some("two"));
    assert!(log_tail(&proxy.log).contains("configuration rejected"));
    assert_eq!(get(admin, "/healthz", &[]).status, 200);
    assert_eq!(get(admin, "/readyz", &[]).status, 200);
}

#[test]
fn keep_alive_connections_stream_through_and_a_dead_upstream_gets_a_503() {
    let dir = TempDir::new("proxy-upstream-down");
    let upstream = Upstream::spawn();
    let proxy = sidecar(
        &dir,
        "proxy",
        upstream.addr,
        &example("local-ratelimit-10tps.yaml"),
    );
    let connection = Connection::open(proxy.addr);
    for _ in 0..3 {
        let r = connection
            .send("GET", "/echo", &[("x-trace", "t1")])
            .expect("a response on the same connection");
        assert_eq!(r.status, 200);
        assert!(r.body.contains("x-trace: t1"), "{r:?}");
        assert!(r.body.contains("x-forwarded-for: 127.0.0.1"), "{r:?}");
    }
    let dead = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let orphan = sidecar(&dir, "orphan", dead, &example("local-ratelimit-10tps.yaml"));
    let r = get(orphan.addr, "/", &[]);
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.body.contains("upstream connect error"), "{r:?}");
}

#[test]
fn a_route_can_answer_with_the_ietf_fields_a_jittered_retry_after_and_a_problem_body() {
    let dir = TempDir::new("proxy-contract");
    let upstream = Upstream::spawn();
    let config = dir.write(
        "proxy.yaml",
        &format!(
            "listeners: [{{address: 127.0.0.1:0}}]\nclusters: [{{name: backend, endpoints: [{{address: \"{}\"}}]}}]\nroutes:\n  - name: api\n    cluster: backend\n    rate_limit_response: {{retry_after_jitter: 2s, ietf_headers: true, problem_json: true}}\n    local_ratelimit:\n      stat_prefix: c\n      token_bucket: {{max_tokens: 2, tokens_per_fill: 2, fill_interval: 7200s}}\n      filter_enabled: {{default_value: {{numerator: 100}}}}\n      filter_enforced: {{default_value: {{numerator: 100}}}}\n      enable_x_ratelimit_headers: DRAFT_VERSION_03\n      enable_retry_after_header: true\n",
            upstream.addr
        ),
    );
    let proxy = LoggedChild::proxy(
        &[
            "--config",
            config.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.0.join("proxy.log"),
        false,
    );
    let first = get(proxy.addr, "/", &[]);
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(get(proxy.addr, "/", &[]).status, 200);
    let denied = get(proxy.addr, "/", &[]);
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some("\"default\";q=2;w=7200")
    );
    assert_eq!(denied.header("ratelimit"), Some("\"default\";r=0;t=3600"));
    let retry: u64 = denied
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("retry-after");
    // Exact wait 3600 s (one token at 2 per 7200 s), jitter upward by at most 2 s.
    assert!((3600..=3602).contains(&retry), "retry-after {retry}");
    let body: serde_json::Value = serde_json::from_str(&denied.body).expect("a JSON body");
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["default"]));
}

/// Sends `GET path` on `stream` and reads the answer's head (within the stream's read timeout).
fn raw_get(stream: &mut std::net::TcpStream, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())?;
    let mut buf = [0_u8; 4096];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn past_max_connections_a_client_waits_until_one_closes_and_the_limit_is_logged() {
    let dir = TempDir::new("proxy-max-connections");
    let upstream = Upstream::spawn();
    let upstream_addr = upstream.addr.to_string();
    let mut command = tollgate_testkit::tollgate::tollgate(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream_addr,
        "--admin-addr",
        "127.0.0.1:0",
        "--log-level",
        "warn",
    ]);
    for (var, _) in std::env::vars() {
        if var.starts_with("TOLLGATE_PROXY_") {
            command.env_remove(var);
        }
    }
    command.env("TOLLGATE_PROXY_MAX_CONNECTIONS", "2");
    let log = dir.0.join("proxy.log");
    let proxy = LoggedChild::spawn(command, log.clone(), true);
    let connect = || {
        let stream = std::net::TcpStream::connect(proxy.addr).expect("connected");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a read timeout");
        stream
    };
    let mut first = connect();
    let mut second = connect();
    for stream in [&mut first, &mut second] {
        let head = raw_get(stream, "/").expect("an answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let mut third = connect();
    third
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("a read timeout");
    assert!(
        raw_get(&mut third, "/").is_err(),
        "a connection past --max-connections was served"
    );
    tollgate_testkit::budget::eventually("the limit is logged", Duration::from_secs(10), || {
        fs::read_to_string(&log).is_ok_and(|l| l.contains("connection limit reached"))
    });
    let admin = proxy.admin.expect("an admin listener");
    let metrics = get(admin, "/metrics", &[]).body;
    assert!(
        metrics.contains("tollgate_proxy_downstream_connections{listener=\"127.0.0.1:0\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_proxy_downstream_connections_limit{listener=\"127.0.0.1:0\"} 2"),
        "{metrics}"
    );
    drop(first);
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    let mut buf = [0_u8; 4096];
    let n = std::io::Read::read(&mut third, &mut buf).expect("served once one closed");
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// The value of `series` in a `/metrics` text.
fn metric(text: &str, series: &str) -> Option<i64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn limit_req_shows_its_keys_held_and_their_bound_on_metrics() {
    let dir = TempDir::new("proxy-limit-req-keys");
    let upstream = Upstream::spawn();
    let config = dir.write(
        "proxy.yaml",
        &format!(
            "listeners: [{{address: 127.0.0.1:0}}]\nadmin: {{address: 127.0.0.1:0}}\nclusters: [{{name: backend, endpoints: [{{address: \"{}\"}}]}}]\nroutes:\n  - name: api\n    cluster: backend\n    limit_req: {{rate: 1r/m, nodelay: true, key_header: x-key, max_keys: 64}}\n",
            upstream.addr
        ),
    );
    let proxy = proxy_with(&dir, &config, "proxy", true);
    let admin = proxy.admin.expect("an admin listener");
    let keys = "tollgate_proxy_limit_req_keys{route=\"api\",cluster=\"backend\"}";
    let limit = "tollgate_proxy_limit_req_keys_limit{route=\"api\",cluster=\"backend\"}";
    let send = |range: std::ops::Range<u32>| {
        for n in range {
            let key = format!("client-{n}");
            assert_eq!(get(proxy.addr, "/", &[("x-key", &key)]).status, 200);
        }
    };
    send(0..5);
    let text = get(admin, "/metrics", &[]).body;
    assert_eq!(metric(&text, keys), Some(5), "{text}");
    let bound = metric(&text, limit).expect("a keys limit");
    assert!(
        (1..=64).contains(&bound),
        "max_keys 64, table bound {bound}"
    );
    // A flood of one-off keys: the table holds no more than its bound.
    send(5..200);
    let text = get(admin, "/metrics", &[]).body;
    let held = metric(&text, keys).expect("keys held");
    assert!(held <= bound && held > 5, "{held} keys held, bound {bound}");
    assert_eq!(metric(&text, limit), Some(bound));
}
