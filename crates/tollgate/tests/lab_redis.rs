//! The simulator on a real Redis: the production Lua script at virtual time decides like the in-memory store.

use std::time::Duration;

use serde_json::Value;
use tollgate_core::{
    AnyAlgorithm, DelayMode, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket,
};
use tollgate_lab::{
    ArrivalSource, Counts, Lane, MemoryStores, RedisStores, RunError, Scenario, StoreFactory,
    Traffic,
};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_cluster::RedisCluster;
use tollgate_testkit::tollgate::Server;

/// Every algorithm at about 10 per second, and the leaky bucket as shaper and policer.
fn algorithms() -> Vec<(&'static str, AnyAlgorithm)> {
    let second = Duration::from_secs(1);
    vec![
        (
            "token_bucket",
            TokenBucket::new(10, 10, second).unwrap().into(),
        ),
        ("gcra", Gcra::new(10, second, 5).unwrap().into()),
        (
            "leaky_shaper",
            LeakyBucket::new(10, second, 4, DelayMode::Delay)
                .unwrap()
                .into(),
        ),
        (
            "leaky_policer",
            LeakyBucket::policer(10, second, 4).unwrap().into(),
        ),
        ("fixed_window", FixedWindow::new(10, second).unwrap().into()),
        (
            "sliding_window",
            SlidingWindow::new(10, second).unwrap().into(),
        ),
        ("sliding_log", SlidingLog::new(10, second).unwrap().into()),
    ]
}

/// Every algorithm side by side on `traffic` over 3 clients (a seeded spread), with one
/// fleet lane of 3 sidecars (3 per second each), reported every 500 ms.
fn scenario(traffic: Traffic, seed: u64) -> Scenario {
    let mut lanes: Vec<Lane> = algorithms()
        .into_iter()
        .map(|(label, algorithm)| Lane::global(label, algorithm))
        .collect();
    lanes.push(Lane::local(
        "token_bucket_fleet",
        TokenBucket::new(3, 3, Duration::from_secs(1)).unwrap(),
        3,
    ));
    Scenario {
        source: ArrivalSource::Profile(traffic),
        duration: Duration::from_secs(20),
        seed,
        cost: 1,
        // A start between whole seconds puts window edges inside the ticks.
        start: Timestamp::from_millis(1_700_000_000_250),
        clients: 3,
        state_client: 0,
        tick: Duration::from_millis(500),
        samples_per_tick: 0,
        lanes,
    }
}

/// Each tick's counts, lane by lane.
fn per_tick_counts(scenario: &Scenario, stores: &dyn StoreFactory) -> Vec<Vec<Counts>> {
    let mut ticks = Vec::new();
    scenario
        .run(stores, |tick| {
            ticks.push(tick.lanes.iter().map(|l| l.counts).collect());
        })
        .expect("the run completes");
    ticks
}

fn assert_same_decisions(scenario: &Scenario, redis: &RedisStores, what: &str) {
    let memory = per_tick_counts(scenario, &MemoryStores);
    let on_redis = per_tick_counts(scenario, redis);
    assert_eq!(memory.len(), 40);
    assert_eq!(memory.len(), on_redis.len());
    let labels: Vec<&str> = scenario.lanes.iter().map(|l| l.label.as_str()).collect();
    for (i, (m, r)) in memory.iter().zip(&on_redis).enumerate() {
        for (lane, (m, r)) in m.iter().zip(r).enumerate() {
            assert_eq!(m, r, "{what}: tick {i}, lane {}", labels[lane]);
        }
    }
    // The runs were worth comparing: every lane both admitted and rejected.
    for lane in 0..labels.len() {
        let admitted: u64 = memory.iter().map(|t| t[lane].admitted).sum();
        let rejected: u64 = memory.iter().map(|t| t[lane].rejected()).sum();
        assert!(admitted > 0 && rejected > 0, "{what}: {}", labels[lane]);
    }
}

#[test]
fn every_algorithm_decides_on_redis_as_in_memory_tick_by_tick() {
    let server = RedisServer::start();
    let redis = RedisStores::connect_blocking(&server.url()).expect("connects");
    // 40 req/s: arrivals every 25 ms, whole microseconds, over 3 seeded clients.
    for seed in [1, 7] {
        let steady = scenario(Traffic::steady(40.0).unwrap(), seed);
        assert_same_decisions(&steady, &redis, &format!("steady, seed {seed}"));
    }
    // The run's keys were deleted with its stores.
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");
}

#[test]
fn leased_lanes_decide_on_redis_as_in_memory_with_the_same_store_calls() {
    let server = RedisServer::start();
    let redis = RedisStores::connect_blocking(&server.url()).expect("connects");
    let second = Duration::from_secs(1);
    let lanes = vec![
        Lane::leased(
            "fixed_window leased",
            FixedWindow::new(100, second).unwrap(),
            4,
            second,
        ),
        Lane::leased(
            "token_bucket leased",
            TokenBucket::new(100, 100, second).unwrap(),
            4,
            second,
        ),
    ];
    // One busy key, 4 times over its limit: 8000 requests over 4 instances.
    let leased = Scenario {
        lanes,
        clients: 1,
        ..scenario(Traffic::steady(400.0).unwrap(), 3)
    };
    assert_same_decisions(&leased, &redis, "leased");
    let calls = |stores: &dyn StoreFactory| -> Vec<Option<u64>> {
        leased
            .run(stores, |_| {})
            .expect("the run completes")
            .lanes
            .iter()
            .map(|l| l.store_calls)
            .collect()
    };
    let in_memory = calls(&MemoryStores);
    assert_eq!(in_memory, calls(&redis));
    assert!(
        in_memory[0].unwrap() < 8000 / 5,
        "the fixed window's leases save calls: {in_memory:?} for 8000 requests"
    );
}

#[test]
fn decision_by_decision_the_outcomes_and_remaining_units_match() {
    let server = RedisServer::start();
    let redis = RedisStores::connect_blocking(&server.url()).expect("connects");
    // Observing every decision steps one round trip per decision (no pipelining).
    let mut scenario = scenario(Traffic::steady(40.0).unwrap(), 5);
    scenario.duration = Duration::from_secs(5);
    let decisions = |stores: &dyn StoreFactory| {
        let mut seen = Vec::new();
        scenario
            .run_with_decisions(
                stores,
                |_| {},
                |d| {
                    seen.push((
                        d.lane.to_owned(),
                        d.client,
                        d.sidecar,
                        d.record.outcome,
                        d.record.remaining,
                        d.record.delay_ns,
                    ));
                },
            )
            .expect("the run completes");
        seen
    };
    let memory = decisions(&MemoryStores);
    assert_eq!(memory.len(), 200 * scenario.lanes.len());
    assert_eq!(memory, decisions(&redis));
}

#[test]
fn schedules_and_fixed_windows_match_to_the_nanosecond_on_poisson_traffic() {
    let server = RedisServer::start();
    let redis = RedisStores::connect_blocking(&server.url()).expect("connects");
    // Poisson arrivals fall at any nanosecond: the script decides schedules at the
    // supplied nanosecond and windows at its microsecond, the same window as in memory.
    let mut poisson = scenario(Traffic::poisson(45.0).unwrap(), 3);
    poisson.lanes.retain(|l| {
        !matches!(
            l.algorithm,
            AnyAlgorithm::Word(tollgate_core::AnyWordAlgorithm::SlidingWindow(_))
                | AnyAlgorithm::SlidingLog(_)
        )
    });
    assert_same_decisions(&poisson, &redis, "poisson, seed 3");
}

#[test]
fn on_a_cluster_the_decisions_are_the_same() {
    let cluster = RedisCluster::start();
    let redis = RedisStores::connect_blocking(&cluster.url()).expect("connects");
    // On a cluster each call goes on its own (no pipeline across slots).
    let mut steady = scenario(Traffic::steady(40.0).unwrap(), 1);
    steady.duration = Duration::from_secs(5);
    let memory = per_tick_counts(&steady, &MemoryStores);
    assert_eq!(memory, per_tick_counts(&steady, &redis));
}

#[test]
fn a_runs_keys_are_its_own_and_expire() {
    let server = RedisServer::start();
    // A production counter of the same shape the lab would write.
    server.cli(&["SET", "tg{0000000000000000}0", "production"]);
    let redis = RedisStores::connect_blocking(&server.url()).expect("connects");
    let scenario = scenario(Traffic::steady(40.0).unwrap(), 1);
    let mut runner = scenario.runner(&redis).expect("a valid scenario");
    for _ in 0..4 {
        runner.next_tick().expect("a tick");
    }
    let keys = server.cli(&["--raw", "KEYS", "*"]);
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    let prefix = redis.run_prefix();
    let lab_keys: Vec<&&str> = keys.iter().filter(|k| k.starts_with(&prefix)).collect();
    // 8 lanes (one of 3 sidecars): 10 stores, each with its own prefix, 3 clients each at most.
    assert!(lab_keys.len() >= 10, "{keys:?}");
    let stores: std::collections::BTreeSet<&str> = lab_keys
        .iter()
        .map(|k| k[prefix.len()..].split(':').next().unwrap())
        .collect();
    assert_eq!(stores.len(), 10, "{keys:?}");
    for key in &lab_keys {
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(ttl > 0 && ttl <= 3_600_000, "{key}: {ttl}");
    }
    assert_eq!(
        keys.len(),
        lab_keys.len() + 1,
        "only the run's keys and production's"
    );
    assert_eq!(
        server.cli(&["GET", "tg{0000000000000000}0"]).trim(),
        "production"
    );
    // A second factory is another run: another prefix.
    let other = RedisStores::connect_blocking(&server.url()).expect("connects");
    assert_ne!(other.run_prefix(), prefix);
    drop(runner);
    let left = server.cli(&["--raw", "KEYS", "tglab:*"]);
    assert!(left.trim().is_empty(), "left behind: {left}");
}

#[test]
fn a_redis_that_goes_away_ends_the_run_with_its_reason() {
    let mut server = RedisServer::start();
    let redis = RedisStores::connect_blocking(&server.url()).expect("connects");
    let scenario = scenario(Traffic::steady(40.0).unwrap(), 1);
    let mut runner = scenario.runner(&redis).expect("a valid scenario");
    runner.next_tick().expect("a tick while Redis runs");
    server.kill();
    let mut ticks = 0;
    while runner.next_tick().is_some() {
        ticks += 1;
    }
    assert!(ticks < 39, "the run stopped early ({ticks} more ticks)");
    match runner.finish_checked() {
        Err(RunError::Store(message)) => {
            assert!(message.contains("Redis store"), "{message}")
        }
        other => panic!("expected a store failure, got {other:?}"),
    }
}

/// Runs the real binary with `args`.
fn tollgate(args: &[&str]) -> std::process::Output {
    tollgate_testkit::tollgate::tollgate(args)
        .output()
        .expect("running the tollgate binary")
}

const SIMULATE: [&str; 13] = [
    "simulate",
    "--algorithm",
    "token-bucket",
    "--max-tokens",
    "5",
    "--tokens-per-fill",
    "2",
    "--fill-interval",
    "1s",
    "--arrival-rate",
    "10",
    "--duration",
    "10s",
];

#[test]
fn simulate_on_redis_reports_the_same_figures_and_the_store() {
    let server = RedisServer::start();
    let url = server.url();
    let run = |extra: &[&str]| -> Value {
        let mut args = SIMULATE.to_vec();
        args.extend_from_slice(&["--clients", "2", "--json"]);
        args.extend_from_slice(extra);
        let out = tollgate(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let memory = run(&[]);
    let redis = run(&["--redis", &url]);
    assert_eq!(
        memory["lanes"][0]["admitted"],
        redis["lanes"][0]["admitted"]
    );
    assert_eq!(memory["lanes"][0]["denied"], redis["lanes"][0]["denied"]);
    assert_eq!(redis["lanes"][0]["admitted"], 48);
    assert_eq!(memory["store"]["kind"], "memory");
    assert_eq!(redis["store"]["kind"], "redis");
    // 100 decisions and one state read at the end of the single tick.
    assert_eq!(redis["store"]["calls"], 101);
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");
}

#[test]
fn a_bad_or_unreachable_redis_url_is_a_clear_error() {
    let closed = format!("redis://127.0.0.1:{}", free_port());
    for (url, says) in [
        ("memcached://127.0.0.1:1", "must start with redis://"),
        (closed.as_str(), "cannot connect to Redis"),
    ] {
        let mut args = SIMULATE.to_vec();
        args.extend_from_slice(&["--redis", url]);
        let out = tollgate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("--redis"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        let out = tollgate(&["lab", "--addr", "127.0.0.1:0", "--redis", url]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "lab {url}: {stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// GET `path` from the lab at `addr`: the status and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let response = tollgate_testkit::http::exchange(addr, "GET", path, &[], "");
    (response.status, response.body)
}

/// GET `path` from the lab at `addr`: the body.
fn get_raw(addr: &str, path: &str) -> String {
    get(addr, path).1
}

/// GET `path` from the lab at `addr`: status and JSON body.
fn get_json(addr: &str, path: &str) -> (u16, Value) {
    let (status, body) = get(addr, path);
    let body = body
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{path}: no JSON in {body}"));
    (status, serde_json::from_str(body).expect("JSON"))
}

#[test]
fn the_lab_runs_on_redis_when_started_with_it() {
    let mut redis = RedisServer::start();
    let server = Server::spawn(&["lab", "--addr", "127.0.0.1:0", "--redis", &redis.url()]);
    let addr = server
        .line_after("tollgate lab: open http://")
        .trim_end_matches('/')
        .to_owned();
    let (_, fields) = get_json(&addr, "/api/fields");
    assert_eq!(fields["stores"], serde_json::json!(["redis", "memory"]));
    let run = "/api/summary?algorithm=token_bucket&max_tokens=5&tokens_per_fill=2&fill_interval_ms=1000&traffic=steady&arrival_rate=10&duration_ms=10000&clients=2";
    let (status, on_redis) = get_json(&addr, run);
    assert_eq!(status, 200, "{on_redis}");
    let (status, in_memory) = get_json(&addr, &format!("{run}&store=memory"));
    assert_eq!(status, 200, "{in_memory}");
    assert_eq!(on_redis["lanes"], in_memory["lanes"]);
    // The server deletes a run's keys in the background once the run is over:
    // at most 500 polls 20 ms apart.
    let mut polls = 0;
    while redis.cli(&["DBSIZE"]).trim() != "0" {
        polls += 1;
        assert!(polls < 500, "the run's keys stay");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The stream steps the run on Redis too, to its end event.
    let raw = get_raw(
        &addr,
        &format!("{}&speed=0", run.replace("/api/summary", "/api/run")),
    );
    assert_eq!(raw.matches("event: tick").count(), 100, "{raw}");
    let end = raw
        .split("event: end\ndata: ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .expect("an end event");
    let end: Value = serde_json::from_str(end).expect("JSON");
    assert_eq!(end["report"]["lanes"], in_memory["lanes"]);
    // Too big a run for round trips: a 400 that says so.
    let (status, body) = get_json(
        &addr,
        "/api/summary?algorithm=token_bucket&max_tokens=5&tokens_per_fill=2&fill_interval_ms=1000&traffic=steady&arrival_rate=20000&duration_ms=60000",
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("script call"),
        "{body}"
    );
    let (status, body) = get_json(&addr, &format!("{run}&store=disk"));
    assert_eq!(status, 400, "{body}");
    // Redis gone: the run fails with the reason, not a 500.
    redis.kill();
    let (status, body) = get_json(&addr, run);
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("Redis"), "{body}");
    // A stream ends with a failed event naming the store, and no end event.
    let raw = get_raw(
        &addr,
        &format!("{}&speed=0", run.replace("/api/summary", "/api/run")),
    );
    let failed = raw
        .split("event: failed\ndata: ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("a failed event in {raw}"));
    let failed: Value = serde_json::from_str(failed).expect("JSON");
    assert_eq!(failed["field"], "store");
    assert!(
        failed["error"].as_str().unwrap().contains("Redis"),
        "{failed}"
    );
    assert!(!raw.contains("event: end"), "{raw}");
}

#[test]
fn a_lab_without_redis_refuses_store_redis() {
    let server = Server::spawn(&["lab", "--addr", "127.0.0.1:0"]);
    let addr = server
        .line_after("tollgate lab: open http://")
        .trim_end_matches('/')
        .to_owned();
    let (_, fields) = get_json(&addr, "/api/fields");
    assert_eq!(fields["stores"], serde_json::json!(["memory"]));
    let (status, body) = get_json(
        &addr,
        "/api/summary?algorithm=token_bucket&max_tokens=5&tokens_per_fill=2&fill_interval_ms=1000&traffic=steady&arrival_rate=10&duration_ms=10000&store=redis",
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("--redis"),
        "{body}"
    );
}
