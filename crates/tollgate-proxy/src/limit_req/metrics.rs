//! The `limit_req_*` families: delayed, rejected and dry-run counts, the delays, the waiting requests and the keys held against their bounds, per route.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tollgate_core::LeakyBucket;
use tollgate_store::WordStore;

use super::policy::{DELAY_BUCKETS, LimitReqStats};
use crate::route_labels::{RouteLabels, gauge_value};

/// A route's key tables alive now, read at each render: the policy in
/// service's, and one a reload replaced while requests still wait on it.
#[derive(Debug, Default)]
pub struct KeyTables {
    live: Mutex<Vec<Weak<WordStore<LeakyBucket>>>>,
    keys: Gauge,
    keys_limit: Gauge,
}

impl KeyTables {
    /// Counts `table` in the route's gauges while it is alive.
    pub fn watch(&self, table: &Arc<WordStore<LeakyBucket>>) {
        self.live.lock().push(Arc::downgrade(table));
    }

    /// Sets the gauges: the keys every live table holds, and the bound of the newest.
    fn refresh(&self) {
        let mut live = self.live.lock();
        live.retain(|table| table.strong_count() > 0);
        let tables: Vec<Arc<WordStore<LeakyBucket>>> =
            live.iter().filter_map(Weak::upgrade).collect();
        drop(live);
        let keys: usize = tables.iter().map(|t| t.len()).sum();
        self.keys.set(gauge_value(keys));
        self.keys_limit
            .set(gauge_value(tables.last().map_or(0, |t| t.max_keys())));
    }
}

/// Every route's `limit_req` series.
#[derive(Debug)]
pub struct LimitReqFamilies {
    delayed: Family<RouteLabels, Counter>,
    rejected: Family<RouteLabels, Counter>,
    dry_run: Family<RouteLabels, Counter>,
    delay: Family<RouteLabels, Histogram>,
    waiting: Family<RouteLabels, Gauge>,
    waiting_limit: Family<RouteLabels, Gauge>,
    keys: Family<RouteLabels, Gauge>,
    keys_limit: Family<RouteLabels, Gauge>,
    tables: Mutex<HashMap<RouteLabels, Arc<KeyTables>>>,
}

impl LimitReqFamilies {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let families = LimitReqFamilies {
            delayed: Family::default(),
            rejected: Family::default(),
            dry_run: Family::default(),
            delay: Family::new_with_constructor(|| Histogram::new(DELAY_BUCKETS)),
            waiting: Family::default(),
            waiting_limit: Family::default(),
            keys: Family::default(),
            keys_limit: Family::default(),
            tables: Mutex::new(HashMap::new()),
        };
        registry.register(
            "limit_req_delayed",
            "Requests limit_req made wait their turn",
            families.delayed.clone(),
        );
        registry.register(
            "limit_req_rejected",
            "Requests limit_req rejected (over the burst, or max_waiting reached)",
            families.rejected.clone(),
        );
        registry.register(
            "limit_req_dry_run",
            "Requests limit_req would have delayed or rejected (dry_run)",
            families.dry_run.clone(),
        );
        registry.register(
            "limit_req_delay_seconds",
            "How long delayed requests waited",
            families.delay.clone(),
        );
        registry.register(
            "limit_req_waiting",
            "Requests waiting their turn now",
            families.waiting.clone(),
        );
        registry.register(
            "limit_req_waiting_limit",
            "The most requests that wait at once (max_waiting)",
            families.waiting_limit.clone(),
        );
        registry.register(
            "limit_req_keys",
            "Keys whose buckets limit_req holds now",
            families.keys.clone(),
        );
        registry.register(
            "limit_req_keys_limit",
            "The most keys limit_req holds (max_keys)",
            families.keys_limit.clone(),
        );
        families
    }

    /// Reads every route's key tables into the `limit_req_keys` gauges (at each render).
    pub fn refresh(&self) {
        for tables in self.tables.lock().values() {
            tables.refresh();
        }
    }

    /// The series of `route` to `cluster`, whose bound is `max_waiting`.
    pub fn stats(&self, route: &str, cluster: &str, max_waiting: usize) -> LimitReqStats {
        let labels = RouteLabels {
            route: route.into(),
            cluster: cluster.into(),
        };
        self.waiting_limit
            .get_or_create(&labels)
            .set(gauge_value(max_waiting));
        let tables = Arc::clone(self.tables.lock().entry(labels.clone()).or_insert_with(|| {
            Arc::new(KeyTables {
                live: Mutex::new(Vec::new()),
                keys: self.keys.get_or_create(&labels).clone(),
                keys_limit: self.keys_limit.get_or_create(&labels).clone(),
            })
        }));
        LimitReqStats {
            delayed: self.delayed.get_or_create(&labels).clone(),
            rejected: self.rejected.get_or_create(&labels).clone(),
            dry_run: self.dry_run.get_or_create(&labels).clone(),
            delay: self.delay.get_or_create(&labels).clone(),
            waiting: self.waiting.get_or_create(&labels).clone(),
            tables,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use http::HeaderMap;
    use tollgate_core::{ManualClock, Timestamp};

    use super::*;
    use crate::config::{ConfigPath, LimitReqConfig};
    use crate::limit_req::LimitReqPolicy;

    /// The value of `series` in `registry`'s text.
    fn value(registry: &Registry, series: &str) -> Option<i64> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
    }

    #[test]
    fn the_keys_gauges_count_every_live_table_and_show_the_newest_ones_bound() {
        let mut registry = Registry::default();
        let families = LimitReqFamilies::register(&mut registry);
        let config: LimitReqConfig =
            serde_saphyr::from_str("{rate: 1r/m, nodelay: true, max_keys: 64}").expect("YAML");
        let compile = || {
            let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
            let stats = families.stats("api", "backend", 8);
            let at = ConfigPath::root().key("limit_req");
            Arc::new(LimitReqPolicy::compile(&config, clock, stats, &at).expect("compiles"))
        };
        let keys = "limit_req_keys{route=\"api\",cluster=\"backend\"}";
        let limit = "limit_req_keys_limit{route=\"api\",cluster=\"backend\"}";
        let old = compile();
        for n in 0..5u8 {
            drop(old.decide(IpAddr::from([10, 0, 0, n]), &HeaderMap::new()));
        }
        families.refresh();
        assert_eq!(value(&registry, keys), Some(5));
        let bound = i64::try_from(old.max_keys()).expect("small");
        assert!((1..=64).contains(&bound), "{bound}");
        assert_eq!(value(&registry, limit), Some(bound));
        // A reload: the old table is counted while requests still hold it.
        let new = compile();
        drop(new.decide(IpAddr::from([10, 0, 1, 1]), &HeaderMap::new()));
        families.refresh();
        assert_eq!(value(&registry, keys), Some(6));
        drop(old);
        families.refresh();
        assert_eq!(value(&registry, keys), Some(1));
        assert_eq!(value(&registry, limit), Some(bound));
        drop(new);
        families.refresh();
        assert_eq!(value(&registry, keys), Some(0));
    }
}
