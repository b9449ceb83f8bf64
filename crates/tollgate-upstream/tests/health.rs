//! Active health checks against real HTTP servers on loopback.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tollgate_upstream::{Cluster, ClusterConfig, HealthChecker};

/// A loopback HTTP server answering every request with the status it is told to.
struct Backend {
    address: SocketAddr,
    status: Arc<AtomicU16>,
    paths: Arc<parking_lot::Mutex<Vec<String>>>,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn backend(status: u16, delay: Duration) -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let status = Arc::new(AtomicU16::new(status));
    let paths = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let hits = Arc::new(AtomicUsize::new(0));
    let (s, p, h) = (status.clone(), paths.clone(), hits.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (s, p, h) = (s.clone(), p.clone(), h.clone());
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let (s, p, h) = (s.clone(), p.clone(), h.clone());
                    async move {
                        h.fetch_add(1, Ordering::SeqCst);
                        p.lock().push(format!(
                            "{} {}",
                            request.uri().path(),
                            request
                                .headers()
                                .get("host")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                        ));
                        tokio::time::sleep(delay).await;
                        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
                        *response.status_mut() =
                            hyper::StatusCode::from_u16(s.load(Ordering::SeqCst)).unwrap();
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Backend {
        address,
        status,
        paths,
        hits,
        task,
    }
}

/// An address nothing listens on.
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

fn cluster(addresses: &[SocketAddr], health: &str) -> Cluster {
    let endpoints: String = addresses
        .iter()
        .map(|a| format!("  - address: \"{a}\"\n"))
        .collect();
    let yaml = format!(
        "name: hc\nhealthy_panic_threshold: 0\nendpoints:\n{endpoints}health_check: {health}\n"
    );
    Cluster::builder(ClusterConfig::from_yaml(&yaml).unwrap())
        .seed(3)
        .build()
        .unwrap()
}

fn healthy(cluster: &Cluster) -> Vec<bool> {
    cluster.endpoints().iter().map(|e| e.healthy).collect()
}

#[tokio::test]
async fn first_check_decides_then_thresholds_apply() {
    let good = backend(200, Duration::ZERO).await;
    let bad = backend(503, Duration::ZERO).await;
    let cluster = cluster(
        &[good.address, bad.address],
        "{path: /healthz, unhealthy_threshold: 2, healthy_threshold: 2}",
    );
    let checker = HealthChecker::new(&cluster).unwrap();
    assert_eq!(healthy(&cluster), [true, true], "healthy until checked");
    checker.check_once().await;
    assert_eq!(healthy(&cluster), [true, false], "the first check decides");
    assert!((0..6).all(|_| cluster.pick(None).unwrap().index() == 0));

    good.status.store(500, Ordering::SeqCst);
    bad.status.store(200, Ordering::SeqCst);
    checker.check_once().await;
    assert_eq!(healthy(&cluster), [true, false], "one result is not enough");
    checker.check_once().await;
    assert_eq!(healthy(&cluster), [false, true]);
    assert!((0..6).all(|_| cluster.pick(None).unwrap().index() == 1));

    let seen = good.paths.lock().clone();
    assert_eq!(seen[0], format!("/healthz {}", good.address));
}

#[tokio::test]
async fn refused_and_slow_endpoints_fail_and_expected_statuses_count() {
    let slow = backend(200, Duration::from_secs(5)).await;
    let redirect = backend(302, Duration::ZERO).await;
    let refused = closed_port().await;
    let cluster = cluster(
        &[slow.address, redirect.address, refused],
        "{path: /, timeout: 200ms, host: svc.local, expected_statuses: [{start: 200, end: 400}]}",
    );
    let checker = HealthChecker::new(&cluster).unwrap();
    tokio::time::timeout(Duration::from_secs(5), checker.check_once())
        .await
        .expect("a round takes about one timeout");
    assert_eq!(healthy(&cluster), [false, true, false]);
    assert_eq!(redirect.paths.lock()[0], "/ svc.local");
}

/// How far paused time moves at once while a test waits: a check over loopback ends within a few steps, far inside any interval or timeout here.
const STEP: Duration = Duration::from_millis(5);

/// Lets `span` of paused time pass in [`STEP`]s, so every task (a round of checks, the backend) runs in it as it would in real time.
async fn pass(span: Duration) {
    for _ in 0..span.as_nanos() / STEP.as_nanos() {
        tokio::time::sleep(STEP).await;
    }
}

/// Waits, within 10 s of paused time, until `cluster`'s endpoints read `expected`; panics with `what` if they never do.
async fn until_health(cluster: &Cluster, expected: &[bool], what: &str) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while healthy(cluster) != expected {
            tokio::time::sleep(STEP).await;
        }
    })
    .await
    .expect(what);
}

#[tokio::test(start_paused = true)]
async fn the_spawned_task_checks_every_interval_and_stops_when_dropped() {
    let flaky = backend(503, Duration::ZERO).await;
    let interval = Duration::from_secs(1);
    let cluster = cluster(
        &[flaky.address],
        "{path: /, interval: 1s, healthy_threshold: 1}",
    );
    let task = HealthChecker::new(&cluster).unwrap().spawn();
    until_health(&cluster, &[false], "never marked unhealthy").await;
    flaky.status.store(200, Ordering::SeqCst);
    until_health(&cluster, &[true], "never marked healthy again").await;
    // A round has just ended, so the next three start 1, 2 and 3 intervals from now.
    let before = flaky.hits.load(Ordering::SeqCst);
    pass(interval * 7 / 2).await;
    assert_eq!(
        flaky.hits.load(Ordering::SeqCst),
        before + 3,
        "one check per interval"
    );
    drop(task);
    let after_stop = flaky.hits.load(Ordering::SeqCst);
    pass(interval * 7 / 2).await;
    assert_eq!(
        flaky.hits.load(Ordering::SeqCst),
        after_stop,
        "no checks after drop"
    );
}

#[test]
fn no_health_check_config_means_no_checker() {
    let cluster = Cluster::builder(
        ClusterConfig::from_yaml("name: a\nendpoints: [{address: 'h:1'}]\n").unwrap(),
    )
    .build()
    .unwrap();
    assert!(HealthChecker::new(&cluster).is_none());
}
