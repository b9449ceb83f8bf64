//! Bursts of concurrent calls for the `redis_*` tests: how many of them a limit admits.

use tollgate_protocol::rls::wire;
use tonic::transport::Channel;

use crate::rls_client::{call, is_ok};

/// Sends `total` calls of `request`, all at once, spread over `channels`; how many were OK.
pub async fn admitted(
    channels: &[Channel],
    request: &wire::RateLimitRequest,
    total: usize,
) -> usize {
    let tasks: Vec<_> = (0..total)
        .map(|i| {
            let channel = channels[i % channels.len()].clone();
            let request = request.clone();
            tokio::spawn(async move { is_ok(&call(&channel, request).await) })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        ok += usize::from(task.await.expect("the task finishes"));
    }
    ok
}
