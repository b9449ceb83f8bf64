//! `tollgate lab` end to end: the real server on a loopback port, read over HTTP/1.1.

use std::io::Read;

use serde_json::Value;
use tollgate_testkit::budget::BUDGET;
use tollgate_testkit::http::{exchange, stream};
use tollgate_testkit::tollgate::Server;

/// A `tollgate lab` on a free loopback port.
struct Lab {
    _server: Server,
    addr: String,
}

impl Lab {
    fn start() -> Lab {
        let server = Server::spawn(&["lab", "--addr", "127.0.0.1:0"]);
        let addr = server
            .line_after("tollgate lab: open http://")
            .trim_end_matches('/')
            .to_owned();
        Lab {
            _server: server,
            addr,
        }
    }

    /// GET `path`: the status, the headers (lower-cased) and the body.
    fn get(&self, path: &str) -> (u16, String, String) {
        let response = exchange(&self.addr, "GET", path, &[], "");
        (response.status, response.head(), response.body)
    }

    fn json(&self, path: &str) -> (u16, Value) {
        let (status, _, body) = self.get(path);
        let value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{path} answers JSON ({e}): {body}"));
        (status, value)
    }

    fn status(&self) -> Value {
        self.json("/api/status").1
    }

    /// Opens an SSE stream on `path`, past its headers.
    fn stream(&self, path: &str) -> Events {
        let response = stream(&self.addr, path, &[("accept", "text/event-stream")], BUDGET);
        assert_eq!(response.status, 200, "{path}");
        let content_type = response
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(content_type.contains("text/event-stream"), "{content_type}");
        Events {
            body: response.body,
            pending: String::new(),
        }
    }
}

/// Server-Sent Events read off a (chunked) HTTP body.
struct Events {
    body: Box<dyn Read + Send>,
    pending: String,
}

impl Events {
    /// The next event's name and data, or `None` when the stream ends.
    fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                let value = serde_json::from_str(&data).expect("event data is JSON");
                return Some((name, value));
            }
            let chunk = self.read_chunk()?;
            self.pending.push_str(&chunk);
        }
    }

    fn read_chunk(&mut self) -> Option<String> {
        let mut buf = vec![0; 8192];
        let n = self.body.read(&mut buf).ok()?;
        (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

fn u(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

/// Polls `check` until it holds, at most [`BUDGET`] long.
fn eventually(what: &str, check: impl FnMut() -> bool) {
    tollgate_testkit::budget::eventually(what, BUDGET, check);
}

/// Reads a whole run: its start event, the ticks, the end event.
fn read_run(events: &mut Events) -> (Value, Vec<Value>, Value) {
    let (name, start) = events.next().expect("a start event");
    assert_eq!(name, "start");
    let mut ticks = vec![];
    loop {
        match events.next().expect("the stream runs to its end event") {
            (name, tick) if name == "tick" => ticks.push(tick),
            (name, end) if name == "end" => return (start, ticks, end),
            (name, other) => panic!("unexpected {name} event: {other}"),
        }
    }
}

/// Checks that the received ticks account for the whole run, with or without skipped ones.
fn assert_ticks_add_up(start: &Value, ticks: &[Value], end: &Value) {
    let report = &end["report"];
    let lanes = report["lanes"].as_array().unwrap();
    let skipped = u(end, "skipped");
    assert_eq!(
        ticks.len() as u64 + skipped,
        u(start, "ticks"),
        "every tick sent or skipped"
    );
    assert_eq!(u(report, "ticks"), u(start, "ticks"));
    for (i, lane) in lanes.iter().enumerate() {
        let mut sum = [0u64; 3];
        let mut previous_index = None;
        for tick in ticks {
            let t = &tick["lanes"][i];
            let index = u(tick, "index");
            assert!(previous_index.is_none_or(|p| index > p), "ticks in order");
            let exact = previous_index.map_or(index == 0, |p| index == p + 1);
            previous_index = Some(index);
            for (k, field) in ["arrivals", "admitted", "denied"].iter().enumerate() {
                if exact {
                    sum[k] += u(t, field);
                    assert_eq!(
                        u(&t["total"], field),
                        sum[k],
                        "lane {i} tick {index} {field}"
                    );
                } else {
                    // Skipped ticks before this one: the running total covers them.
                    assert!(u(&t["total"], field) >= sum[k] + u(t, field));
                    sum[k] = u(&t["total"], field);
                }
            }
            assert_eq!(
                u(t, "arrivals"),
                u(t, "admitted") + u(t, "denied") + u(t, "exceeded")
            );
        }
        assert_eq!(
            sum,
            [u(lane, "arrivals"), u(lane, "admitted"), u(lane, "denied")],
            "lane {i}"
        );
        assert_eq!(u(lane, "arrivals"), u(report, "arrivals"));
    }
}

const COMPARE: &str = "/api/run?mode=compare&algorithms=fixed_window,sliding_window,sliding_log\
    &limit=20&window_ms=2000&traffic=poisson&arrival_rate=30&duration_ms=20000&seed=5&speed=200&samples=2";

#[test]
fn a_streamed_run_adds_up_to_the_servers_summary() {
    let lab = Lab::start();
    let mut events = lab.stream(COMPARE);
    let (start, ticks, end) = read_run(&mut events);
    assert_eq!(start["mode"], "compare");
    assert_eq!(u(&start, "ticks"), 200);
    let labels: Vec<&str> = start["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["fixed_window", "sliding_window", "sliding_log"]);
    assert_ticks_add_up(&start, &ticks, &end);
    // The same parameters without streaming give the same figures: the run is deterministic.
    let (status, summary) = lab.json(&COMPARE.replace("/api/run", "/api/summary"));
    assert_eq!(status, 200);
    assert_eq!(summary, end["report"]);
    // About 600 requests arrived; the exact log never admits more than 20 in 2 s.
    let arrivals = u(&summary, "arrivals");
    assert!((450..=750).contains(&arrivals), "{arrivals}");
    assert!(u(&summary["lanes"][2], "max_admitted_in_window") <= 20);
    // Sampled decisions carry a Retry-After when denied.
    let denied: Vec<&Value> = ticks
        .iter()
        .flat_map(|t| t["lanes"].as_array().unwrap())
        .flat_map(|l| l["samples"].as_array().unwrap())
        .filter(|d| d["outcome"] == "denied")
        .collect();
    assert!(!denied.is_empty());
    assert!(
        denied
            .iter()
            .all(|d| d["retry_after_ns"].as_u64().is_some_and(|r| r > 0))
    );
    // The stream ended by itself, and the run is no longer counted.
    assert!(
        events.next().is_none(),
        "the stream closes after its end event"
    );
    eventually("the finished run is no longer active", || {
        u(&lab.status(), "active_runs") == 0
    });
}

#[test]
fn the_stream_says_whose_state_it_draws_and_carries_a_shapers_delays() {
    let lab = Lab::start();
    // A shaper (5/s, burst 10) fed 20 req/s; clients 0 and 1; the state line reads client 1.
    let mut events = lab.stream(
        "/api/run?algorithm=leaky_bucket&leaky_mode=shaper&rate=5&burst=10\
         &arrival_rate=20&duration_ms=3000&clients=2&state_client=1&speed=0",
    );
    let (start, ticks, _) = read_run(&mut events);
    let lane = &start["lanes"][0];
    assert_eq!(lane["shaper"], true);
    assert_eq!(lane["state_of"], "client 1's key");
    assert_eq!(lane["state_meaning"], "units queued (still draining)");
    // The shaper queues, and says how long it holds requests.
    let delays: Vec<u64> = ticks
        .iter()
        .map(|t| u(&t["lanes"][0], "max_delay_ns"))
        .collect();
    assert!(delays.iter().any(|&d| d > 0), "{delays:?}");
    let levels: Vec<f64> = ticks
        .iter()
        .map(|t| t["lanes"][0]["state_level"].as_f64().unwrap())
        .collect();
    assert!(levels.iter().any(|&l| l > 0.0), "{levels:?}");

    // A fleet: the local lane's state is the mean over its sidecars; a policer is no shaper.
    let (status, plan) =
        lab.json("/api/expect?mode=fleet&sidecars=4&algorithm=leaky_bucket&leaky_mode=policer");
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        plan["lanes"][0]["state_of"],
        "client 0's key, mean over the 4 sidecars"
    );
    assert_eq!(plan["lanes"][1]["state_of"], "client 0's key");
    assert_eq!(plan["lanes"][0]["shaper"], false);
}

#[test]
fn a_closed_client_stops_its_run() {
    let lab = Lab::start();
    // At real-time speed this run would take ten minutes.
    let mut events = lab.stream("/api/run?duration_ms=600000&arrival_rate=50&speed=1");
    assert_eq!(events.next().unwrap().0, "start");
    assert_eq!(events.next().unwrap().0, "tick");
    assert_eq!(u(&lab.status(), "active_runs"), 1);
    drop(events);
    eventually("the run stops once its client goes away", || {
        let status = lab.status();
        u(&status, "active_runs") == 0 && u(&status, "runs_stopped_early") == 1
    });
}

#[test]
fn several_clients_run_independently() {
    let lab = Lab::start();
    let mut slow = lab.stream("/api/run?duration_ms=600000&arrival_rate=50&speed=1");
    assert_eq!(slow.next().unwrap().0, "start");
    let mut fast = lab.stream(
        "/api/run?algorithm=sliding_log&limit=3&window_ms=1000&duration_ms=3000&speed=0&seed=9",
    );
    let (start, ticks, end) = read_run(&mut fast);
    assert_ticks_add_up(&start, &ticks, &end);
    assert_eq!(u(&lab.status(), "active_runs"), 1, "the slow run goes on");
    assert_eq!(slow.next().unwrap().0, "tick");
}

#[test]
fn a_slow_reader_skips_ticks_instead_of_slowing_the_run() {
    let lab = Lab::start();
    // 30 000 ticks of six lanes (~40 MB of events, far more than socket buffers
    // hold) as fast as possible; nobody reads until the lab has had to drop some.
    let path = "/api/run?mode=compare&algorithms=token_bucket,gcra,leaky_bucket,fixed_window,sliding_window,sliding_log\
        &duration_ms=300000&tick_ms=10&arrival_rate=20&speed=0&samples=0";
    let mut events = lab.stream(path);
    eventually("the lab skips ticks for the stalled reader", || {
        u(&lab.status(), "ticks_skipped") > 0
    });
    let (start, ticks, end) = read_run(&mut events);
    assert!(u(&end, "skipped") > 0);
    assert_ticks_add_up(&start, &ticks, &end);
    let (_, summary) = lab.json(&path.replace("/api/run", "/api/summary"));
    assert_eq!(summary, end["report"]);
}

#[test]
fn bad_parameters_get_400_naming_the_field() {
    let lab = Lab::start();
    let cases = [
        (
            "max_tokens=0",
            "max_tokens",
            "max_tokens: 0 is outside 1 to 1000000",
        ),
        (
            "arrival_rate=lots",
            "arrival_rate",
            "arrival_rate: \"lots\" is not a number",
        ),
        (
            "mode=fleet&sidecars=16",
            "sidecars",
            "sidecars: 16 is outside 1 to 15",
        ),
        (
            "algorithm=leaky_bucket&burst=1&delay_after=4",
            "delay_after",
            "delay_after: delay=4 is larger than burst=1",
        ),
        (
            "traffic=square&duty=0",
            "duty",
            "duty: 0 is outside 0.01 to 1",
        ),
        (
            "mode=compare&algorithms=gcra,nope",
            "algorithms",
            "algorithms: \"nope\" is not one of",
        ),
        (
            "window_size=3",
            "window_size",
            "window_size: is not a parameter of a lab run",
        ),
        (
            "arrival_rate=100000&duration_ms=3600000",
            "duration_ms",
            "duration_ms: this traffic",
        ),
        (
            "clients=3&state_client=3",
            "state_client",
            "state_client: client 3 does not exist: clients are numbered 0 to 2",
        ),
    ];
    for endpoint in ["/api/expect", "/api/run", "/api/summary"] {
        for (query, field, message) in cases {
            let (status, body) = lab.json(&format!("{endpoint}?{query}"));
            assert_eq!(status, 400, "{endpoint}?{query}: {body}");
            assert_eq!(body["field"], field, "{endpoint}?{query}");
            let error = body["error"].as_str().unwrap();
            assert!(error.starts_with(message), "{endpoint}?{query}: {error}");
        }
    }
    let (status, _) = lab.json("/api/nothing");
    assert_eq!(status, 404);
    assert_eq!(
        u(&lab.status(), "runs_started"),
        0,
        "no bad request started a run"
    );
}

#[test]
fn the_page_is_served_from_the_binary() {
    let lab = Lab::start();
    let (status, head, body) = lab.get("/");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/html"));
    assert!(body.contains("<title>Tollgate lab</title>") && body.contains("/lab.js"));
    let (status, head, body) = lab.get("/lab.js");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/javascript"));
    assert!(body.contains("new EventSource"));
    let (status, head, _) = lab.get("/lab.css");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/css"));
    let (status, fields) = lab.json("/api/fields");
    assert_eq!(status, 200);
    let sidecars = fields["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "sidecars")
        .unwrap();
    assert_eq!(
        (sidecars["min"].as_f64(), sidecars["max"].as_f64()),
        (Some(1.0), Some(15.0))
    );
    // The page's inputs take their ranges from this answer: every field has an input.
    let (_, _, page) = lab.get("/");
    for field in fields["fields"].as_array().unwrap() {
        let name = field["name"].as_str().unwrap();
        if name != "samples" {
            assert!(
                page.contains(&format!("name=\"{name}\"")),
                "the page has an input for {name}"
            );
        }
    }
}

impl Lab {
    /// POSTs `body` to `path`: the status and the JSON answer.
    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let response = exchange(
            &self.addr,
            "POST",
            path,
            &[("content-type", "text/csv")],
            body,
        );
        let body = response.body;
        (
            response.status,
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("JSON ({e}): {body}")),
        )
    }
}

#[test]
fn an_uploaded_trace_is_replayed() {
    let lab = Lab::start();
    // Five requests: three within 100 ms, then two a second apart (out of order in the file).
    let (status, uploaded) = lab.post(
        "/api/replays",
        "time\n1700000000.05\n1700000000.0\n1700000000.1\n1700000002\n1700000001\n",
    );
    assert_eq!(status, 200, "{uploaded}");
    assert_eq!(
        (u(&uploaded, "len"), u(&uploaded, "span_ns")),
        (5, 2_000_000_001)
    );
    let id = u(&uploaded, "id");
    // A bucket of 2 refilled at 1/s: the first two pass, the third is denied, the last two pass.
    let query = format!(
        "traffic=replay&replay={id}&algorithm=token_bucket&max_tokens=2&tokens_per_fill=1&fill_interval_ms=1000&duration_ms=3000&speed=0"
    );
    let (status, summary) = lab.json(&format!("/api/summary?{query}"));
    assert_eq!(status, 200, "{summary}");
    let lane = &summary["lanes"][0];
    assert_eq!(
        (u(lane, "arrivals"), u(lane, "admitted"), u(lane, "denied")),
        (5, 4, 1)
    );
    let mut events = lab.stream(&format!("/api/run?{query}"));
    let (start, ticks, end) = read_run(&mut events);
    assert_eq!(start["lanes"][0]["expectation"]["expected_arrivals"], 5.0);
    assert_ticks_add_up(&start, &ticks, &end);
    assert_eq!(end["report"], summary);
    // Mistakes are named.
    let (status, body) = lab.post("/api/replays", "1\n2\nsoon\n");
    assert_eq!(status, 400);
    assert_eq!(
        body["error"],
        "replay: line 3: \"soon\" is not a number of seconds"
    );
    let (status, body) = lab.json("/api/expect?traffic=replay&replay=999");
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("replay: no uploaded trace has id 999")
    );
    let (status, body) = lab.json("/api/expect?traffic=replay");
    assert_eq!(status, 400);
    assert_eq!(body["field"], "replay");
}

/// A platform run small enough for a test: 2 000 keys (Zipf), 4 instances scaled to 6 and then 3,
/// 100/s per key, a platform cap of 15 000/s, 20 000/s offered for 5 s, every mode.
const PLATFORM_QUERY: &str = "keys=2000&distribution=zipf&zipf_s=1&instances=4&scale=2s%3D6,4s%3D3\
    &key_rate=100&key_burst=100&platform_rate=15000&offered_rate=20000&arrivals=poisson\
    &duration_s=5&modes=exact,leased,shares,local&seed=3";

/// The same run as `tollgate simulate` flags.
const PLATFORM_FLAGS: [&str; 31] = [
    "simulate",
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
    "--key-distribution",
    "zipf",
    "--instances",
    "4",
    "--scale",
    "2s=6,4s=3",
    "--platform-rate",
    "15000",
    "--duration",
    "5s",
    "--modes",
    "exact,leased,shares,local",
    "--seed",
    "3",
    "--json",
    "--zipf-s=1",
];

#[test]
fn the_platform_view_answers_what_the_simulator_reports_on_the_same_seed() {
    let lab = Lab::start();
    let (status, page) = lab.json(&format!("/api/platform?mode=platform&{PLATFORM_QUERY}"));
    assert_eq!(status, 200, "{page}");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(PLATFORM_FLAGS)
        .output()
        .expect("running tollgate simulate");
    assert!(output.status.success(), "{output:?}");
    let simulated: Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    // Everything but the wall time is the simulator's, to the last figure.
    for field in ["arrivals", "exact_admitted", "seconds", "lanes"] {
        assert_eq!(page[field], simulated[field], "{field}");
    }
    let lanes = page["lanes"].as_array().unwrap();
    let modes: Vec<&str> = lanes.iter().map(|l| l["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["exact", "leased", "shares", "local"]);
    for lane in lanes {
        let per_second: Vec<u64> = lane["admitted_per_second"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(per_second.len(), 5, "one count per second: {lane}");
        assert_eq!(
            per_second.iter().sum::<u64>(),
            u(lane, "admitted"),
            "{lane}"
        );
        assert_eq!(u(lane, "decisions"), u(&page, "arrivals"), "{lane}");
    }
    assert_eq!(u(&lanes[2], "over_admitted"), 0, "shares keep both limits");
    assert!(u(&lanes[3], "over_admitted") > 0, "local drifts past them");
    // What the chart marks: the scale changes and the platform cap.
    assert_eq!(
        page["scale"],
        serde_json::json!([{ "at_s": 2.0, "instances": 6 }, { "at_s": 4.0, "instances": 3 }])
    );
    assert_eq!(
        (u(&page, "instances"), u(&page, "platform_rate")),
        (4, 15_000)
    );
    assert!(page["decisions_per_second_simulated"].as_f64().unwrap() > 0.0);
    let status = lab.status();
    assert_eq!(
        (
            u(&status, "runs_started"),
            u(&status, "platform_runs_active")
        ),
        (1, 0)
    );
}

#[test]
fn the_platform_view_refuses_a_run_past_its_bounds_naming_the_parameter() {
    let lab = Lab::start();
    let cases = [
        ("keys=200001", "keys", "keys: 200001 is outside 1 to 200000"),
        (
            "instances=65",
            "instances",
            "instances: 65 is outside 1 to 64",
        ),
        (
            "offered_rate=1000000&duration_s=2",
            "duration_s",
            "duration_s: offered_rate × duration_s is 2000000 requests",
        ),
        (
            "duration_s=61",
            "duration_s",
            "duration_s: 61 is outside 1 to 60",
        ),
        (
            "scale=1s%3D65",
            "scale",
            "scale: 65 instances is more than 64",
        ),
        (
            "scale=10s%3D5",
            "scale",
            "scale: a step at 10 s is not inside",
        ),
        ("scale=3s", "scale", "scale: \"3s\" is not TIME=INSTANCES"),
        (
            "scale=1s%3D2,2s%3D2,3s%3D2,4s%3D2,5s%3D2,6s%3D2,7s%3D2,8s%3D2,9s%3D2",
            "scale",
            "scale: 9 steps; a lab platform run takes at most 8",
        ),
        (
            "modes=exact,magic",
            "modes",
            "modes: \"magic\" is not one of",
        ),
        (
            "modes=shares,shares",
            "modes",
            "modes: shares is named twice",
        ),
        (
            "distribution=pareto",
            "distribution",
            "distribution: \"pareto\"",
        ),
        ("zipf_s=0", "zipf_s", "zipf_s: 0 is outside 0.01 to 5"),
        ("key_burst=0", "key_burst", "key_burst: 0 is outside 1 to"),
        (
            "mode=fleet",
            "mode",
            "mode: \"fleet\" is not one of platform",
        ),
        ("sidecars=4", "sidecars", "sidecars: is not a parameter"),
        ("seed=1&seed=2", "seed", "seed: is given twice"),
    ];
    for (query, field, message) in cases {
        let (status, body) = lab.json(&format!("/api/platform?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}");
        let error = body["error"].as_str().unwrap();
        assert!(error.starts_with(message), "{query}: {error}");
    }
    assert_eq!(u(&lab.status(), "runs_started"), 0, "no bad request ran");
}

#[test]
fn the_page_carries_the_platform_view() {
    let lab = Lab::start();
    let (status, head, script) = lab.get("/platform.js");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/javascript"));
    assert!(script.contains("/api/platform?"));
    let (_, _, page) = lab.get("/");
    assert!(page.contains("<option value=\"platform\">") && page.contains("/platform.js"));
    let (_, fields) = lab.json("/api/fields");
    let platform = fields["platform_fields"].as_array().unwrap();
    for field in platform {
        let name = field["name"].as_str().unwrap();
        assert!(
            page.contains(&format!("name=\"{name}\"")),
            "the page has an input for {name}"
        );
    }
    let keys = platform.iter().find(|f| f["name"] == "keys").unwrap();
    assert_eq!(keys["max"].as_f64(), Some(200_000.0));
}
