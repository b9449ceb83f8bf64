//! Usage reports as an Envoy's `rate_limit_quota` filter sends them, for tests and benches of the quota service.

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};

/// One report of `domain` naming `buckets` buckets `{key: t0}`, `{key: t1}`, …, each with one request allowed in the last second.
pub fn usage_report(domain: &str, key: &str, buckets: u64) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: (0..buckets)
            .map(|i| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: [(key.to_owned(), format!("t{i}"))].into(),
                }),
                time_elapsed: Some(envoy_types::pb::google::protobuf::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                num_requests_allowed: 1,
                num_requests_denied: 0,
            })
            .collect(),
    }
}
