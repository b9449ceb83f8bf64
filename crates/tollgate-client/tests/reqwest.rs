//! The client as `reqwest-middleware` middleware, against a real axum server on loopback whose
//! answers each test scripts, on tokio's paused time: never before `Retry-After`, at most `2T`
//! after it, bounded retries, and a wait for an empty window's reset.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use parking_lot::Mutex;
use reqwest_middleware::reqwest::{Client, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tollgate_client::{BackoffMiddleware, ClientPolicy, TokioClock};
use tollgate_core::{Clock, Timestamp};

/// The arrival time of each request the server saw.
#[derive(Clone, Default)]
struct Arrivals(Arc<Mutex<Vec<Timestamp>>>);

impl Arrivals {
    /// The gaps between successive arrivals.
    fn gaps(&self) -> Vec<Duration> {
        let times = self.0.lock();
        times
            .windows(2)
            .map(|w| w[1].saturating_since(w[0]))
            .collect()
    }
}

/// A status and header fields.
type Answer = (u16, Vec<(&'static str, &'static str)>);

/// Serves `GET /` on a free loopback port, answering request `n` (from 0)
/// with `answer(n)`; arrivals are timed on tokio's (paused) clock.
async fn serve(arrivals: &Arrivals, answer: fn(usize) -> Answer) -> SocketAddr {
    let log = arrivals.clone();
    let clock = TokioClock::new();
    let app = Router::new().route(
        "/",
        get(move || {
            let n = {
                let mut times = log.0.lock();
                times.push(clock.now());
                times.len() - 1
            };
            let (status, headers) = answer(n);
            let mut response = (StatusCode::from_u16(status).unwrap(), "").into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            async move { response }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn client(policy: ClientPolicy) -> ClientWithMiddleware {
    // No idle-connection timer: on paused time it would be the next timer to jump to.
    let http = Client::builder().pool_idle_timeout(None).build().unwrap();
    ClientBuilder::new(http)
        .with(BackoffMiddleware::new(policy))
        .build()
}

fn policy(seed: u64) -> ClientPolicy {
    ClientPolicy::default()
        .with_clock(Arc::new(TokioClock::new()))
        .with_seed(seed)
        .with_adaptive(None)
}

async fn fetch(client: &ClientWithMiddleware, addr: SocketAddr) -> Response {
    client.get(format!("http://{addr}/")).send().await.unwrap()
}

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn a_429_is_retried_after_retry_after_and_within_twice_it() {
    for seed in 0..5 {
        let arrivals = Arrivals::default();
        let addr = serve(&arrivals, |n| match n {
            0 => (429, vec![("retry-after", "2")]),
            _ => (200, vec![]),
        })
        .await;
        let response = fetch(&client(policy(seed)), addr).await;
        assert_eq!(response.status(), 200);
        let gaps = arrivals.gaps();
        assert_eq!(gaps.len(), 1, "one retry");
        assert!(
            gaps[0] >= 2 * SEC && gaps[0] <= 4 * SEC,
            "seed {seed}: {gaps:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_max_retries_and_the_last_429_is_returned() {
    let arrivals = Arrivals::default();
    let addr = serve(&arrivals, |_| (429, vec![("retry-after", "1")])).await;
    let response = fetch(&client(policy(1).with_max_retries(2)), addr).await;
    assert_eq!(response.status(), 429);
    let gaps = arrivals.gaps();
    assert_eq!(gaps.len(), 2, "the first try and two retries");
    assert!(
        gaps.iter().all(|gap| *gap >= SEC && *gap <= 2 * SEC),
        "{gaps:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn after_an_empty_window_the_next_request_waits_for_its_reset() {
    let arrivals = Arrivals::default();
    let addr = serve(&arrivals, |n| match n {
        0 => (
            200,
            vec![
                ("ratelimit-limit", "10"),
                ("ratelimit-remaining", "0"),
                ("ratelimit-reset", "5"),
            ],
        ),
        _ => (200, vec![]),
    })
    .await;
    let client = client(policy(2));
    assert_eq!(fetch(&client, addr).await.status(), 200);
    assert_eq!(fetch(&client, addr).await.status(), 200);
    let gaps = arrivals.gaps();
    assert_eq!(gaps.len(), 1);
    assert!(gaps[0] >= 5 * SEC, "{gaps:?}");
}
