//! Every Envoy configuration the repository ships runs in a real Envoy 1.40
//! against Tollgate: `examples/envoy/local.yaml` (and the same filter in
//! `tollgate proxy`), `examples/envoy/both.yaml`, the filter and route
//! actions inside `deploy/istio/global/ratelimit.yaml` (taken out of the
//! EnvoyFilters and put into the global example's listener), the rate
//! limit quota filter of `deploy/istio/rlqs/quota.yaml` (in the RLQS
//! example's listener), and the per-pod Istio filters of `examples/istio/`.
//! `examples/envoy/global.yaml` is run by `tests/envoy.rs`,
//! `examples/envoy/rlqs.yaml` by `tests/rlqs.rs`. The limits ConfigMap of `deploy/kubernetes`
//! is `examples/limits` and validates.
//!
//! Everything listens on 127.0.0.1; every wait and loop is bounded.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tollgate_testkit::bootstrap::{Bootstrap, repository_file, yaml_documents};
use tollgate_testkit::budget::Stopwatch;
use tollgate_testkit::envoy::{Envoy, envoy_binary};
use tollgate_testkit::http::{Response, try_get};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::process::log_tail;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{LoggedChild, tollgate};
use tollgate_testkit::upstream::Upstream;

/// Starts Envoy on `bootstrap` with a free admin port and `ingress` on a free port; that port.
fn start(bootstrap: &mut Bootstrap, dir: &Path, upstream: SocketAddr) -> (Envoy, SocketAddr) {
    let (admin, port) = (free_port(), free_port());
    bootstrap
        .set_admin_port(admin)
        .set_cluster_port("backend", upstream.port())
        .set_listener("ingress", port);
    let envoy = Envoy::start(&envoy_binary(), dir, &bootstrap.text(), admin);
    (envoy, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn get(envoy: &Envoy, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    try_get(addr, path, headers).unwrap_or_else(|error| {
        panic!(
            "GET {path} via {addr} failed: {error}; envoy log:\n{}",
            log_tail(&envoy.log)
        )
    })
}

/// Sends requests until the first refused one (at most `bound`): how many
/// passed, the refusal, and how long since `clock` started.
fn until_refused(
    bound: usize,
    clock: Stopwatch,
    mut send: impl FnMut(usize) -> Response,
) -> (usize, Response, Duration) {
    for i in 0..bound {
        let reply = send(i);
        if reply.status == 429 {
            return (i, reply, clock.elapsed());
        }
        assert_eq!(reply.status, 200, "request {}: {reply:#?}", i + 1);
    }
    panic!("no 429 in {bound} requests");
}

/// Asserts that `passed` is what a bucket of `tokens` refilled with `tokens`
/// per `interval` admits in `elapsed`: Envoy refills continuously, so one
/// more token per `interval / tokens` of the test (plus one for rounding).
fn assert_bucket(passed: usize, tokens: usize, interval: Duration, elapsed: Duration) {
    let refilled = (elapsed.as_secs_f64() / interval.as_secs_f64() * tokens as f64) as usize;
    assert!(
        (tokens..=tokens + refilled + 1).contains(&passed),
        "{passed} passed in {elapsed:?}; a bucket of {tokens} per {interval:?} admits {tokens} to {}",
        tokens + refilled + 1
    );
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn the_local_example_admits_100_a_minute_in_envoy_and_in_tollgate_proxy() {
    let dir = TempDir::new("example-local");
    let upstream = Upstream::spawn();
    let mut bootstrap = Bootstrap::example("examples/envoy/local.yaml");
    let filter = bootstrap
        .http_filter("ingress", "envoy.filters.http.local_ratelimit")
        .clone();
    let clock = Stopwatch::start();
    let (envoy, addr) = start(&mut bootstrap, dir.path(), upstream.addr);
    let (passed, limited, elapsed) = until_refused(200, clock, |_| get(&envoy, addr, "/", &[]));
    assert_bucket(passed, 100, MINUTE, elapsed);
    assert_eq!(
        limited.header("x-local-rate-limit"),
        Some("true"),
        "{limited:#?}"
    );
    assert_eq!(limited.body, "local_rate_limited");

    // The same LocalRateLimit fields in tollgate proxy.
    let file = dir.write("local.yaml", &filter.to_string());
    let clock = Stopwatch::start();
    let proxy = LoggedChild::proxy(
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream.addr.to_string(),
            "--local-ratelimit",
            file.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.0.join("proxy.log"),
        false,
    );
    let (passed, limited, elapsed) = until_refused(200, clock, |_| {
        tollgate_testkit::http::get(proxy.addr, "/", &[])
    });
    assert_bucket(passed, 100, MINUTE, elapsed);
    assert_eq!(
        limited.header("x-local-rate-limit"),
        Some("true"),
        "{limited:#?}"
    );
}

#[test]
fn the_both_example_limits_each_user_globally_and_the_envoy_locally() {
    let dir = TempDir::new("example-both");
    let upstream = Upstream::spawn();
    let tollgate = LoggedChild::serve(
        &repository_file("examples/envoy/limits"),
        dir.0.join("tollgate.log"),
    );
    let mut bootstrap = Bootstrap::example("examples/envoy/both.yaml");
    bootstrap.set_cluster_port("tollgate", tollgate.addr.port());
    let clock = Stopwatch::start();
    let (envoy, addr) = start(&mut bootstrap, dir.path(), upstream.addr);

    // Per user, 3 a minute (Tollgate); a minute boundary inside the four
    // requests restarts the count, so then once more with another user.
    let mut sent = 0;
    let mut global = None;
    for attempt in 0..3 {
        let user = format!("user-{attempt}");
        let replies: Vec<Response> = (0..4)
            .map(|_| get(&envoy, addr, "/", &[("x-user", user.as_str())]))
            .collect();
        sent += 4;
        if replies.iter().map(|r| r.status).collect::<Vec<_>>() == [200, 200, 200, 429] {
            global = replies.into_iter().last();
            break;
        }
    }
    let global = global.expect("four requests of one user within one minute window");
    assert_eq!(
        global.header("x-envoy-ratelimited"),
        Some("true"),
        "{global:#?}"
    );
    assert_eq!(global.header("x-local-rate-limit"), None, "{global:#?}");

    // Envoy's own bucket: 20 a minute, whoever asks; the requests Tollgate
    // refused took their token too.
    let (passed, local, elapsed) = until_refused(60, clock, |i| {
        let user = format!("other-{i}");
        get(&envoy, addr, "/", &[("x-user", user.as_str())])
    });
    assert_bucket(sent + passed, 20, MINUTE, elapsed);
    assert_eq!(
        local.header("x-local-rate-limit"),
        Some("true"),
        "{local:#?}"
    );
    assert_eq!(local.header("x-envoy-ratelimited"), None, "{local:#?}");
}

/// The limits of `deploy/kubernetes/configmap-limits.yaml`, written as files into `dir`.
fn configmap_limits(dir: &Path) -> std::path::PathBuf {
    let documents = yaml_documents("deploy/kubernetes/configmap-limits.yaml");
    let limits = dir.join("limits");
    std::fs::create_dir_all(&limits).expect("created");
    let data = documents[0]["data"].as_object().expect("ConfigMap data");
    for (name, text) in data {
        std::fs::write(limits.join(name), text.as_str().expect("text")).expect("written");
    }
    limits
}

#[test]
fn the_limits_configmap_is_examples_limits_and_validates() {
    let dir = TempDir::new("example-configmap");
    let limits = configmap_limits(dir.path());
    let shipped = std::fs::read_to_string(repository_file("examples/limits/example.yaml"))
        .expect("examples/limits/example.yaml");
    let in_configmap = std::fs::read_to_string(limits.join("example.yaml"))
        .expect("the ConfigMap holds example.yaml");
    assert_eq!(
        in_configmap, shipped,
        "the ConfigMap drifted from examples/limits"
    );
    let output = tollgate(&["validate"])
        .arg(&limits)
        .output()
        .expect("tollgate validate runs");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `value` of the EnvoyFilter patch applied to `apply_to` among `documents`.
fn patch_value<'a>(documents: &'a [Value], apply_to: &str) -> &'a Value {
    documents
        .iter()
        .flat_map(|document| {
            assert_eq!(document["kind"], "EnvoyFilter", "{document}");
            document["spec"]["configPatches"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .find(|patch| patch["applyTo"] == apply_to)
        .map(|patch| &patch["patch"]["value"])
        .unwrap_or_else(|| panic!("no {apply_to} patch"))
}

#[test]
fn the_istio_global_example_runs_in_envoy_against_tollgate() {
    let dir = TempDir::new("example-istio-global");
    let upstream = Upstream::spawn();
    let tollgate = LoggedChild::serve(&configmap_limits(dir.path()), dir.0.join("tollgate.log"));

    let documents = yaml_documents("deploy/istio/global/ratelimit.yaml");
    let filter = patch_value(&documents, "HTTP_FILTER");
    assert_eq!(filter["name"], "envoy.filters.http.ratelimit");
    let typed_config = filter["typed_config"].clone();
    let rls_cluster =
        typed_config["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]
            .as_str()
            .expect("the RLS cluster")
            .to_owned();
    let rate_limits = patch_value(&documents, "VIRTUAL_HOST")["rate_limits"].clone();

    // The global example's listener, with the EnvoyFilters' filter and
    // virtual host actions in place of its own, and the RLS cluster under
    // Istio's name. Client addresses come from X-Forwarded-For, so each
    // attempt below is a fresh client.
    let mut bootstrap = Bootstrap::example("examples/envoy/global.yaml");
    bootstrap.set_cluster_port("tollgate", tollgate.addr.port());
    let cluster = bootstrap.cluster("tollgate");
    cluster["name"] = rls_cluster.clone().into();
    cluster["load_assignment"]["cluster_name"] = rls_cluster.into();
    *bootstrap.http_filter("ingress", "envoy.filters.http.ratelimit") = typed_config;
    let manager = bootstrap.connection_manager("ingress");
    manager["use_remote_address"] = false.into();
    manager["xff_num_trusted_hops"] = 0.into();
    let host = &mut manager["route_config"]["virtual_hosts"][0];
    host["routes"][0]["route"]
        .as_object_mut()
        .expect("a route")
        .remove("rate_limits");
    host["rate_limits"] = rate_limits;
    let (envoy, addr) = start(&mut bootstrap, dir.path(), upstream.addr);

    // remote_address: 5 a minute per client. A minute boundary inside one
    // attempt restarts the count: then once more as another client.
    let mut expected = vec![200; 5];
    expected.push(429);
    let mut last = Vec::new();
    for attempt in 1..=3 {
        let client = format!("10.0.0.{attempt}");
        let replies: Vec<Response> = (0..6)
            .map(|_| {
                get(
                    &envoy,
                    addr,
                    "/anything",
                    &[("x-forwarded-for", client.as_str())],
                )
            })
            .collect();
        last = replies.iter().map(|r| r.status).collect();
        if last == expected {
            let limited = &replies[5];
            assert_eq!(limited.header("x-envoy-ratelimited"), Some("true"));
            assert!(
                limited
                    .header("x-ratelimit-limit")
                    .is_some_and(|v| v.starts_with("5, 5;w=60")),
                "{limited:#?}"
            );
            return;
        }
    }
    panic!(
        "statuses {last:?}, expected {expected:?}; tollgate log:\n{}\nenvoy log:\n{}",
        log_tail(&tollgate.log),
        log_tail(&envoy.log)
    );
}

#[test]
fn the_istio_local_examples_run_in_envoy() {
    for (file, per_second) in [
        ("examples/istio/local-ratelimit-3tps.yaml", 3),
        ("examples/istio/local-ratelimit-10tps.yaml", 10),
    ] {
        let dir = TempDir::new("example-istio-local");
        let upstream = Upstream::spawn();
        let documents = yaml_documents(file);
        let filter = patch_value(&documents, "HTTP_FILTER");
        assert_eq!(filter["name"], "envoy.filters.http.local_ratelimit");
        let mut bootstrap = Bootstrap::example("examples/envoy/local.yaml");
        *bootstrap.http_filter("ingress", "envoy.filters.http.local_ratelimit") =
            filter["typed_config"].clone();
        let (envoy, addr) = start(&mut bootstrap, dir.path(), upstream.addr);

        // The bucket starts full; within one second at most two fills pass.
        let mut refused = None;
        for _ in 0..3 {
            let clock = Stopwatch::start();
            let replies: Vec<Response> = (0..3 * per_second + 1)
                .map(|_| get(&envoy, addr, "/", &[]))
                .collect();
            if clock.elapsed() < Duration::from_secs(1) {
                refused = replies.into_iter().find(|r| r.status == 429);
                break;
            }
        }
        let refused = refused.unwrap_or_else(|| panic!("{file}: no 429 within one second"));
        assert_eq!(refused.header("x-local-rate-limit"), Some("true"), "{file}");
    }
}

#[test]
fn the_istio_rlqs_example_runs_in_envoy_against_tollgate() {
    let dir = TempDir::new("example-istio-rlqs");
    let upstream = Upstream::spawn();
    let tollgate = LoggedChild::serve(&configmap_limits(dir.path()), dir.0.join("tollgate.log"));

    let documents = yaml_documents("deploy/istio/rlqs/quota.yaml");
    let filter = patch_value(&documents, "HTTP_FILTER");
    assert_eq!(filter["name"], "envoy.filters.http.rate_limit_quota");
    let typed_config = filter["typed_config"].clone();
    let cluster_name = typed_config["rlqs_server"]["envoy_grpc"]["cluster_name"]
        .as_str()
        .expect("the RLQS cluster")
        .to_owned();

    // The RLQS example's listener with the EnvoyFilter's filter, and the
    // tollgate cluster under Istio's name.
    let mut bootstrap = Bootstrap::example("examples/envoy/rlqs.yaml");
    bootstrap.set_cluster_port("tollgate", tollgate.addr.port());
    let cluster = bootstrap.cluster("tollgate");
    cluster["name"] = cluster_name.clone().into();
    cluster["load_assignment"]["cluster_name"] = cluster_name.into();
    *bootstrap.http_filter("ingress", "envoy.filters.http.rate_limit_quota") = typed_config;
    let (envoy, addr) = start(&mut bootstrap, dir.path(), upstream.addr);

    // path=/login: 3 a minute. The requests before the first assignment
    // are refused (DENY_ALL, about one round trip); then the pod's share,
    // all 3 while it is alone, and nothing more.
    let waiting = Stopwatch::start();
    let mut first = get(&envoy, addr, "/login", &[]);
    for _ in 0..500 {
        if first.status != 429 || waiting.elapsed() >= Duration::from_secs(10) {
            break;
        }
        first = get(&envoy, addr, "/login", &[]);
    }
    assert_eq!(
        first.status,
        200,
        "no assignment let /login through; tollgate log:\n{}\nenvoy log:\n{}",
        log_tail(&tollgate.log),
        log_tail(&envoy.log)
    );
    let (more, refused, _) =
        until_refused(50, Stopwatch::start(), |_| get(&envoy, addr, "/login", &[]));
    let passed = 1 + more;
    assert!(
        passed <= 3,
        "{passed} passed before the first 429 after the assignment; tollgate log:\n{}\nenvoy log:\n{}",
        log_tail(&tollgate.log),
        log_tail(&envoy.log)
    );
    assert_eq!(refused.status, 429);
    // Other paths match no bucket and pass.
    for _ in 0..10 {
        assert_eq!(get(&envoy, addr, "/other", &[]).status, 200);
    }
}
