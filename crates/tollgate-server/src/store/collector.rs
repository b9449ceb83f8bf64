//! The store's series on `/metrics`: decisions by path, calls, fallbacks by policy, breaker state, leases and shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::RemoteStore;
use crate::shares::SharesBook;

/// The label of the fallback counter: which `on_store_error` answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: &'static str,
}

/// Writes the store's error and fallback counters and the breaker state on each scrape.
#[derive(Debug)]
pub struct StoreCollector(pub Arc<RemoteStore>);

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.0.stats();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let errors = ConstCounter::new(load(&stats.errors));
        let metric = encoder.encode_descriptor(
            "ratelimit_store_errors",
            "Store calls that failed (timeout, connection, script)",
            None,
            errors.metric_type(),
        )?;
        errors.encode(metric)?;
        let skipped = ConstCounter::new(load(&stats.short_circuited));
        let metric = encoder.encode_descriptor(
            "ratelimit_store_short_circuited",
            "Store calls not made because the circuit breaker was open",
            None,
            skipped.metric_type(),
        )?;
        skipped.encode(metric)?;
        let quick = ConstCounter::new(load(&stats.quick_denied));
        let metric = encoder.encode_descriptor(
            "ratelimit_store_quick_denied",
            "Calls answered OVER_LIMIT by the quick-deny cache, without a store call",
            None,
            quick.metric_type(),
        )?;
        quick.encode(metric)?;
        let mut family = encoder.encode_descriptor(
            "ratelimit_store_fallbacks",
            "Descriptors answered by their rule's on_store_error, by policy",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (policy, counter) in [
            ("allow", &stats.fallback_allow),
            ("deny", &stats.fallback_deny),
            ("local", &stats.fallback_local),
        ] {
            let labels = PolicyLabels { policy };
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(load(counter)).encode(metric)?;
        }
        self.encode_leases(&mut encoder)?;
        let up = ConstGauge::new(i64::from(self.0.is_up()));
        let metric = encoder.encode_descriptor(
            "ratelimit_store_up",
            "1 when the store took the latest call or write probe, 0 when it failed (down, too slow, or refusing writes)",
            None,
            up.metric_type(),
        )?;
        up.encode(metric)?;
        let state = ConstGauge::new(self.0.breaker().state_code());
        let metric = encoder.encode_descriptor(
            "ratelimit_store_breaker_state",
            "The store's circuit breaker: 0 closed, 1 open, 2 half-open",
            None,
            state.metric_type(),
        )?;
        state.encode(metric)
    }
}

/// The label of the decisions counter: which path answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: &'static str,
}

/// The label of the Redis calls counter: which script.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: &'static str,
}

impl StoreCollector {
    /// Decisions by path, Redis calls by kind, lease units and the quick-deny cache's size.
    fn encode_leases(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.0.stats();
        let leases = self.0.leases().stats();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut family = encoder.encode_descriptor(
            "ratelimit_store_decisions",
            "Requests by the path that decided them: leased (this instance's leases), exact (a Redis call), quick_denied (a known denial), fallback (on_store_error)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (path, counter) in [
            ("leased", &stats.leased),
            ("exact", &stats.exact),
            ("quick_denied", &stats.quick_denied),
            ("fallback", &stats.fallback),
        ] {
            let labels = PathLabels { path };
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(load(counter)).encode(metric)?;
        }
        let mut family = encoder.encode_descriptor(
            "ratelimit_store_redis_calls",
            "Redis script calls by kind: check (an exact decision), lease_grant, lease_return",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (call, count) in [
            ("check", load(&stats.exact)),
            ("lease_grant", load(&leases.grant_calls)),
            ("lease_return", load(&leases.return_calls)),
        ] {
            let labels = CallLabels { call };
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(count).encode(metric)?;
        }
        // The shares book is made with each connection: its counts start
        // again after a reconnection (a counter reset, as after a restart).
        let shares = self.0.shares();
        let shares_count = |count: &dyn Fn(&SharesBook) -> u64| shares.as_deref().map_or(0, count);
        for (name, help, value) in [
            (
                "ratelimit_store_lease_granted_units",
                "Units Redis granted to this instance's leases",
                load(&leases.granted_units),
            ),
            (
                "ratelimit_store_lease_returned_units",
                "Unused leased units Redis took back",
                load(&leases.returned_units),
            ),
            (
                "ratelimit_store_lease_stranded_units",
                "Units a schedule's lease still held when its next grant replaced it, left unspent",
                load(&leases.stranded_units),
            ),
            (
                "ratelimit_store_lease_failed_calls",
                "Lease grants and returns that failed",
                load(&leases.failed_calls),
            ),
            (
                "ratelimit_store_shares_decided",
                "Batches decided from this instance's shares, without a Redis call",
                shares_count(&|s| load(&s.counts().decided)),
            ),
            (
                "ratelimit_store_shares_calls",
                "Holder calls the shares authority answered (each two Redis script calls, more after a conflict)",
                shares_count(&|s| load(&s.authority_stats().calls)),
            ),
            (
                "ratelimit_store_shares_script_calls",
                "Redis script calls of the shares authority",
                shares_count(&|s| load(&s.authority_stats().redis_calls)),
            ),
            (
                "ratelimit_store_shares_failed_calls",
                "Holder calls that failed (Redis unreachable, or the state changed under every attempt)",
                shares_count(&|s| load(&s.counts().failed_calls)),
            ),
        ] {
            let counter = ConstCounter::new(value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        let now = self.0.now_for_gauges();
        for (name, help, value) in [
            (
                "ratelimit_store_lease_outstanding_units",
                "Units held in this instance's usable leases",
                self.0.leases().outstanding(now),
            ),
            (
                "ratelimit_store_lease_keys",
                "Counters the lease book tracks (bounded by --lease-max-keys)",
                self.0.leases().len() as u64,
            ),
            (
                "ratelimit_store_lease_keys_limit",
                "The most counters the lease book tracks (--lease-max-keys)",
                self.0.options.lease_max_keys as u64,
            ),
            (
                "ratelimit_store_shares_keys",
                "Keys this instance holds shares of (bounded by --shares-max-keys)",
                shares_count(&|s| s.keys() as u64),
            ),
            (
                "ratelimit_store_shares_keys_limit",
                "The most keys this instance holds shares of (--shares-max-keys)",
                self.0.options.shares.holder.max_keys as u64,
            ),
            (
                "ratelimit_store_shares_starter_slots_owned",
                "1 while this instance owns a starter slot of the shares mode, else 0",
                shares_count(&|s| u64::from(s.starter().is_some())),
            ),
            (
                "ratelimit_store_shares_starter_slots_limit",
                "The fleet's starter slots (--shares-starter-slots of the first instance to reach Redis; 0: off)",
                shares.as_deref().map_or(
                    u64::from(self.0.options.shares.authority.starter.slots),
                    |s| load(&s.authority_stats().fleet_starter_slots),
                ),
            ),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}
