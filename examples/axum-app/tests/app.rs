//! The example app's router in-process: 200s with `RateLimit` headers, then a 429 with the full contract;
//! a costed query spends the quota at once; metrics count both.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

fn from(client: &str, method: &str, uri: &str) -> Request<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let addr: SocketAddr = client.parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(addr));
    request
}

fn header<'a>(response: &'a axum::response::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", response.headers()))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn five_200s_then_a_429_with_the_full_header_contract() {
    let app = axum_app::app();
    for i in 0..axum_app::PER_SECOND {
        let response = app
            .clone()
            .oneshot(from("10.0.0.1:5000", "GET", "/"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        // A window second can turn over between two requests: then r starts again.
        let ratelimit = header(&response, "ratelimit");
        assert!(ratelimit.starts_with("\"per-second\";r="), "{ratelimit}");
        assert_eq!(
            header(&response, "ratelimit-policy"),
            "\"per-second\";q=5;w=1, \"per-minute\";q=100;w=60"
        );
    }
    // Up to one window turn-over is allowed for; a sixth and seventh in the same
    // second cannot both pass.
    let mut refused = None;
    for _ in 0..axum_app::PER_SECOND + 1 {
        let response = app
            .clone()
            .oneshot(from("10.0.0.1:5000", "GET", "/"))
            .await
            .unwrap();
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(response);
            break;
        }
    }
    let refused = refused.expect("a 429 within a second's quota");
    assert_eq!(header(&refused, "ratelimit-remaining"), "0");
    assert_eq!(header(&refused, "ratelimit-limit"), "5");
    let retry: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=1).contains(&retry), "{retry}");
    assert!(header(&refused, "ratelimit").starts_with("\"per-second\";r=0;t="));
    // Another client is not affected.
    let other = app
        .clone()
        .oneshot(from("10.0.0.2:5000", "GET", "/"))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    let metrics = app
        .clone()
        .oneshot(from("10.0.0.3:5000", "GET", "/metrics"))
        .await
        .unwrap();
    let text = String::from_utf8(
        metrics
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        text.contains(
            "tollgate_middleware_decisions_total{limit=\"per-second\",outcome=\"denied\"} 1"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_query_that_costs_more_than_the_window_holds_is_refused_without_retry_after() {
    let app = axum_app::app();
    let response = app
        .clone()
        .oneshot(from("10.0.0.9:5000", "POST", "/graphql?cost=6"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().get("retry-after").is_none());
    // A fixed window counts refused hits too (upstream's semantics), so a fresh client.
    let response = app
        .clone()
        .oneshot(from("10.0.0.10:5000", "POST", "/graphql?cost=5"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        header(&response, "ratelimit").contains(";r=0;"),
        "cost 5 spent all 5"
    );
}

#[tokio::test]
async fn every_key_of_a_tenant_shares_its_limit_and_refusals_are_the_apps_json() {
    let app = axum_app::app();
    let with_key = |key: &str| {
        let mut request = from("10.0.0.20:5000", "GET", "/api/orders");
        request
            .headers_mut()
            .insert("x-api-key", key.parse().unwrap());
        app.clone().oneshot(request)
    };
    // acme's two keys draw on one bucket of TENANT_BURST.
    for key in ["key-acme-1", "key-acme-2", "key-acme-1"] {
        assert_eq!(
            with_key(key).await.unwrap().status(),
            StatusCode::OK,
            "{key}"
        );
    }
    let refused = with_key("key-acme-2").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "content-type"), "application/json");
    assert!(header(&refused, "ratelimit").starts_with("\"per-tenant\";r=0;"));
    let retry_after: u64 = header(&refused, "retry-after").parse().unwrap();
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["error"], "rate_limited");
    assert_eq!(json["retry_after_seconds"], retry_after);
    // Another tenant, from the same address, is not affected.
    assert_eq!(
        with_key("key-globex").await.unwrap().status(),
        StatusCode::OK
    );
}
