//! The platform run (`--modes`): every mode as a lane on one trace, in memory and on a real Redis, and its mistakes named.

use serde_json::Value;
use tollgate_testkit::redis::RedisServer;

use crate::*;

const PLATFORM: [&str; 20] = [
    "--algorithm",
    "token-bucket",
    "--max-tokens",
    "100",
    "--tokens-per-fill",
    "100",
    "--fill-interval",
    "1s",
    "--traffic",
    "poisson",
    "--arrival-rate",
    "20000",
    "--clients",
    "2000",
    "--instances",
    "4",
    "--duration",
    "5s",
    "--platform-rate",
    "15000",
];

fn platform_and(rest: &[&str]) -> Vec<&'static str> {
    let mut all: Vec<&str> = PLATFORM.to_vec();
    // Leaked: the test's arguments live as long as the test.
    all.extend(rest.iter().map(|s| &*String::leak(s.to_string())));
    all
}

#[test]
fn every_mode_reports_its_calls_and_admissions_against_the_exact_limiter() {
    let json = summary(&platform_and(&[
        "--modes",
        "exact,leased,shares,local",
        "--key-distribution",
        "zipf",
        "--scale",
        "2s=6,4s=3",
    ]));
    let lanes = json["lanes"].as_array().expect("lanes");
    let lane = |mode: &str| lanes.iter().find(|l| l["mode"] == mode).expect(mode);
    let arrivals = json["arrivals"].as_u64().expect("arrivals");
    assert!(arrivals > 90_000, "{json}");
    for mode in ["exact", "leased", "shares", "local"] {
        assert_eq!(lane(mode)["decisions"].as_u64(), Some(arrivals), "{mode}");
    }
    assert_eq!(lane("exact")["calls_per_decision"].as_f64(), Some(1.0));
    assert_eq!(lane("shares")["over_admitted"].as_u64(), Some(0));
    // A short run with few requests per key: most calls carry first uses; a tenth of exact at most.
    assert!(
        lane("shares")["calls_per_decision"]
            .as_f64()
            .expect("calls")
            < 0.1,
        "{json}"
    );
    assert!(
        lane("local")["over_admitted"].as_u64().expect("over") > 0,
        "{json}"
    );
}

#[test]
fn platform_mistakes_are_named() {
    let run = |rest: &[&str]| {
        let output = simulate(&platform_and(rest));
        assert_eq!(output.status.code(), Some(2), "{rest:?}");
        stderr(&output)
    };
    // A Redis that does not answer is named (the lanes run on it with --redis).
    let output = simulate(&platform_and(&[
        "--modes",
        "shares",
        "--redis",
        "redis://127.0.0.1:1",
    ]));
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(err.contains("--redis: cannot connect"), "{err}");
    let err = run(&["--modes", "shares", "--scale", "20s"]);
    assert!(err.contains("TIME=INSTANCES"), "{err}");
    let err = run(&["--modes", "shares", "--scale", "20s=0"]);
    assert!(err.contains("at least 1 instance"), "{err}");
    let err = run(&["--modes", "shares", "--clients", "20000000"]);
    assert!(err.contains("clients"), "{err}");
    let err = run(&["--modes", "shares", "--shares-starter-slots", "2000"]);
    assert!(err.contains("--shares-starter-slots"), "{err}");
}

#[test]
fn starter_slots_let_first_uses_go_without_waiting_on_the_store() {
    // 4 slots of 100/s ÷ 16 (6 tokens each): every one of the 4 instances owns one.
    let shares = |slots: &str| {
        let json = summary(&platform_and(&[
            "--modes",
            "shares",
            "--shares-starter-slots",
            slots,
            "--shares-starter-divisor",
            "4",
        ]));
        let lanes = json["lanes"].as_array().expect("lanes").clone();
        lanes
            .into_iter()
            .find(|l| l["mode"] == "shares")
            .expect("shares lane")
    };
    let (off, on) = (shares("0"), shares("4"));
    assert_eq!(on["over_admitted"].as_u64(), Some(0), "{on}");
    let waited = |lane: &serde_json::Value| lane["waited"].as_u64().expect("waited");
    // Without slots each key's first use on each instance waits (about 2000 × 4); with them
    // only the requests of the first 160 ms do (20 000/s), while the parts get their first token.
    assert!(waited(&off) > 7_000, "{off}");
    assert!(waited(&on) < 20_000 * 160 / 1_000 + 500, "{on}");
    let calls = |lane: &serde_json::Value| lane["calls_per_decision"].as_f64().expect("calls");
    assert!(calls(&on) < calls(&off), "{on} vs {off}");
}

#[test]
fn the_platform_shares_lane_decides_on_redis_as_in_memory() {
    let server = RedisServer::start();
    // The leased lane (one script call per grant) once: the lab's own tests compare it further.
    for (slots, modes) in [("0", "exact,leased,shares"), ("2", "exact,shares")] {
        let flags = [
            "--modes",
            modes,
            "--key-distribution",
            "zipf",
            "--scale",
            "2s=6,4s=3",
            "--shares-starter-slots",
            slots,
            "--shares-starter-divisor",
            "4",
        ];
        let memory = summary(&platform_and(&flags));
        let url = server.url();
        let mut on_redis_flags = flags.to_vec();
        on_redis_flags.extend(["--redis", url.as_str()]);
        let on_redis = summary(&platform_and(&on_redis_flags));
        assert_eq!(memory["store"], "memory");
        let store = on_redis["store"].as_str().expect("store");
        assert!(
            store.starts_with("redis ") && store.contains("exact lane is the in-memory reference"),
            "{store}"
        );
        let lane = |summary: &Value, mode: &str| -> Value {
            summary["lanes"]
                .as_array()
                .expect("lanes")
                .iter()
                .find(|l| l["mode"] == mode)
                .expect(mode)
                .clone()
        };
        for mode in modes.split(',') {
            let (m, r) = (lane(&memory, mode), lane(&on_redis, mode));
            for field in [
                "decisions",
                "admitted",
                "over_admitted",
                "store_calls",
                "keys_in_calls",
                "waited",
                "p99_wait_us",
            ] {
                assert_eq!(m[field], r[field], "slots {slots}, {mode}: {field}");
            }
        }
        let shares = lane(&on_redis, "shares");
        assert_eq!(shares["over_admitted"], 0, "{shares}");
        // Worth comparing: the limits refused some, and the lane called the store.
        let admitted = shares["admitted"].as_u64().expect("admitted");
        assert!(admitted > 0 && admitted < shares["decisions"].as_u64().expect("decisions"));
        // Two script calls (read, compare-and-set write) per store call, none in conflict;
        // a call still on its way when the run ends (one per instance at most) never reaches Redis.
        let calls = shares["store_calls"].as_u64().expect("calls");
        let script_calls = shares["script_calls"].as_u64().expect("script calls");
        assert!(calls > 0);
        assert!(
            script_calls <= 2 * calls && script_calls >= 2 * (calls - 6),
            "{shares}"
        );
        if modes.contains("leased") {
            assert_eq!(
                lane(&on_redis, "leased")["script_calls"],
                lane(&on_redis, "leased")["store_calls"]
            );
        }
        assert!(lane(&memory, "shares").get("script_calls").is_none());
        assert!(lane(&on_redis, "exact").get("script_calls").is_none());
    }
    // The runs' keys were deleted at their end.
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");
}
