//! The example reqwest client against the example app served on loopback (real time, bounded):
//! more requests than a second's limit all end in 200, and a 429 is waited out and retried.

use std::net::SocketAddr;
use std::time::Duration;

use axum_app::client::{fetch, polite_client};
use reqwest_middleware::reqwest::StatusCode;

async fn start() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum_app::app().into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// The app's count of decisions with `outcome` on the per-second limit.
async fn decisions(base: &str, outcome: &str) -> u64 {
    let text = reqwest_middleware::reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!(
        "tollgate_middleware_decisions_total{{limit=\"per-second\",outcome=\"{outcome}\"}} "
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn twice_a_seconds_limit_of_requests_all_pass_by_waiting_for_the_reset() {
    let base = start().await;
    let client = polite_client(3, Duration::from_secs(10));
    let count = 2 * usize::try_from(axum_app::PER_SECOND).unwrap() + 1;
    let statuses = fetch(&client, &base, "/", count).await.unwrap();
    assert_eq!(statuses, vec![StatusCode::OK; count]);
    assert_eq!(
        decisions(&base, "allowed").await,
        u64::try_from(count).unwrap()
    );
}

#[tokio::test]
async fn a_request_refused_with_retry_after_is_retried_once_the_window_resets() {
    let base = start().await;
    let plain = reqwest_middleware::reqwest::Client::new();
    // A query that costs a second's whole quota, from a client without the
    // middleware; then the polite client's request is refused (429,
    // Retry-After: 1) and retried, unless the window second turned over
    // between the two: then the pair is tried again (at most three times).
    for attempt in 0..3 {
        let spend = plain
            .post(format!("{base}/graphql?cost={}", axum_app::PER_SECOND))
            .send()
            .await
            .unwrap();
        assert_eq!(spend.status(), StatusCode::OK, "attempt {attempt}");
        let denied = decisions(&base, "denied").await;
        let client = polite_client(3, Duration::from_secs(10));
        let statuses = fetch(&client, &base, "/", 1).await.unwrap();
        assert_eq!(statuses, [StatusCode::OK], "attempt {attempt}");
        match decisions(&base, "denied").await - denied {
            0 => continue,
            1 => return,
            more => panic!("{more} refusals of one retried request"),
        }
    }
    panic!("the window turned over between the two requests three times");
}
