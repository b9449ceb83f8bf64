//! [`LocalLimiter`]: the token buckets of one policy, the per-value buckets of wildcard descriptors, and Envoy's order of consuming them.
//!
//! Every bucket is a [`DirectLimiter`] over the core's [`TokenBucket`]
//! (continuous refill, starts full, whole tokens), shared by all worker
//! threads. A wildcard descriptor keeps at most `max_dynamic_descriptors`
//! buckets, one per value seen, in an LRU: the least recently used value
//! goes first, and comes back with a full bucket.

use std::borrow::Cow;
use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;
use tollgate_core::{Clock, TokenBucket};
use tollgate_store::DirectLimiter;

use super::bucket_spec::BucketSpec;
use super::headers::BucketReport;
use super::policy::{DescriptorSpec, LocalRateLimitPolicy};
use crate::descriptors::Descriptor;

/// The clock every bucket reads.
pub type SharedClock = Arc<dyn Clock>;

/// One bucket's state.
struct Bucket {
    spec: BucketSpec,
    limiter: DirectLimiter<TokenBucket, SharedClock>,
}

impl Bucket {
    fn new(spec: BucketSpec, clock: &SharedClock) -> Self {
        Bucket {
            spec,
            limiter: DirectLimiter::new(spec.bucket, Arc::clone(clock)),
        }
    }
}

/// The buckets of one configured descriptor.
enum DescriptorBuckets {
    /// Every entry has a value: one bucket.
    Fixed(Arc<Bucket>),
    /// A wildcard: one bucket per value seen, least recently used evicted first.
    Dynamic(Mutex<LruCache<Vec<String>, Arc<Bucket>>>),
}

impl DescriptorBuckets {
    fn bucket(
        &self,
        descriptor: &Descriptor,
        spec: BucketSpec,
        clock: &SharedClock,
    ) -> Arc<Bucket> {
        match self {
            DescriptorBuckets::Fixed(bucket) => Arc::clone(bucket),
            DescriptorBuckets::Dynamic(lru) => {
                let values: Vec<String> =
                    descriptor.entries.iter().map(|(_, v)| v.clone()).collect();
                let mut lru = lru.lock();
                Arc::clone(lru.get_or_insert(values, || Arc::new(Bucket::new(spec, clock))))
            }
        }
    }
}

/// The answer for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalVerdict {
    /// Whether every non-shadow bucket had a token.
    pub allowed: bool,
    /// The bucket the headers describe (None when no bucket applied).
    pub report: Option<BucketReport>,
    /// Shadow-mode buckets that ran dry.
    pub shadow_denials: u32,
}

/// The buckets of one [`LocalRateLimitPolicy`].
pub struct LocalLimiter {
    policy: Arc<LocalRateLimitPolicy>,
    clock: SharedClock,
    default: Option<Bucket>,
    descriptors: Vec<DescriptorBuckets>,
}

impl std::fmt::Debug for LocalLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimiter")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl LocalLimiter {
    /// Full buckets for `policy`, timed by `clock`.
    pub fn new(policy: Arc<LocalRateLimitPolicy>, clock: SharedClock) -> Self {
        let default = policy.default_bucket.map(|spec| Bucket::new(spec, &clock));
        let capacity =
            NonZeroUsize::new(policy.max_dynamic_descriptors).unwrap_or(NonZeroUsize::MIN);
        let descriptors = policy
            .descriptors
            .iter()
            .map(|d| {
                if d.is_wildcard() {
                    DescriptorBuckets::Dynamic(Mutex::new(LruCache::new(capacity)))
                } else {
                    DescriptorBuckets::Fixed(Arc::new(Bucket::new(d.bucket, &clock)))
                }
            })
            .collect();
        LocalLimiter {
            policy,
            clock,
            default,
            descriptors,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Arc<LocalRateLimitPolicy> {
        &self.policy
    }

    /// Decides a request with these descriptors, consuming tokens as Envoy does.
    ///
    /// The matched descriptor buckets go first, strictest fill rate first,
    /// each charged its descriptor's `hits_addend` (default 1; 0 checks
    /// without consuming); the first empty one that is not in shadow mode denies
    /// and stops. Then the default bucket, unless a descriptor matched and
    /// `always_consume_default_token_bucket` is false.
    pub fn check(&self, request: &[Descriptor]) -> LocalVerdict {
        // The matched buckets: (spec, bucket, name, cost).
        let mut matched: Vec<(&DescriptorSpec, Arc<Bucket>, String, u64)> = Vec::new();
        for descriptor in request {
            if let Some((spec, buckets)) = self
                .policy
                .descriptors
                .iter()
                .zip(&self.descriptors)
                .find(|(spec, _)| spec.matches(descriptor))
            {
                let bucket = buckets.bucket(descriptor, spec.bucket, &self.clock);
                let cost = descriptor.hits_addend.unwrap_or(1);
                matched.push((spec, bucket, spec.name(descriptor), cost));
            }
        }
        matched.sort_by(|a, b| a.0.bucket.rate.total_cmp(&b.0.bucket.rate));

        let mut report = None;
        let mut shadow_denials = 0;
        for (spec, bucket, name, cost) in &matched {
            let decision = bucket.limiter.check(*cost);
            if decision.is_allowed() {
                if report.is_none() {
                    report = Some(BucketReport::new(
                        Cow::Owned(name.clone()),
                        &bucket.spec,
                        &decision,
                    ));
                }
                continue;
            }
            if spec.shadow_mode {
                shadow_denials += 1;
                if report.is_none() {
                    report = Some(BucketReport::new(
                        Cow::Owned(name.clone()),
                        &bucket.spec,
                        &decision,
                    ));
                }
                continue;
            }
            return LocalVerdict {
                allowed: false,
                report: Some(BucketReport::new(
                    Cow::Owned(name.clone()),
                    &bucket.spec,
                    &decision,
                )),
                shadow_denials,
            };
        }
        if let Some(default) = &self.default
            && (matched.is_empty() || self.policy.always_consume_default)
        {
            let decision = default.limiter.check(1);
            let default_report =
                BucketReport::new(Cow::Borrowed("default"), &default.spec, &decision);
            if !decision.is_allowed() {
                return LocalVerdict {
                    allowed: false,
                    report: Some(default_report),
                    shadow_denials,
                };
            }
            if report.is_none() {
                report = Some(default_report);
            }
        }
        LocalVerdict {
            allowed: true,
            report,
            shadow_denials,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::envoy::LocalRateLimitConfig;
    use tollgate_core::{ManualClock, Timestamp};

    fn policy(yaml: &str) -> Arc<LocalRateLimitPolicy> {
        let config: LocalRateLimitConfig = serde_saphyr::from_str(yaml).unwrap();
        Arc::new(LocalRateLimitPolicy::compile(&config, false, &"t".into()).unwrap())
    }

    fn limiter(yaml: &str) -> (LocalLimiter, ManualClock) {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let shared: SharedClock = Arc::new(clock.clone());
        (LocalLimiter::new(policy(yaml), shared), clock)
    }

    fn codes(l: &LocalLimiter, seq: &[Option<&str>]) -> Vec<u16> {
        seq.iter()
            .map(|user| {
                let d: Vec<Descriptor> = user
                    .map(|u| vec![Descriptor::new([("user", u)])])
                    .unwrap_or_default();
                if l.check(&d).allowed { 200 } else { 429 }
            })
            .collect()
    }

    const HOURLY: &str = "stat_prefix: t\ntoken_bucket: {max_tokens: 100, tokens_per_fill: 100, fill_interval: 3600s}\ndescriptors:\n  - entries: [{key: user, value: alice}]\n    token_bucket: {max_tokens: 2, tokens_per_fill: 2, fill_interval: 3600s}\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}\n";

    #[test]
    fn descriptors_and_wildcards_match_envoys_observed_sequence() {
        let (l, _) = limiter(HOURLY);
        let seq = [
            Some("alice"),
            Some("alice"),
            Some("alice"),
            Some("bob"),
            Some("bob"),
            Some("carol"),
            Some("carol"),
            None,
            None,
        ];
        assert_eq!(
            codes(&l, &seq),
            [200, 200, 429, 200, 429, 200, 429, 200, 200]
        );
        // 6 successful requests so far charged the default bucket.
        let v = l.check(&[]);
        assert_eq!(v.report.unwrap().remaining, 93);
    }

    #[test]
    fn an_evicted_wildcard_value_starts_with_a_full_bucket() {
        let (l, _) = limiter(
            "stat_prefix: t\ndescriptors:\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 1, fill_interval: 3600s}\nmax_dynamic_descriptors: 2\n",
        );
        let seq = ["a", "a", "b", "b", "c", "c", "a", "a"].map(Some);
        assert_eq!(codes(&l, &seq), [200, 429, 200, 429, 200, 429, 200, 429]);
    }

    #[test]
    fn the_least_recently_used_wildcard_value_is_evicted_first() {
        let (l, _) = limiter(
            "stat_prefix: t\ndescriptors:\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 1, fill_interval: 3600s}\nmax_dynamic_descriptors: 2\n",
        );
        // `a` is used again after `b`, so `c` evicts `b`, and `a` keeps its empty bucket.
        let seq = ["a", "b", "a", "c", "a", "b"].map(Some);
        assert_eq!(codes(&l, &seq), [200, 200, 429, 200, 429, 200]);
    }

    #[test]
    fn always_consume_false_keeps_descriptor_requests_off_the_default_bucket() {
        let base = "stat_prefix: t\ntoken_bucket: {max_tokens: 3, fill_interval: 3600s}\ndescriptors:\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 10, fill_interval: 3600s}\n";
        let (on, _) = limiter(base);
        assert_eq!(
            codes(
                &on,
                &[
                    Some("alice"),
                    Some("alice"),
                    Some("bob"),
                    None,
                    Some("carol")
                ]
            ),
            [200, 200, 200, 429, 429]
        );
        let (off, _) = limiter(&format!(
            "{base}always_consume_default_token_bucket: false\n"
        ));
        assert_eq!(
            codes(
                &off,
                &[
                    Some("alice"),
                    Some("alice"),
                    Some("bob"),
                    None,
                    None,
                    None,
                    None
                ]
            ),
            [200, 200, 200, 200, 200, 200, 429]
        );
    }

    #[test]
    fn a_shadow_bucket_is_consumed_but_never_denies() {
        let (l, _) = limiter(
            "stat_prefix: t\ndescriptors:\n  - entries: [{key: user, value: alice}]\n    token_bucket: {max_tokens: 1, fill_interval: 3600s}\n    shadow_mode: true\n",
        );
        let d = [Descriptor::new([("user", "alice")])];
        assert!(l.check(&d).allowed);
        let second = l.check(&d);
        assert!(second.allowed);
        assert_eq!(second.shadow_denials, 1);
    }

    #[test]
    fn a_descriptor_costs_its_hits_addend_and_the_default_bucket_one() {
        let (l, _) = limiter(
            "stat_prefix: t\ntoken_bucket: {max_tokens: 10, fill_interval: 3600s}\ndescriptors:\n  - entries: [{key: user}]\n    token_bucket: {max_tokens: 10, fill_interval: 3600s}\n",
        );
        let costly = |hits: u64| {
            let d = Descriptor {
                hits_addend: Some(hits),
                ..Descriptor::new([("user", "alice")])
            };
            let v = l.check(&[d]);
            (v.allowed, v.report.unwrap().remaining)
        };
        assert_eq!(costly(3), (true, 7));
        assert_eq!(costly(0), (true, 7));
        assert_eq!(costly(8), (false, 7));
        assert_eq!(costly(7), (true, 0));
        // The default bucket paid one per admitted request: 3 of 10.
        assert_eq!(l.check(&[]).report.unwrap().remaining, 6);
    }

    #[test]
    fn headers_report_remaining_and_seconds_to_the_next_token() {
        // Envoy observed: max 2, 1 token per 4 s: 2/1/0, 2/0/4, 429 2/0/4, 2 s later 2/0/2, 4.2 s 200 2/0/4.
        let (l, clock) = limiter(
            "stat_prefix: t\ntoken_bucket: {max_tokens: 2, tokens_per_fill: 1, fill_interval: 4s}\n",
        );
        let r = |v: LocalVerdict| {
            let r = v.report.unwrap();
            (v.allowed, r.limit, r.remaining, r.reset_seconds())
        };
        assert_eq!(r(l.check(&[])), (true, 2, 1, 0));
        assert_eq!(r(l.check(&[])), (true, 2, 0, 4));
        assert_eq!(r(l.check(&[])), (false, 2, 0, 4));
        clock.advance(Duration::from_secs(2));
        assert_eq!(r(l.check(&[])), (false, 2, 0, 2));
        clock.advance(Duration::from_millis(2200));
        assert_eq!(r(l.check(&[])), (true, 2, 0, 4));
    }
}
