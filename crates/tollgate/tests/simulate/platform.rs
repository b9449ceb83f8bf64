//! The platform run (`--modes`): every mode as a lane on one trace, and its mistakes named.

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
    let err = run(&["--modes", "shares", "--redis", "redis://127.0.0.1:1"]);
    assert!(
        err.contains("in-memory store only") && err.contains("drop --redis"),
        "{err}"
    );
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
