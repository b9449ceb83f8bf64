//! Backs off from the example app: `cargo run -p axum-app --bin client [BASE] [COUNT]`
//! (default `http://127.0.0.1:3000`, 12 requests to `/`) prints each final status and the
//! app's `RateLimit` field; requests past the second's limit wait for its reset instead of failing.

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:3000".to_owned());
    let count: usize = args.next().map_or(Ok(12), |n| n.parse())?;
    let client = axum_app::client::polite_client(3, Duration::from_secs(30));
    for i in 0..count {
        let response = client.get(format!("{base}/")).send().await?;
        let ratelimit = response
            .headers()
            .get("ratelimit")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        println!("request {i}: {}  RateLimit: {ratelimit}", response.status());
    }
    Ok(())
}
