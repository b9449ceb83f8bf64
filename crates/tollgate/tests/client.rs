//! `tollgate-client` against a real `tollgate serve`: after the first 429 a
//! client with the backoff layer never sends what the limit would refuse,
//! and finishes its work.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use tollgate_client::{BackoffLayer, ClientPolicy};
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::window;
use tower::{Layer, Service, ServiceExt};

const LIMITS: &str = "domain: client\ndescriptors:\n  - key: job\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n";
const JOBS: usize = 15;

fn check(http: &str) -> Request<Full<Bytes>> {
    Request::post(format!("http://{http}/v1/check"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"domain":"client","descriptors":[{"job":"crawl"}]}"#,
        )))
        .expect("a request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_first_429_a_backoff_client_is_never_refused_and_finishes() {
    let dir = TempDir::new("client-serve");
    let limits = dir.write("limits.yaml", LIMITS);
    let server = Server::serve(
        &limits,
        "memory",
        &[
            "--limit-headers",
            "--ietf-headers",
            "--retry-after",
            "--log-level",
            "warn",
        ],
    );
    let _grpc = server.line_after("listening on ");
    let http = server.line_after("http listening on ");
    let raw = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();

    // Another caller spends the window, so the layered client starts with a
    // 429: the five and the first attempt in one second.
    window::wait_clear_of_window_end(Duration::from_secs(1), Duration::from_millis(500));
    for _ in 0..5 {
        raw.request(check(&http)).await.expect("serve answers");
    }

    // What reaches the server, attempt by attempt, under the layer.
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&statuses);
    let counted = tower::service_fn(move |request: Request<Full<Bytes>>| {
        let raw = raw.clone();
        let log = Arc::clone(&log);
        async move {
            let response = raw.request(request).await?;
            log.lock().push(response.status());
            Ok::<_, hyper_util::client::legacy::Error>(response)
        }
    });
    let mut client = BackoffLayer::new(ClientPolicy::default()).layer(counted);
    let run = async {
        for job in 0..JOBS {
            let response = client
                .ready()
                .await
                .expect("ready")
                .call(check(&http))
                .await
                .expect("an answer");
            assert_eq!(response.status(), StatusCode::OK, "job {job}");
        }
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("15 jobs at 5/s finish well within 30 s");
    let statuses = statuses.lock().clone();
    assert_eq!(
        statuses.first(),
        Some(&StatusCode::TOO_MANY_REQUESTS),
        "the window was spent"
    );
    assert!(
        statuses[1..].iter().all(|s| *s == StatusCode::OK),
        "after the first 429, nothing the limit refuses: {statuses:?}"
    );
    assert_eq!(statuses.len(), JOBS + 1, "one retry, for the first 429");
}
