//! A client with the backoff layer against a local server that allows 3 requests per second.
//!
//! `cargo run -p tollgate-client --example backoff` prints each answer and
//! when it arrived: the client spreads its requests as `remaining` nears 0
//! and waits out the one 429 it may get, so every request ends in a 200.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate_client::{BackoffLayer, ClientPolicy, TokioClock};
use tollgate_core::Clock;
use tower::{Layer, ServiceExt};

const LIMIT: u64 = 3;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = TokioClock::new();
    let addr = serve_fixed_window(clock).await?;
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = BackoffLayer::new(ClientPolicy::default().with_clock(Arc::new(clock))).layer(http);
    for i in 0..10 {
        let request = http::Request::get(format!("http://{addr}/")).body(Full::default())?;
        let response = client.clone().oneshot(request).await?;
        let at = clock.now().as_nanos() as f64 / 1e9;
        let ratelimit = response
            .headers()
            .get("ratelimit")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        println!(
            "{at:6.2}s  request {i}: {}  RateLimit: {ratelimit}",
            response.status()
        );
    }
    Ok(())
}

/// Serves a fixed window of [`LIMIT`] requests per second with the IETF
/// `RateLimit` field and `Retry-After`; returns its address.
async fn serve_fixed_window(clock: TokioClock) -> std::io::Result<std::net::SocketAddr> {
    let used = Arc::new(AtomicU64::new(0));
    let app = Router::new().route(
        "/",
        get(move || {
            let used = Arc::clone(&used);
            async move {
                let now = Duration::from_nanos(clock.now().as_nanos());
                let window = now.as_secs();
                // The high bits hold the window, the low 32 the count in it.
                let word = used.load(Ordering::SeqCst);
                let count = if word >> 32 == window {
                    word & 0xffff_ffff
                } else {
                    0
                };
                used.store((window << 32) | (count + 1), Ordering::SeqCst);
                let reset = (Duration::from_secs(window + 1) - now).as_secs_f64().ceil() as u64;
                let mut headers = HeaderMap::new();
                if count >= LIMIT {
                    headers.insert("retry-after", reset.into());
                    return (StatusCode::TOO_MANY_REQUESTS, headers);
                }
                let item = format!("\"per-second\";r={};t={reset}", LIMIT - count - 1);
                headers.insert("ratelimit", item.parse().expect("a header value"));
                (StatusCode::OK, headers)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}
