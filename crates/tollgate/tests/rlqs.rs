//! Two real Envoys (1.40) with the rate limit quota filter of `examples/envoy/rlqs.yaml` sharing one global limit through `tollgate serve`: no call per request, the aggregate within the stated bound, shares following demand, deny-all and allow-all buckets, a service restart, Tollgate unreachable past the assignments' time to live (the fallback denies), RLS callers on the same budget, and two services on one Redis (one budget, split max-min between them).
//!
//! Envoy reports and is answered in real time (Envoy 1.40 reports every
//! 5 s whatever its `reporting_interval`), so the phases are bounded by
//! request counts and wall-clock deadlines, and every figure is compared
//! with the time it took. Shares following demand, max-min, are the
//! phases of `two_envoys_follow_max_min_fair_shares_through_demand_flips_and_a_death`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::{Clock, MonotonicClock};

use tollgate_testkit::bootstrap::{Bootstrap, repository_file};
use tollgate_testkit::envoy::{Envoy, envoy_binary};
use tollgate_testkit::http::try_get;
use tollgate_testkit::ports::free_port;
use tollgate_testkit::process::log_tail;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::LoggedChild;
use tollgate_testkit::upstream::Upstream;

#[path = "rlqs/phases.rs"]
mod phases;

use phases::{Seconds, paced, print_table};

/// The tests' clock (real time: Envoy runs in it).
static CLOCK: LazyLock<MonotonicClock> = LazyLock::new(MonotonicClock::new);

/// The per-tenant rate of `examples/envoy/limits/quota.yaml`, per second.
const RATE: u64 = 20;

/// Starts an Envoy on `examples/envoy/rlqs.yaml` in front of `upstream`, asking `tollgate`.
fn start_envoy(dir: &Path, name: &str, upstream: SocketAddr, tollgate: SocketAddr) -> (Envoy, u16) {
    let (admin, port) = (free_port(), free_port());
    let mut bootstrap = Bootstrap::example("examples/envoy/rlqs.yaml");
    bootstrap
        .set_admin_port(admin)
        .set_cluster_port("backend", upstream.port())
        .set_cluster_port("tollgate", tollgate.port())
        .set_listener("ingress", port);
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).expect("a directory per Envoy");
    (
        Envoy::start(&envoy_binary(), &dir, &bootstrap.text(), admin),
        port,
    )
}

/// Admitted and refused requests through one Envoy.
#[derive(Default)]
struct Tally {
    admitted: AtomicU64,
    limited: AtomicU64,
}

/// One request for `tenant` through the Envoy on `port`; counted in `tally`.
fn request(port: u16, tenant: &str, tally: &Tally) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let response = try_get(addr, "/", &[("x-tenant", tenant)]).expect("Envoy answers");
    match response.status {
        200 => tally.admitted.fetch_add(1, Ordering::Relaxed),
        429 => tally.limited.fetch_add(1, Ordering::Relaxed),
        other => panic!("unexpected status {other}: {response:#?}"),
    };
}

/// Sends `tenant`'s requests through both Envoys, `weights` of them each
/// round (a round goes to the first, then the second), from two threads,
/// until `budget` has passed (at most 20 000 rounds); the tallies and the time taken.
fn drive(
    ports: [u16; 2],
    tenant: &str,
    weights: [u32; 2],
    budget: Duration,
) -> ([Tally; 2], Duration) {
    let tallies = Arc::new([Tally::default(), Tally::default()]);
    let start = CLOCK.now();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            let tallies = Arc::clone(&tallies);
            scope.spawn(move || {
                for _ in 0..20_000 {
                    if CLOCK.now().saturating_since(start) >= budget {
                        break;
                    }
                    for (i, port) in ports.iter().enumerate() {
                        for _ in 0..weights[i] {
                            request(*port, tenant, &tallies[i]);
                        }
                    }
                }
            });
        }
    });
    let elapsed = CLOCK.now().saturating_since(start);
    (
        Arc::into_inner(tallies).expect("the threads ended"),
        elapsed,
    )
}

fn admitted(tallies: &[Tally; 2]) -> [u64; 2] {
    [0, 1].map(|i| tallies[i].admitted.load(Ordering::Relaxed))
}

/// The stated bound on what a fleet admits above `rate × t`: one second of
/// the rate (the token buckets' capacities sum to at most the rate) and
/// one more for while a share moves between Envoys (nothing goes through
/// before a bucket's first assignment: the example's fallback is `DENY_ALL`).
fn bound(t: Duration) -> u64 {
    bound_at(RATE, t)
}

/// [`bound`] for a rate of `rate` per second.
fn bound_at(rate: u64, t: Duration) -> u64 {
    (rate as f64 * t.as_secs_f64()).ceil() as u64 + 2 * rate
}

/// The per-second rate of the `slow*` tenants of the second test: low
/// enough that even a slow machine's requests go over it.
/// Asserts that `admitted` in `took` through `services` instances of
/// `tollgate serve` is within the bound at [`RATE`] (each further instance's
/// Envoys may hold up to a window of the rate in their buckets) and at least
/// half the rate once the first two seconds (assignments settling) are
/// past; `logs` tells why not.
fn assert_bounded_and_fed(admitted: u64, took: Duration, services: u64, logs: &dyn Fn() -> String) {
    let bound = bound(took) + (services - 1) * RATE;
    assert!(
        admitted <= bound,
        "{admitted} admitted in {took:?}, over the bound {bound}; {}",
        logs()
    );
    assert!(
        admitted as f64 >= RATE as f64 * (took.as_secs_f64() - 2.0) * 0.5,
        "{admitted} admitted in {took:?}: the fleet is starved; {}",
        logs()
    );
}

const SLOW: u64 = 1;

#[test]
fn two_envoys_share_one_limit_through_rlqs() {
    let dir = TempDir::new("rlqs-e2e");
    let upstream = Upstream::spawn();
    let tollgate = LoggedChild::serve(
        &repository_file("examples/envoy/limits"),
        dir.0.join("tollgate.log"),
    );
    let (first, first_port) = start_envoy(&dir.0, "first", upstream.addr, tollgate.addr);
    let (second, second_port) = start_envoy(&dir.0, "second", upstream.addr, tollgate.addr);
    let ports = [first_port, second_port];
    let logs = || {
        format!(
            "tollgate:\n{}\nfirst envoy:\n{}\nsecond envoy:\n{}",
            log_tail(&tollgate.log),
            log_tail(&first.log),
            log_tail(&second.log)
        )
    };

    // Even demand: the pair together stays within the rate and uses it.
    let (tallies, took) = drive(ports, "even", [1, 1], Duration::from_secs(4));
    let [a, b] = admitted(&tallies);
    let limited: u64 = tallies
        .iter()
        .map(|t| t.limited.load(Ordering::Relaxed))
        .sum();
    eprintln!(
        "even demand: {a} + {b} admitted, {limited} limited in {took:?} (rate × t = {:.0})",
        RATE as f64 * took.as_secs_f64()
    );
    assert!(limited > 0, "demand above the rate is limited; {}", logs());
    assert_bounded_and_fed(a + b, took, 1, &logs);
}

/// `tollgate serve` of `limits` with its gRPC listener on `grpc_port` (0: any).
fn serve_on(limits: &Path, grpc_port: u16, log: std::path::PathBuf) -> LoggedChild {
    serve_with(limits, grpc_port, 0, &[], log)
}

/// `tollgate serve` on `limits` with these ports (0: any) and `extra` flags.
fn serve_with(
    limits: &Path,
    grpc_port: u16,
    http_port: u16,
    extra: &[&str],
    log: std::path::PathBuf,
) -> LoggedChild {
    let mut command = tollgate_testkit::tollgate::tollgate(&["serve", "--config"]);
    command
        .arg(limits)
        .args([
            "--grpc-addr",
            &format!("127.0.0.1:{grpc_port}"),
            "--http-addr",
            &format!("127.0.0.1:{http_port}"),
            "--log-level",
            "warn",
        ])
        .args(extra);
    LoggedChild::spawn(command, log, false)
}

#[test]
fn deny_all_and_allow_all_buckets_and_a_service_restart_keep_the_limit() {
    let dir = TempDir::new("rlqs-rules");
    let limits = dir.0.join("limits");
    std::fs::create_dir_all(&limits).expect("a limits directory");
    std::fs::write(
        limits.join("quota.yaml"),
        format!(
            "domain: quota\ndescriptors:\n  - key: name\n    value: api\n    descriptors:\n      - key: tenant\n        value: blocked\n        rate_limit: {{unit: second, requests_per_unit: 0}}\n      - key: tenant\n        value: open\n        rate_limit: {{unlimited: true}}\n      - key: tenant\n        value: slow*\n        rate_limit: {{unit: second, requests_per_unit: {SLOW}}}\n      - key: tenant\n        rate_limit: {{unit: second, requests_per_unit: {RATE}}}\n"
        ),
    )
    .expect("the limits file is written");
    let upstream = Upstream::spawn();
    let mut tollgate = serve_on(&limits, 0, dir.0.join("tollgate.log"));
    // The restarted service binds the same port: the one Envoy's cluster names.
    let grpc_port = tollgate.addr.port();
    let (envoy, port) = start_envoy(&dir.0, "envoy", upstream.addr, tollgate.addr);
    let logs = |tollgate: &LoggedChild| {
        format!(
            "tollgate:\n{}\nenvoy:\n{}",
            log_tail(&tollgate.log),
            log_tail(&envoy.log)
        )
    };
    let tally = Tally::default();

    // A bucket whose rule allows 0: denied from its first request on (the
    // example's `DENY_ALL` fallback until the first assignment, then the rule).
    let deadline = CLOCK.now().saturating_add(Duration::from_secs(5));
    while tally.limited.load(Ordering::Relaxed) == 0 && CLOCK.now() < deadline {
        request(port, "blocked", &tally);
    }
    assert!(
        tally.limited.load(Ordering::Relaxed) > 0,
        "never denied; {}",
        logs(&tollgate)
    );
    let before = tally.admitted.load(Ordering::Relaxed);
    for _ in 0..20 {
        request(port, "blocked", &tally);
    }
    assert_eq!(
        tally.admitted.load(Ordering::Relaxed),
        before,
        "deny-all holds; {}",
        logs(&tollgate)
    );

    // An unlimited bucket: once its first assignment is in (denied before
    // it, the example's fallback), everything passes, while a limited one
    // asked at the same pace in the same time is limited.
    let first = Tally::default();
    let deadline = CLOCK.now().saturating_add(Duration::from_secs(5));
    while first.admitted.load(Ordering::Relaxed) == 0 && CLOCK.now() < deadline {
        request(port, "open", &first);
    }
    let (open, compare) = (Tally::default(), Tally::default());
    for _ in 0..200 {
        request(port, "open", &open);
        request(port, "slow-compare", &compare);
    }
    assert_eq!(
        open.limited.load(Ordering::Relaxed),
        0,
        "allow-all holds; {}",
        logs(&tollgate)
    );
    assert_eq!(open.admitted.load(Ordering::Relaxed), 200);
    assert!(
        compare.limited.load(Ordering::Relaxed) > 0,
        "the same pace is over a limit"
    );

    // A limited bucket, then the service stopped: Envoy keeps the last
    // assignment until its time to live (30 s), so the limit holds.
    let _ = drive([port, port], "slow-steady", [1, 0], Duration::from_secs(2));
    tollgate.child.stop();
    let (tallies, took) = drive([port, port], "slow-steady", [1, 0], Duration::from_secs(2));
    let [a, _] = admitted(&tallies);
    eprintln!("service stopped: {a} admitted in {took:?}");
    assert!(
        tallies[0].limited.load(Ordering::Relaxed) > 0,
        "still limited with the service stopped"
    );
    assert!(
        a <= bound_at(SLOW, took),
        "{a} admitted in {took:?} with the service stopped"
    );

    // Restarted on the same port: Envoy reopens its stream at a report
    // tick once its connection retries reach the new process (seconds),
    // then a new bucket gets its assignment from it: denied until then
    // (the example's `DENY_ALL` fallback), admitted only by an assignment.
    tollgate = serve_on(&limits, grpc_port, dir.0.join("tollgate-2.log"));
    let reopened = Tally::default();
    let deadline = CLOCK.now().saturating_add(Duration::from_secs(20));
    while reopened.admitted.load(Ordering::Relaxed) == 0 && CLOCK.now() < deadline {
        request(port, "slow-restart", &reopened);
    }
    assert!(
        reopened.admitted.load(Ordering::Relaxed) > 0,
        "no assignment from the restarted service; {}",
        logs(&tollgate)
    );
    let (tallies, took) = drive([port, port], "slow-restart", [1, 0], Duration::from_secs(3));
    let [a, _] = admitted(&tallies);
    eprintln!("after the restart: {a} admitted in {took:?}");
    assert!(
        a <= bound_at(SLOW, took),
        "{a} admitted in {took:?} after the restart; {}",
        logs(&tollgate)
    );
}

/// One RLS check of `tenant` on serve's HTTP port (`/json`, upstream's form), counted in `tally`.
fn rls_check(http_port: u16, tenant: &str, tally: &Tally) {
    let body = format!(
        r#"{{"domain":"quota","descriptors":[{{"entries":[{{"key":"name","value":"api"}},{{"key":"tenant","value":"{tenant}"}}]}}]}}"#
    );
    let response = tollgate_testkit::http::exchange(
        &format!("127.0.0.1:{http_port}"),
        "POST",
        "/json",
        &[("content-type", "application/json")],
        &body,
    );
    match response.status {
        200 => tally.admitted.fetch_add(1, Ordering::Relaxed),
        429 => tally.limited.fetch_add(1, Ordering::Relaxed),
        other => panic!("unexpected RLS status {other}: {response:#?}"),
    };
}

/// Requests for the tenant `mixed` through the Envoy on `port` and RLS
/// checks of it on serve's `http_port`, interleaved on two threads for
/// `budget`: the Envoy's tally, the RLS callers', and the time it took.
fn drive_mixed(port: u16, http_port: u16, budget: Duration) -> ([Tally; 2], Duration) {
    let tallies = [Tally::default(), Tally::default()];
    let start = CLOCK.now();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..20_000 {
                    if CLOCK.now().saturating_since(start) >= budget {
                        break;
                    }
                    request(port, "mixed", &tallies[0]);
                    rls_check(http_port, "mixed", &tallies[1]);
                }
            });
        }
    });
    (tallies, CLOCK.now().saturating_since(start))
}

#[test]
fn rls_callers_and_envoys_on_rlqs_spend_one_budget() {
    let dir = TempDir::new("rlqs-with-rls");
    let upstream = Upstream::spawn();
    let mut tollgate = serve_with(
        &repository_file("examples/envoy/limits"),
        0,
        0,
        &[],
        dir.0.join("tollgate.log"),
    );
    let http_port = tollgate.listener("http").port();
    let (envoy, port) = start_envoy(&dir.0, "envoy", upstream.addr, tollgate.addr);
    // A first phase gives the bucket its first assignment (the requests
    // before it are denied: the example's `no_assignment_behavior`).
    let _ = drive_mixed(port, http_port, Duration::from_secs(2));
    let ([through_envoy, through_rls], took) = drive_mixed(port, http_port, Duration::from_secs(4));
    let (a, b) = (
        through_envoy.admitted.load(Ordering::Relaxed),
        through_rls.admitted.load(Ordering::Relaxed),
    );
    eprintln!(
        "Envoy {a} + RLS {b} admitted in {took:?} (rate × t = {:.0})",
        RATE as f64 * took.as_secs_f64()
    );
    let logs = || {
        format!(
            "tollgate:\n{}\nenvoy:\n{}",
            log_tail(&tollgate.log),
            log_tail(&envoy.log)
        )
    };
    assert!(
        a + b <= bound(took),
        "Envoy {a} + RLS {b} admitted in {took:?}, over the bound {}; {}",
        bound(took),
        logs()
    );
    // What the Envoy's share holds is spent: the budget is not lost between them.
    assert!(
        (a + b) as f64 >= RATE as f64 * (took.as_secs_f64() - 1.0) * 0.5,
        "Envoy {a} + RLS {b} admitted in {took:?}: the limit is starved; {}",
        logs()
    );
}

#[test]
fn two_services_on_one_redis_hand_their_envoys_one_budget() {
    let redis = tollgate_testkit::redis::RedisServer::start();
    let dir = TempDir::new("rlqs-two-services");
    let upstream = Upstream::spawn();
    let store = redis.url();
    let limits = repository_file("examples/envoy/limits");
    let services = [0, 1].map(|i| {
        serve_with(
            &limits,
            0,
            0,
            &["--store", &store, "--store-timeout", "1s"],
            dir.0.join(format!("tollgate-{i}.log")),
        )
    });
    let (first, first_port) = start_envoy(&dir.0, "first", upstream.addr, services[0].addr);
    let (second, second_port) = start_envoy(&dir.0, "second", upstream.addr, services[1].addr);
    let logs = || {
        format!(
            "tollgate 0:\n{}\ntollgate 1:\n{}\nfirst envoy:\n{}\nsecond envoy:\n{}",
            log_tail(&services[0].log),
            log_tail(&services[1].log),
            log_tail(&first.log),
            log_tail(&second.log)
        )
    };
    // As above: a first phase for the first assignments.
    let _ = drive(
        [first_port, second_port],
        "fleet",
        [1, 1],
        Duration::from_secs(2),
    );
    let (tallies, took) = drive(
        [first_port, second_port],
        "fleet",
        [1, 1],
        Duration::from_secs(4),
    );
    let [a, b] = admitted(&tallies);
    eprintln!("two services, one Redis: {a} + {b} admitted in {took:?}");
    assert_bounded_and_fed(a + b, took, 2, &logs);
}

/// How long the kill test's assignments live, and the seconds after the
/// kill left out (the time to live and a margin for the last renewal in flight).
const KILL_TTL: &str = "2s";
const KILL_SETTLE: usize = 3;

/// `tollgate serve` killed with `--rlqs-assignment-ttl 2s`: once the
/// assignment has lapsed, Envoy 1.40 holds the bucket to
/// `no_assignment_behavior`'s fallback (not `reuse_last_assignment`). The
/// example's `DENY_ALL` admits nothing then, while 60 a second are asked,
/// and Envoy keeps answering (429). With `ALLOW_ALL` all 60 a second went
/// through: the limit switched off; with a `token_bucket` fallback Envoy
/// 1.40 crashed at the time to live.
#[test]
fn tollgate_unreachable_past_the_ttl_leaves_envoy_to_the_fallback() {
    let dir = TempDir::new("rlqs-unreachable");
    let upstream = Upstream::spawn();
    let mut tollgate = serve_with(
        &repository_file("examples/envoy/limits"),
        0,
        0,
        &["--rlqs-assignment-ttl", KILL_TTL],
        dir.0.join("tollgate.log"),
    );
    let (envoy, port) = start_envoy(&dir.0, "envoy", upstream.addr, tollgate.addr);
    let logs = || format!("envoy:\n{}", log_tail(&envoy.log));
    const DEMAND: u64 = 60;

    // Reachable: the bucket gets its assignments and the rate is admitted.
    let reachable = Seconds::new(4);
    paced(
        [port, port],
        "unreachable",
        [DEMAND, 0],
        Duration::from_secs(4),
        &reachable,
    );
    print_table("reachable (60/s)", &reachable);
    assert!(
        reachable.mean(0..4, Some(0)) > 0.0,
        "nothing admitted with Tollgate reachable; {}",
        logs()
    );

    // Killed: past the time to live, the fallback alone (every request is
    // answered: `request` panics on anything but 200 or 429).
    tollgate.child.stop();
    let n = 10;
    let killed = Seconds::new(n);
    paced(
        [port, port],
        "unreachable",
        [DEMAND, 0],
        Duration::from_secs(n as u64),
        &killed,
    );
    print_table("tollgate killed (60/s)", &killed);
    let past = KILL_SETTLE..n;
    let total: u64 = past.clone().map(|s| killed.get(s, 0)).sum();
    eprintln!("tollgate killed: {total} admitted in seconds {past:?} (the example's fallback)");
    assert_eq!(
        total,
        0,
        "{total} admitted in seconds {past:?} after the kill: the limit switched off; {}",
        logs()
    );
}
