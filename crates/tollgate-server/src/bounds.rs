//! Gauges of every memory and connection bound: what is held now and the most that may be, read at each scrape.
//!
//! [`BoundsCollector`] writes, for the engine in service:
//!
//! * `ratelimit_memory_stores{kind}` and `ratelimit_memory_stores_limit{kind}`:
//!   in-memory stores of each kind (`rule`: one per distinct limit of the
//!   rules; `override`: one per descriptor `limit` override, at most
//!   `--max-override-stores`; `retired`: kept after a reload, at most
//!   `--max-retired-stores`; the rule kind has no limit of its own);
//! * `ratelimit_memory_keys{kind}` and `ratelimit_memory_keys_limit{kind}`:
//!   the keys those stores hold, and the most they may hold (stores × the
//!   per-store bound, `--max-keys` or `--max-override-keys`);
//! * `ratelimit_memory_bytes{kind}`: the bytes they hold;
//! * `ratelimit_memory_log_entries{kind}` and
//!   `ratelimit_memory_log_entries_limit{kind}`: the sliding-log entries,
//!   and sliding-log stores × `--max-log-entries`;
//! * `ratelimit_memory_override_refused_total`: requests denied because no
//!   override store could be made;
//! * with Redis, `ratelimit_quick_deny_keys` and
//!   `ratelimit_quick_deny_keys_limit` (`--quick-deny-keys`);
//! * `ratelimit_connections{listener}` and
//!   `ratelimit_connections_limit{listener}` (`--max-connections`) for each
//!   listener (`grpc`, `http`).

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use tollgate_core::Clock;
use tollgate_runtime::ConnectionLimit;
use tollgate_store::{CountersUsage, StoresUsage};

use crate::engine::EngineOptions;
use crate::reload::LiveEngine;

/// What the engine in service holds, and its bounds.
#[derive(Clone, Copy, Debug)]
pub struct BoundsSnapshot {
    /// The options that size the stores.
    pub options: EngineOptions,
    /// What the in-memory stores hold.
    pub usage: CountersUsage,
    /// The quick-deny cache's keys and limit, when counters live in Redis.
    pub quick_deny: Option<(usize, usize)>,
}

/// Anything that can say what the engine in service holds.
pub trait BoundsSource: fmt::Debug + Send + Sync + 'static {
    /// Reads it now.
    fn bounds(&self) -> BoundsSnapshot;
}

impl<C: Clock + 'static> BoundsSource for LiveEngine<C> {
    fn bounds(&self) -> BoundsSnapshot {
        let engine = self.load();
        BoundsSnapshot {
            options: *engine.options(),
            usage: engine.memory_usage(),
            quick_deny: engine.remote().map(|remote| remote.quick_deny_usage()),
        }
    }
}

/// The `kind` label of the store gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The `listener` label of the connection gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

/// Writes the bound gauges on each scrape.
#[derive(Debug)]
pub struct BoundsCollector {
    source: Arc<dyn BoundsSource>,
    listeners: Vec<(&'static str, Arc<ConnectionLimit>)>,
}

impl BoundsCollector {
    /// Gauges of `source`'s stores and of each named listener's connections.
    pub fn new(
        source: Arc<dyn BoundsSource>,
        listeners: Vec<(&'static str, Arc<ConnectionLimit>)>,
    ) -> Self {
        BoundsCollector { source, listeners }
    }
}

/// A count as a gauge value.
fn gauge(value: usize) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
}

/// Writes one gauge family with one series per label.
fn family<L: EncodeLabelSet + fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(L, usize)],
) -> Result<(), fmt::Error> {
    if series.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        gauge(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for BoundsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let BoundsSnapshot {
            options,
            usage,
            quick_deny,
        } = self.source.bounds();
        let kinds: [(&'static str, StoresUsage); 3] = [
            ("rule", usage.stores),
            ("override", usage.lazy),
            ("retired", usage.retired),
        ];
        let per_store = |kind: &str| match kind {
            "override" => options.override_store_config,
            _ => options.store_config,
        };
        let each =
            |value: &dyn Fn(&'static str, &StoresUsage) -> usize| -> Vec<(KindLabels, usize)> {
                kinds
                    .iter()
                    .map(|(kind, u)| (KindLabels { kind }, value(kind, u)))
                    .collect()
            };
        family(
            &mut encoder,
            "ratelimit_memory_stores",
            "In-memory stores by kind (rule, override, retired)",
            &each(&|_, u| u.stores),
        )?;
        family(
            &mut encoder,
            "ratelimit_memory_stores_limit",
            "The most in-memory stores of a kind (max-override-stores, max-retired-stores)",
            &[
                (KindLabels { kind: "override" }, options.max_override_stores),
                (KindLabels { kind: "retired" }, options.max_retired_stores),
            ],
        )?;
        family(
            &mut encoder,
            "ratelimit_memory_keys",
            "Keys held by the in-memory stores of a kind",
            &each(&|_, u| u.keys),
        )?;
        family(
            &mut encoder,
            "ratelimit_memory_keys_limit",
            "The most keys the stores of a kind may hold: stores times max-keys (max-override-keys for overrides)",
            &each(&|kind, u| u.stores.saturating_mul(per_store(kind).max_keys)),
        )?;
        family(
            &mut encoder,
            "ratelimit_memory_bytes",
            "Bytes held by the in-memory stores of a kind",
            &each(&|_, u| u.bytes),
        )?;
        family(
            &mut encoder,
            "ratelimit_memory_log_entries",
            "Sliding-log entries held by the stores of a kind",
            &each(&|_, u| u.log_entries),
        )?;
        family(
            &mut encoder,
            "ratelimit_memory_log_entries_limit",
            "The most sliding-log entries the stores of a kind hold: sliding-log stores times max-log-entries",
            &each(&|kind, u| u.log_stores.saturating_mul(per_store(kind).max_log_entries)),
        )?;
        let refused = ConstCounter::new(usage.lazy_refused);
        refused.encode(encoder.encode_descriptor(
            "ratelimit_memory_override_refused",
            "Requests denied because max-override-stores was reached and no override store was all fresh",
            None,
            refused.metric_type(),
        )?)?;
        if let Some((keys, limit)) = quick_deny {
            for (name, help, value) in [
                (
                    "ratelimit_quick_deny_keys",
                    "Keys in the quick-deny cache",
                    keys,
                ),
                (
                    "ratelimit_quick_deny_keys_limit",
                    "The most keys the quick-deny cache holds (quick-deny-keys)",
                    limit,
                ),
            ] {
                let value = gauge(value);
                value.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    value.metric_type(),
                )?)?;
            }
        }
        let connections = |read: fn(&ConnectionLimit) -> usize| -> Vec<(ListenerLabels, usize)> {
            self.listeners
                .iter()
                .map(|(listener, limit)| (ListenerLabels { listener }, read(limit)))
                .collect()
        };
        family(
            &mut encoder,
            "ratelimit_connections",
            "Connections open on a listener",
            &connections(ConnectionLimit::open),
        )?;
        family(
            &mut encoder,
            "ratelimit_connections_limit",
            "The most connections open on a listener at once (max-connections)",
            &connections(ConnectionLimit::max),
        )
    }
}
