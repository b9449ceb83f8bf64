//! The `limit_req_*` families: delayed, rejected and dry-run counts, the delays, and the waiting requests against their bound, per route.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::policy::{DELAY_BUCKETS, LimitReqStats};
use crate::metrics::RouteLabels;

/// Every route's `limit_req` series.
#[derive(Debug)]
pub struct LimitReqFamilies {
    delayed: Family<RouteLabels, Counter>,
    rejected: Family<RouteLabels, Counter>,
    dry_run: Family<RouteLabels, Counter>,
    delay: Family<RouteLabels, Histogram>,
    waiting: Family<RouteLabels, Gauge>,
    waiting_limit: Family<RouteLabels, Gauge>,
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
        families
    }

    /// The series of `route` to `cluster`, whose bound is `max_waiting`.
    pub fn stats(&self, route: &str, cluster: &str, max_waiting: usize) -> LimitReqStats {
        let labels = RouteLabels {
            route: route.into(),
            cluster: cluster.into(),
        };
        self.waiting_limit
            .get_or_create(&labels)
            .set(i64::try_from(max_waiting).unwrap_or(i64::MAX));
        LimitReqStats {
            delayed: self.delayed.get_or_create(&labels).clone(),
            rejected: self.rejected.get_or_create(&labels).clone(),
            dry_run: self.dry_run.get_or_create(&labels).clone(),
            delay: self.delay.get_or_create(&labels).clone(),
            waiting: self.waiting.get_or_create(&labels).clone(),
        }
    }
}
