//! `limit_req` in `tollgate proxy` against Debian's nginx `limit_req`: the same settings and the same burst of requests get the same statuses and the same delays.
//!
//! Each case sends 8 requests at once from one client address to both
//! servers, over connections opened beforehand, at a rate of 2 per second
//! (one unit drains every 500 ms). Statuses must match exactly; each
//! admitted request's wait must match nginx's within 250 ms (half a unit),
//! so the comparison holds however the requests interleave.

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use tollgate_testkit::budget::Stopwatch;
use tollgate_testkit::http::Connection;
use tollgate_testkit::nginx::Nginx;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::LoggedChild;
use tollgate_testkit::upstream::Upstream;

/// The cases: a path, nginx's `limit_req` arguments and the proxy's `limit_req` block.
const CASES: [(&str, &str, &str); 3] = [
    (
        "delay",
        "burst=5 delay=2",
        "{rate: 2r/s, burst: 5, delay: 2}",
    ),
    ("shape", "burst=3", "{rate: 2r/s, burst: 3}"),
    (
        "nodelay",
        "burst=3 nodelay",
        "{rate: 2r/s, burst: 3, nodelay: true}",
    ),
];

/// Requests per burst.
const BURST: usize = 8;

/// How far a wait may be from nginx's.
const TOLERANCE: Duration = Duration::from_millis(250);

fn nginx_http(www: &std::path::Path) -> String {
    let mut http = String::from("limit_req_status 429;\n");
    for (name, _, _) in CASES {
        http.push_str(&format!(
            "limit_req_zone $binary_remote_addr zone={name}:1m rate=2r/s;\n"
        ));
    }
    http.push_str(&format!(
        "server {{\n  listen {{listen}};\n  root {};\n  location /free {{ }}\n",
        www.display()
    ));
    for (name, args, _) in CASES {
        http.push_str(&format!(
            "  location /{name} {{ limit_req zone={name} {args}; }}\n"
        ));
    }
    http.push_str("}\n");
    http
}

fn proxy_yaml(upstream: SocketAddr) -> String {
    let mut yaml = format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nclusters: [{{name: backend, endpoints: [{{address: \"{upstream}\"}}]}}]\nroutes:\n  - {{name: free, prefix: /free, cluster: backend}}\n"
    );
    for (name, _, block) in CASES {
        yaml.push_str(&format!(
            "  - name: {name}\n    prefix: /{name}\n    cluster: backend\n    limit_req: {block}\n"
        ));
    }
    yaml
}

/// One answer: its status, how long it took, and the proxy's delay header.
#[derive(Debug, Clone)]
struct Seen {
    status: u16,
    elapsed: Duration,
    delay_header: Option<u64>,
}

/// Sends `BURST` requests to `path` on each server at once; the answers per server.
fn burst(servers: &[SocketAddr], path: &str) -> Vec<Vec<Seen>> {
    let connections: Vec<Vec<Connection>> = servers
        .iter()
        .map(|addr| {
            (0..BURST)
                .map(|_| {
                    let connection = Connection::open(addr);
                    let warm = connection.send("GET", "/free", &[]).expect("warm-up");
                    assert_eq!(warm.status, 200, "{warm:?}");
                    connection
                })
                .collect()
        })
        .collect();
    let start = Arc::new(Barrier::new(servers.len() * BURST));
    std::thread::scope(|scope| {
        let handles: Vec<Vec<_>> = connections
            .iter()
            .map(|per_server| {
                per_server
                    .iter()
                    .map(|connection| {
                        let start = Arc::clone(&start);
                        scope.spawn(move || {
                            start.wait();
                            let sent = Stopwatch::start();
                            let response = connection.send("GET", path, &[]).expect("an answer");
                            Seen {
                                status: response.status,
                                elapsed: sent.elapsed(),
                                delay_header: response
                                    .header("x-tollgate-delay-ms")
                                    .and_then(|v| v.parse().ok()),
                            }
                        })
                    })
                    .collect()
            })
            .collect();
        handles
            .into_iter()
            .map(|per_server| {
                let mut seen: Vec<Seen> = per_server
                    .into_iter()
                    .map(|h| h.join().expect("the client finishes"))
                    .collect();
                seen.sort_by_key(|s| (s.status, s.elapsed));
                seen
            })
            .collect()
    })
}

#[test]
fn limit_req_delays_and_rejects_as_nginx_does() {
    let dir = TempDir::new("limit-req-nginx");
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).expect("www");
    for name in ["free", "delay", "shape", "nodelay"] {
        std::fs::write(www.join(name), "ok\n").expect("a page");
    }
    let nginx = Nginx::start(&dir.path().join("nginx"), &nginx_http(&www));
    let upstream = Upstream::spawn();
    let config = dir.write("proxy.yaml", &proxy_yaml(upstream.addr));
    let proxy = LoggedChild::proxy(
        &[
            "--config",
            config.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.path().join("proxy.log"),
        false,
    );
    for (name, args, _) in CASES {
        let seen = burst(&[nginx.addr, proxy.addr], &format!("/{name}"));
        let (theirs, ours) = (&seen[0], &seen[1]);
        let statuses = |s: &[Seen]| s.iter().map(|x| x.status).collect::<Vec<_>>();
        assert_eq!(
            statuses(ours),
            statuses(theirs),
            "{name} ({args}): statuses differ\nnginx: {theirs:#?}\nproxy: {ours:#?}"
        );
        assert!(
            statuses(ours).contains(&429),
            "{name}: the burst goes past the limit: {ours:#?}"
        );
        for (t, o) in theirs.iter().zip(ours).filter(|(t, _)| t.status == 200) {
            let gap = t.elapsed.abs_diff(o.elapsed);
            assert!(
                gap <= TOLERANCE,
                "{name} ({args}): waited {:?} where nginx waited {:?}\nnginx: {theirs:#?}\nproxy: {ours:#?}",
                o.elapsed,
                t.elapsed
            );
            if let Some(ms) = o.delay_header {
                let told = Duration::from_millis(ms);
                assert!(
                    told.abs_diff(o.elapsed) <= TOLERANCE && !told.is_zero(),
                    "{name}: said it waited {told:?}, took {:?}",
                    o.elapsed
                );
            }
        }
        let delayed = ours.iter().filter(|s| s.delay_header.is_some()).count();
        let waited = theirs
            .iter()
            .filter(|s| s.status == 200 && s.elapsed >= TOLERANCE)
            .count();
        assert_eq!(
            delayed, waited,
            "{name}: the proxy marks as delayed the requests nginx made wait\nnginx: {theirs:#?}\nproxy: {ours:#?}"
        );
    }
}
