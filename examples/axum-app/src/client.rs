//! A reqwest client that backs off from the app: [`polite_client`] honours `Retry-After` and the
//! `RateLimit` fields through tollgate-client's `reqwest-middleware` middleware.

use std::time::Duration;

use reqwest_middleware::reqwest::{Client, StatusCode};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tollgate_client::{BackoffMiddleware, ClientPolicy};

/// A reqwest client with the backoff middleware: it waits for the reset
/// when the app says `remaining` is 0, retries a 429 after its
/// `Retry-After` `T` (spread over `[T, 2T]`) at most `max_retries` times,
/// and gives up on a request after `timeout` in all.
pub fn polite_client(max_retries: u32, timeout: Duration) -> ClientWithMiddleware {
    let http = Client::builder()
        .timeout(timeout)
        .build()
        .expect("a client without TLS or proxies builds");
    ClientBuilder::new(http)
        .with(BackoffMiddleware::new(
            ClientPolicy::default().with_max_retries(max_retries),
        ))
        .build()
}

/// Sends `GET {base}{path}` `count` times, one after the other, and
/// returns each final status.
pub async fn fetch(
    client: &ClientWithMiddleware,
    base: &str,
    path: &str,
    count: usize,
) -> Result<Vec<StatusCode>, reqwest_middleware::Error> {
    let mut statuses = Vec::with_capacity(count);
    for _ in 0..count {
        let response = client.get(format!("{base}{path}")).send().await?;
        statuses.push(response.status());
    }
    Ok(statuses)
}
