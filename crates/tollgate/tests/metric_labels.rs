//! Label values taken from requests (`value_to_metric`) on `/metrics` and in statsd: escaped, bounded in length, read back by Prometheus's own OpenMetrics parser.
//!
//! `/metrics` (the Prometheus text format, whose label escaping OpenMetrics
//! shares) is closed with OpenMetrics' `# EOF`, parsed by `promtool tsdb
//! create-blocks-from openmetrics` and read back with `promtool tsdb dump`,
//! so a value that ends a label or a line early fails the parse or shows up
//! as a series of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tollgate_testkit::budget::{BUDGET, Stopwatch};
use tollgate_testkit::http::{Connection, get};
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server};

const LIMITS: &str = "
domain: labels
descriptors:
  - key: user
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
";

/// `--max-metric-label-bytes` in these tests.
const MAX_LABEL_BYTES: usize = 64;

/// What a caller may send as a `user` value: each must come back as its own
/// label value, and none may add a line or a label.
fn hostile_values() -> Vec<String> {
    vec![
        "a\ninjected_total 42\n".to_owned(),
        "quote\",injected=\"1".to_owned(),
        "back\\slash\\".to_owned(),
        "tab\tand é".to_owned(),
        "x".repeat(100_000),
        format!("{}y", "x".repeat(100_000)),
        "é".repeat(50_000),
    ]
}

/// Starts `serve` on `LIMITS` with a label bound of `MAX_LABEL_BYTES` and `env`; the HTTP address.
fn start(dir: &TempDir, env: &[(&str, &str)]) -> (Server, SocketAddr) {
    let config = dir.limits(LIMITS);
    let bound = MAX_LABEL_BYTES.to_string();
    let config = config.to_str().expect("a UTF-8 path");
    let mut args = vec![
        "serve",
        "--config",
        config,
        "--max-metric-label-bytes",
        &bound,
    ];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    let server = Server::spawn_with_env(&args, env);
    let _grpc = server.address();
    let http = server.http_address();
    (server, http)
}

/// Sends each value once as `user` to `/json`; each is admitted.
fn send_each(http: SocketAddr, values: &[String]) {
    for value in values {
        let body = serde_json::json!({
            "domain": "labels",
            "descriptors": [{"entries": [{"key": "user", "value": value}]}],
        });
        let response = Connection::open(http)
            .request(
                "POST",
                "/json",
                &[("content-type", "application/json")],
                &body.to_string(),
            )
            .expect("POST /json");
        assert_eq!(response.status, 200, "{}", response.body);
    }
}

/// One series as Prometheus stored it: its labels, `__name__` included, and its value.
type Series = (BTreeMap<String, String>, String);

/// `exposition` parsed by promtool's OpenMetrics parser and read back from the TSDB it wrote.
fn parse_with_promtool(dir: &Path, exposition: &str) -> Vec<Series> {
    // Backfilling wants a timestamp on each sample; nothing else changes.
    let mut stamped: String = exposition
        .lines()
        .map(|line| {
            if line.starts_with('#') {
                format!("{line}\n")
            } else {
                format!("{line} 1700000000\n")
            }
        })
        .collect();
    stamped.push_str("# EOF\n");
    let file = dir.join("metrics.om");
    std::fs::write(&file, stamped).expect("write the exposition");
    let db = dir.join("tsdb");
    let promtool = |args: &[&Path]| {
        Command::new("promtool")
            .args(args)
            .output()
            .expect("promtool runs (Debian package prometheus; scripts/test.sh installs it)")
    };
    let created = promtool(&[
        Path::new("tsdb"),
        Path::new("create-blocks-from"),
        Path::new("openmetrics"),
        &file,
        &db,
    ]);
    assert!(
        created.status.success(),
        "Prometheus's OpenMetrics parser refused /metrics: {}\n{exposition}",
        String::from_utf8_lossy(&created.stderr)
    );
    std::fs::create_dir_all(db.join("wal")).expect("an empty WAL");
    let dumped = promtool(&[Path::new("tsdb"), Path::new("dump"), &db]);
    assert!(
        dumped.status.success(),
        "{}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    String::from_utf8(dumped.stdout)
        .expect("UTF-8")
        .lines()
        .map(parse_dumped)
        .collect()
}

/// One line of `promtool tsdb dump`: `{name="go-quoted", …} value timestamp`.
fn parse_dumped(line: &str) -> Series {
    let mut labels = BTreeMap::new();
    let mut rest = line.strip_prefix('{').expect("a label set");
    loop {
        let (name, after) = rest.split_once("=\"").expect("name=\"value\"");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("a closing quote") {
                (at, '"') => break at,
                (_, '\\') => value.push(match chars.next().expect("an escape").1 {
                    'n' => '\n',
                    't' => '\t',
                    other @ ('\\' | '"') => other,
                    other => panic!("unexpected escape \\{other} in {line}"),
                }),
                (_, c) => value.push(c),
            }
        };
        labels.insert(name.trim_start_matches([',', ' ']).to_owned(), value);
        rest = &after[end + 1..];
        if let Some(tail) = rest.strip_prefix("} ") {
            let value = tail.split(' ').next().expect("a value").to_owned();
            return (labels, value);
        }
    }
}

#[test]
fn hostile_label_values_parse_back_one_series_each_and_bounded() {
    let dir = TempDir::new("metric-labels");
    let (_server, http) = start(&dir, &[]);
    let values = hostile_values();
    send_each(http, &values);
    let exposition = get(http, "/metrics", &[]).body;
    let series = parse_with_promtool(dir.path(), &exposition);
    let names: BTreeSet<&str> = series.iter().map(|(l, _)| l["__name__"].as_str()).collect();
    assert!(
        names.iter().all(|name| name.starts_with("ratelimit_")
            || name.starts_with("tollgate_")
            || name.starts_with("process_")),
        "a series no collector wrote: {names:?}"
    );
    let hits: Vec<&Series> = series
        .iter()
        .filter(|(l, _)| l["__name__"] == "ratelimit_service_rate_limit_total_hits")
        .collect();
    for (labels, value) in &hits {
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert_eq!(keys, ["__name__", "domain", "key1"], "{labels:?}");
        assert_eq!((labels["domain"].as_str(), value.as_str()), ("labels", "1"));
    }
    let key1: BTreeSet<&str> = hits.iter().map(|(l, _)| l["key1"].as_str()).collect();
    assert_eq!(key1.len(), values.len(), "one series per value: {key1:?}");
    for value in &values {
        let label = format!("user_{value}");
        if label.len() <= MAX_LABEL_BYTES {
            assert!(key1.contains(label.as_str()), "no {label:?} in {key1:?}");
            continue;
        }
        // Cut: the value's start, `~` and 16 hex digits, within the bound.
        let cut = key1.iter().find(|k| {
            k.split_once('~').is_some_and(|(start, hash)| {
                label.starts_with(start) && start.len() > MAX_LABEL_BYTES / 2 && hash.len() == 16
            })
        });
        let cut = cut.unwrap_or_else(|| panic!("no cut label for a {}-byte value", label.len()));
        assert!(cut.len() <= MAX_LABEL_BYTES, "{cut}");
    }
    let gauge = |name: &str| {
        series
            .iter()
            .find(|(l, _)| l["__name__"] == name)
            .map(|(_, value)| value.as_str())
            .unwrap_or_else(|| panic!("no {name}"))
            .to_owned()
    };
    assert_eq!(gauge("ratelimit_metric_keys_truncated"), "3");
    assert_eq!(gauge("ratelimit_metric_keys"), values.len().to_string());
    assert_eq!(
        gauge("ratelimit_metric_label_bytes_limit"),
        MAX_LABEL_BYTES.to_string()
    );
    assert!(
        exposition.len() < 64 * 1024,
        "{} bytes of /metrics after {} KB of values",
        exposition.len(),
        values.iter().map(String::len).sum::<usize>() / 1024
    );
}

/// The statsd lines received until `done` says they are all in, or the budget ends.
fn read_statsd(socket: &UdpSocket, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut lines = Vec::new();
    let watch = Stopwatch::start();
    let mut buffer = vec![0_u8; 65_536];
    while !done(&lines) && !watch.exceeded(BUDGET) {
        if let Ok(n) = socket.recv(&mut buffer) {
            lines.extend(
                String::from_utf8_lossy(&buffer[..n])
                    .split('\n')
                    .map(str::to_owned),
            );
        }
    }
    lines
}

#[test]
fn hostile_values_cannot_split_or_tag_a_statsd_line() {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a read timeout");
    let port = socket.local_addr().expect("bound").port().to_string();
    let dir = TempDir::new("metric-labels-statsd");
    let (_server, http) = start(
        &dir,
        &[
            ("USE_STATSD", "true"),
            ("STATSD_PROTOCOL", "udp"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", port.as_str()),
            ("STATS_FLUSH_INTERVAL", "50ms"),
        ],
    );
    let values = [
        "a\ninjected:42|c\n".to_owned(),
        "b,tenant=admin".to_owned(),
        "c#tenant=admin".to_owned(),
        "d[tenant=admin]".to_owned(),
        "x".repeat(100_000),
    ];
    send_each(http, &values);
    let total_hits = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| {
                l.starts_with("ratelimit.service.rate_limit.labels.")
                    && l.ends_with(".total_hits:1|c")
            })
            .count()
    };
    let lines = read_statsd(&socket, |lines| total_hits(lines) >= values.len());
    assert_eq!(
        total_hits(&lines),
        values.len(),
        "one counter per value: {lines:?}"
    );
    let hits: Vec<&str> = lines
        .iter()
        .filter_map(|line| {
            line.strip_prefix("ratelimit.service.rate_limit.labels.")?
                .strip_suffix(".total_hits:1|c")
        })
        .collect();
    for line in &lines {
        let (name, kind) = line.split_once(':').expect("name:value|type");
        assert!(
            name.starts_with("ratelimit") && !name.contains([',', '#', '[', ']']),
            "a line no counter wrote, or one with tags: {line:?}"
        );
        assert!(kind.ends_with("|c") || kind.ends_with("|ms"), "{line:?}");
    }
    assert!(
        hits.contains(&"user_a_injected_42_c_"),
        "the newline value under one name: {hits:?}"
    );
    assert!(
        hits.iter()
            .any(|h| h.starts_with("user_xxx") && h.len() <= MAX_LABEL_BYTES),
        "the long value cut: {hits:?}"
    );
}
