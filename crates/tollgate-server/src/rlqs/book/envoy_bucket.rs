//! The token bucket Envoy is sent for a share, and what its fresh bucket holds.

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::TokenBucket;

use super::super::bucket::Rate;

/// The tokens Envoy starts a token bucket of `share` with (it starts full):
/// `⌊burst × share / R⌋`, at least 1; none for a share of 0 (deny all).
pub(super) fn fresh_tokens(rate: &Rate, share: u64) -> u64 {
    if share == 0 {
        return 0;
    }
    let tokens = u128::from(rate.burst) * u128::from(share) / u128::from(rate.requests.max(1));
    u64::try_from(tokens.max(1)).unwrap_or(u64::MAX)
}

/// Envoy's token bucket for a share of `share` requests per window of
/// `rate`, holding at most `tokens` (at most [`fresh_tokens`] of the share:
/// a grown share's bucket may be smaller until the counter pays the full
/// one). Envoy 1.40 refills it continuously at `tokens_per_fill /
/// fill_interval` up to `max_tokens`, so under steady demand it admits the
/// share per window whatever `tokens` is; only bursts are held to it.
pub(super) fn token_bucket(rate: &Rate, share: u64, tokens: u64) -> TokenBucket {
    let window = rate.window.as_nanos().max(1);
    let fill_seconds = rate.window.as_nanos().div_ceil(1_000_000_000).max(1);
    let per_fill = u128::from(share) * fill_seconds * 1_000_000_000 / window;
    TokenBucket {
        max_tokens: u32::try_from(tokens.clamp(1, fresh_tokens(rate, share).max(1)))
            .unwrap_or(u32::MAX),
        tokens_per_fill: Some(envoy_types::pb::google::protobuf::UInt32Value {
            value: u32::try_from(per_fill.max(1)).unwrap_or(u32::MAX),
        }),
        fill_interval: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: i64::try_from(fill_seconds).unwrap_or(i64::MAX),
            nanos: 0,
        }),
    }
}

pub(super) fn protobuf_duration(d: Duration) -> envoy_types::pb::google::protobuf::Duration {
    envoy_types::pb::google::protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}
