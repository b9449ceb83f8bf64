//! `tollgate serve --worker-threads 2`: two threads with a runtime each serve the gRPC listener; clients on both are answered, `--max-connections` holds over both, a reload reaches every connection and SIGTERM drains a call in flight. With a single Redis, each worker calls it on a connection of its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use tollgate_protocol::rls::{RlsClient, wire};
use tollgate_testkit::budget::{BUDGET, poll_until, poll_until_async};
use tollgate_testkit::http::metric_value;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, Server};

/// `/a` with `per_hour` calls an hour, and a shaper: one call each 5 s
/// (12 a minute), the next one held until its turn.
fn limits(per_hour: u32) -> String {
    format!(
        "domain: edge
descriptors:
  - key: path
    rate_limit: {{unit: hour, requests_per_unit: {per_hour}}}
  - key: tenant
    rate_limit: {{unit: minute, requests_per_unit: 12, algorithm: leaky_bucket, burst: 1, delay: 0}}
"
    )
}

/// Starts `serve --worker-threads 2` on `limits(100)` plus `flags`: the server, its gRPC and HTTP addresses.
fn start(dir: &TempDir, flags: &[&str]) -> (Server, SocketAddr, SocketAddr) {
    let config = dir.limits(&limits(100));
    let config = config.to_str().expect("a UTF-8 path");
    let mut args = vec![
        "serve",
        "--config",
        config,
        "--log-level",
        "warn",
        "--worker-threads",
        "2",
        "--drain-delay",
        "0s",
    ];
    args.extend_from_slice(&EPHEMERAL_ADDRS);
    args.extend_from_slice(flags);
    let server = Server::spawn(&args);
    let grpc = server.address().parse().expect("an address");
    let http = server
        .line_after("http listening on ")
        .parse()
        .expect("an address");
    (server, grpc, http)
}

/// The names of the threads of process `pid` (Linux's `/proc`).
fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
    let mut names: Vec<String> = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    names.sort();
    names
}

/// A gRPC connection of its own (tonic opens one per channel).
async fn connect(grpc: SocketAddr) -> RlsClient {
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .expect("a valid URL")
        .connect_timeout(BUDGET)
        .timeout(BUDGET)
        .connect()
        .await
        .expect("connected");
    RlsClient::new(channel)
}

/// One hit on `key=value`: the first status.
async fn hit(client: &RlsClient, key: &str, value: &str) -> wire::DescriptorStatus {
    let request = wire::RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![wire::RateLimitDescriptor {
            entries: vec![wire::Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            }],
            limit: None,
            hits_addend: None,
            is_negative_hits: false,
        }],
        hits_addend: 1,
    };
    let response = client
        .should_rate_limit(request)
        .await
        .expect("the call succeeds");
    response.statuses.into_iter().next().expect("one status")
}

fn limit_of(status: &wire::DescriptorStatus) -> u32 {
    status
        .current_limit
        .as_ref()
        .map_or(0, |limit| limit.requests_per_unit)
}

/// Eight clients, each on its own connection, hit `path=/a` once: every
/// answer is OK under the limit of 100, and together they counted one
/// counter eight times, whichever worker served each. Returns the clients.
async fn eight_clients_hit_one_counter(grpc: SocketAddr) -> Vec<RlsClient> {
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(connect(grpc).await);
    }
    let mut remaining = Vec::new();
    for client in &clients {
        let status = hit(client, "path", "/a").await;
        assert_eq!(status.code, wire::CODE_OK, "{status:?}");
        assert_eq!(limit_of(&status), 100, "{status:?}");
        remaining.push(status.limit_remaining);
    }
    remaining.sort_unstable();
    assert_eq!(remaining, (92..100).collect::<Vec<u32>>());
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_answer_every_client_and_a_reload_reaches_every_connection() {
    let dir = TempDir::new("serve-workers-reload");
    let (server, grpc, _) = start(&dir, &[]);
    let clients = eight_clients_hit_one_counter(grpc).await;
    // They were served by the gRPC workers' threads.
    let names = thread_names(server.child.id());
    for worker in ["tollgate-grpc-0", "tollgate-grpc-1"] {
        assert!(names.iter().any(|name| name == worker), "{names:?}");
    }

    dir.limits(&limits(200));
    let status = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let fresh = connect(grpc).await;
    let reloaded = poll_until_async(BUDGET, || async {
        (limit_of(&hit(&fresh, "path", "/b").await) == 200).then_some(())
    })
    .await;
    assert!(
        reloaded.is_some(),
        "the reload never reached a new connection"
    );
    for client in &clients {
        let status = hit(client, "path", "/a").await;
        assert_eq!(limit_of(&status), 200, "{status:?}");
    }
}

/// Opens a connection to `grpc` and sends HTTP/2's client preface and an empty SETTINGS frame.
fn open_http2(grpc: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(grpc).expect("the kernel's backlog takes it");
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .expect("sent");
    stream
}

/// Whether the server answered `stream`'s preface with a frame within `wait`.
fn served(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).expect("a read timeout");
    let mut frame = [0u8; 9];
    match stream.read_exact(&mut frame) {
        Ok(()) => true,
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            false
        }
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn max_connections_holds_over_both_workers_and_the_gauge_counts_open_connections() {
    let dir = TempDir::new("serve-workers-bounds");
    let (server, grpc, http) = start(&dir, &["--max-connections", "3"]);
    let open = r#"ratelimit_connections{listener="grpc"}"#;
    assert_eq!(metric_value(http, open), 0, "no connection is open yet");

    let mut first = open_http2(grpc);
    assert!(served(&mut first, BUDGET));
    let mut others: Vec<TcpStream> = (0..2).map(|_| open_http2(grpc)).collect();
    for stream in &mut others {
        assert!(served(stream, BUDGET));
    }
    assert_eq!(metric_value(http, open), 3);
    let mut fourth = open_http2(grpc);
    assert!(
        !served(&mut fourth, Duration::from_millis(500)),
        "a fourth connection was served over the cap of 3"
    );
    assert_eq!(metric_value(http, open), 3);

    drop(first);
    assert!(served(&mut fourth, BUDGET), "served once a slot is free");
    drop(fourth);
    drop(others);
    let closed = poll_until(BUDGET, || (metric_value(http, open) == 0).then_some(()));
    assert!(closed.is_some(), "the gauge falls back to 0");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_call_held_on_a_worker_then_exits_0() {
    let dir = TempDir::new("serve-workers-drain");
    let (mut server, grpc, http) = start(&dir, &[]);
    let client = connect(grpc).await;
    let first = hit(&client, "tenant", "t").await;
    assert_eq!(first.code, wire::CODE_OK, "{first:?}");
    // The next call in the same 5 s is held until its turn.
    let held = tokio::spawn(async move { hit(&client, "tenant", "t").await });
    let holding = tokio::task::spawn_blocking(move || {
        poll_until(BUDGET, || {
            (metric_value(http, "ratelimit_shaped_delay_seconds_count") >= 1).then_some(())
        })
    })
    .await
    .expect("the poll runs");
    assert!(holding.is_some(), "the second call is never held");

    server.terminate();
    let answer = tokio::time::timeout(BUDGET, held)
        .await
        .expect("answered within the budget")
        .expect("the call's task runs");
    assert_eq!(answer.code, wire::CODE_OK, "{answer:?}");
    let (code, _, stderr) = tokio::task::spawn_blocking(move || server.finish())
        .await
        .expect("the wait runs");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_redis_store_each_worker_calls_on_a_connection_of_its_own() {
    let redis = RedisServer::start();
    let clients_of_redis = || {
        let info = redis.cli(&["INFO", "clients"]);
        let n: usize = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .expect("INFO clients names connected_clients")
            .trim()
            .parse()
            .unwrap();
        n - 1 // the redis-cli asking
    };
    let dir = TempDir::new("serve-workers-redis");
    let (server, grpc, http) = start(&dir, &["--store", &redis.url()]);
    // One counter in Redis, exact whichever worker and connection counted.
    eight_clients_hit_one_counter(grpc).await;
    // Served by the gRPC workers' own threads, each on its own connection
    // (opened on its first call) beside the one the instance connected
    // with: at most one per worker more.
    let names = thread_names(server.child.id());
    assert!(
        names.iter().any(|name| name.starts_with("tollgate-grpc")),
        "{names:?}"
    );
    let connections = clients_of_redis();
    assert!(
        (2..=3).contains(&connections),
        "one connection, plus one per worker that served: {connections}"
    );
    // The pool gauge counts every one of them, the workers' too.
    let gauge = metric_value(http, "ratelimit_redis_pool_cx_active");
    assert_eq!(
        usize::try_from(gauge).unwrap(),
        connections,
        "the gauge against Redis's own count"
    );
    assert_eq!(
        usize::try_from(metric_value(http, "ratelimit_redis_pool_cx_total")).unwrap(),
        connections,
        "made since start: the first and each a worker opened"
    );
}
