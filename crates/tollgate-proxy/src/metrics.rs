//! Prometheus metrics per route and cluster, served on the admin listener.

use std::fmt;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tollgate_runtime::{ConnectionLimit, LabelValue};
use tollgate_upstream::PickError;

use crate::error::ProxyError;
use crate::forward::error::UpstreamError;
pub use crate::route_labels::RouteLabels;
use crate::route_labels::gauge_value;

/// Labels of responses by class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResponseLabels {
    /// The route.
    pub route: LabelValue,
    /// The cluster.
    pub cluster: LabelValue,
    /// `1xx` … `5xx` for upstream answers; `timeout`, `connect_failure` for upstreams
    /// that did not answer; `breaker_open`, `overflow`, `no_healthy_upstream` for
    /// requests no endpoint was picked for.
    pub class: String,
}

/// Labels of per-listener gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// The listener's name (its address when it has none).
    pub listener: LabelValue,
}

/// Labels of config reloads.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `success` or `failure`.
    pub result: String,
}

/// Every metric the proxy keeps.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests routed.
    pub requests: Family<RouteLabels, Counter>,
    /// Requests the local rate limit answered.
    pub local_rate_limited: Family<RouteLabels, Counter>,
    /// Requests the global rate limit answered.
    pub global_rate_limited: Family<RouteLabels, Counter>,
    /// RLS failures that denied (`failure_mode_deny`).
    pub rate_limit_service_denied: Family<RouteLabels, Counter>,
    /// Upstream responses and failures by class.
    pub upstream_responses: Family<ResponseLabels, Counter>,
    /// Requests a load-shedding layer refused.
    pub shed: Family<RouteLabels, Counter>,
    /// The upstream crate's families: in flight, ejections, breaker state, health.
    pub upstream: tollgate_upstream::UpstreamMetrics,
    /// Requests no route matched.
    pub no_route: Counter,
    /// Time from request to response headers, per route.
    pub duration: Family<RouteLabels, Histogram>,
    /// Config reloads.
    pub reloads: Family<ReloadLabels, Counter>,
    /// Client connections open, per listener (read from the limits at each render).
    pub downstream_connections: Family<ListenerLabels, Gauge>,
    /// The most client connections a listener keeps open.
    pub downstream_connections_limit: Family<ListenerLabels, Gauge>,
    listeners: parking_lot::Mutex<Vec<(ListenerLabels, std::sync::Arc<ConnectionLimit>)>>,
    /// Requests waiting in a route's priority line (read from the layer at each render).
    pub priority_queued: Family<RouteLabels, Gauge>,
    /// The most requests a route's priority line holds (`queue.max_queued`).
    pub priority_queue_limit: Family<RouteLabels, Gauge>,
    priority_lines: parking_lot::Mutex<Vec<(RouteLabels, tollgate_shed::priority::PriorityLayer)>>,
    /// Every route's `limit_req` series.
    pub limit_req: crate::limit_req::LimitReqFamilies,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under `tollgate_proxy_`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tollgate_proxy");
        let requests = Family::<RouteLabels, Counter>::default();
        let local = Family::<RouteLabels, Counter>::default();
        let global = Family::<RouteLabels, Counter>::default();
        let rls_denied = Family::<RouteLabels, Counter>::default();
        let upstream = Family::<ResponseLabels, Counter>::default();
        let no_route = Counter::default();
        let shed = Family::<RouteLabels, Counter>::default();
        let upstream_metrics = tollgate_upstream::UpstreamMetrics::new();
        upstream_metrics.register(&mut registry);
        registry.register(
            "shed",
            "Requests refused by load shedding (concurrency limit, priority)",
            shed.clone(),
        );
        let duration = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ])
        });
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register("requests", "Requests routed", requests.clone());
        registry.register(
            "local_rate_limited",
            "Requests answered by the local rate limit",
            local.clone(),
        );
        registry.register(
            "global_rate_limited",
            "Requests answered by the global rate limit (OVER_LIMIT)",
            global.clone(),
        );
        registry.register(
            "rate_limit_service_denied",
            "Requests denied because the rate limit service failed (failure_mode_deny)",
            rls_denied.clone(),
        );
        registry.register(
            "upstream_responses",
            "Upstream responses by class, and the proxy's own upstream failures",
            upstream.clone(),
        );
        registry.register("no_route", "Requests no route matched", no_route.clone());
        registry.register(
            "request_duration_seconds",
            "Time to the response headers",
            duration.clone(),
        );
        registry.register("config_reloads", "Configuration reloads", reloads.clone());
        let downstream_connections = Family::<ListenerLabels, Gauge>::default();
        let downstream_connections_limit = Family::<ListenerLabels, Gauge>::default();
        registry.register(
            "downstream_connections",
            "Client connections open",
            downstream_connections.clone(),
        );
        registry.register(
            "downstream_connections_limit",
            "The most client connections a listener keeps open (max_connections)",
            downstream_connections_limit.clone(),
        );
        let priority_queued = Family::<RouteLabels, Gauge>::default();
        let priority_queue_limit = Family::<RouteLabels, Gauge>::default();
        registry.register(
            "priority_queued",
            "Requests waiting in a route's priority line",
            priority_queued.clone(),
        );
        registry.register(
            "priority_queue_limit",
            "The most requests a route's priority line holds (queue.max_queued)",
            priority_queue_limit.clone(),
        );
        let limit_req = crate::limit_req::LimitReqFamilies::register(&mut registry);
        Metrics {
            limit_req,
            registry,
            requests,
            local_rate_limited: local,
            global_rate_limited: global,
            rate_limit_service_denied: rls_denied,
            upstream_responses: upstream,
            shed,
            upstream: upstream_metrics,
            no_route,
            duration,
            reloads,
            downstream_connections,
            downstream_connections_limit,
            listeners: parking_lot::Mutex::new(Vec::new()),
            priority_queued,
            priority_queue_limit,
            priority_lines: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// Reports the waiting line of `layer` (route `route` to `cluster`, bounded by `max_queued`); a reload's layer replaces the old one.
    pub fn watch_priority_line(
        &self,
        route: &str,
        cluster: &str,
        max_queued: usize,
        layer: tollgate_shed::priority::PriorityLayer,
    ) {
        let labels = RouteLabels {
            route: route.into(),
            cluster: cluster.into(),
        };
        self.priority_queue_limit
            .get_or_create(&labels)
            .set(gauge_value(max_queued));
        let mut lines = self.priority_lines.lock();
        lines.retain(|(l, _)| *l != labels);
        lines.push((labels, layer));
    }

    /// Reports `limit` as listener `listener`'s open connections and limit.
    pub fn watch_connections(&self, listener: &str, limit: std::sync::Arc<ConnectionLimit>) {
        let labels = ListenerLabels {
            listener: listener.into(),
        };
        self.downstream_connections_limit
            .get_or_create(&labels)
            .set(gauge_value(limit.max()));
        self.listeners.lock().push((labels, limit));
    }

    /// These metrics with `collector`'s too, under the same prefix (the
    /// store of the proxy's own limits: decisions by path, Redis calls, leases).
    #[must_use]
    pub fn with_collector(
        mut self,
        collector: Box<dyn prometheus_client::collector::Collector>,
    ) -> Self {
        self.registry.register_collector(collector);
        self
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> Result<String, fmt::Error> {
        for (labels, limit) in self.listeners.lock().iter() {
            self.downstream_connections
                .get_or_create(labels)
                .set(gauge_value(limit.open()));
        }
        for (labels, layer) in self.priority_lines.lock().iter() {
            self.priority_queued
                .get_or_create(labels)
                .set(gauge_value(layer.queued()));
        }
        self.limit_req.refresh();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Response classes counted per route, in [`ResponseClass`] order.
pub const RESPONSE_CLASSES: [&str; 10] = [
    "1xx",
    "2xx",
    "3xx",
    "4xx",
    "5xx",
    "timeout",
    "connect_failure",
    "breaker_open",
    "overflow",
    "no_healthy_upstream",
];

/// The proxy's own upstream outcomes, beside the status classes of upstream answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseClass {
    /// The response headers did not come within the route's timeout.
    Timeout = 5,
    /// No connection could be made, or it failed before the response headers.
    ConnectFailure = 6,
    /// The cluster's circuit breaker refused the request: nothing was sent.
    BreakerOpen = 7,
    /// The cluster's `max_requests` were in flight: nothing was sent.
    Overflow = 8,
    /// No endpoint was healthy (or the cluster has none): nothing was sent.
    NoHealthyUpstream = 9,
}

impl ResponseClass {
    /// The class of an upstream failure.
    pub fn of(error: &UpstreamError) -> Self {
        match error {
            UpstreamError::Timeout(_) => ResponseClass::Timeout,
            UpstreamError::Connect(_) | UpstreamError::Reset(_) => ResponseClass::ConnectFailure,
            UpstreamError::NoEndpoint => ResponseClass::NoHealthyUpstream,
            UpstreamError::Unavailable(pick) => match pick {
                PickError::CircuitOpen { .. } => ResponseClass::BreakerOpen,
                PickError::Overflow { .. } => ResponseClass::Overflow,
                PickError::NoHealthyEndpoint => ResponseClass::NoHealthyUpstream,
            },
        }
    }

    /// The `class` label.
    pub fn label(self) -> &'static str {
        RESPONSE_CLASSES[self as usize]
    }
}

/// One route's series, resolved once so that a request only increments atomics.
#[derive(Clone, Debug)]
pub struct RouteCounters {
    /// Requests routed.
    pub requests: Counter,
    /// Local rate limit answers.
    pub local_rate_limited: Counter,
    /// Global rate limit answers.
    pub global_rate_limited: Counter,
    /// RLS failures that denied.
    pub rate_limit_service_denied: Counter,
    /// Requests shed.
    pub shed: Counter,
    /// Upstream responses by [`RESPONSE_CLASSES`] index.
    pub responses: Vec<Counter>,
    /// Time to the response headers.
    pub duration: Histogram,
}

impl RouteCounters {
    /// The series of `route` to `cluster` in `metrics`.
    pub fn new(metrics: &Metrics, route: &str, cluster: &str) -> Self {
        let labels = RouteLabels {
            route: route.into(),
            cluster: cluster.into(),
        };
        RouteCounters {
            requests: metrics.requests.get_or_create(&labels).clone(),
            local_rate_limited: metrics.local_rate_limited.get_or_create(&labels).clone(),
            global_rate_limited: metrics.global_rate_limited.get_or_create(&labels).clone(),
            rate_limit_service_denied: metrics
                .rate_limit_service_denied
                .get_or_create(&labels)
                .clone(),
            shed: metrics.shed.get_or_create(&labels).clone(),
            responses: RESPONSE_CLASSES
                .iter()
                .map(|class| {
                    metrics
                        .upstream_responses
                        .get_or_create(&ResponseLabels {
                            route: route.into(),
                            cluster: cluster.into(),
                            class: (*class).to_owned(),
                        })
                        .clone()
                })
                .collect(),
            duration: metrics.duration.get_or_create(&labels).clone(),
        }
    }

    /// Counts an upstream response of `status`.
    pub fn response(&self, status: u16) {
        let index = usize::from(status / 100).saturating_sub(1).min(4);
        self.responses[index].inc();
    }

    /// Counts a request the proxy answered itself, under the series of its cause.
    pub fn error(&self, error: &ProxyError) {
        match error {
            ProxyError::LocalRateLimited(_) => self.local_rate_limited.inc(),
            ProxyError::GlobalRateLimited(_) => self.global_rate_limited.inc(),
            ProxyError::RateLimitServiceFailed(_) => self.rate_limit_service_denied.inc(),
            ProxyError::Upstream(e) => self.responses[ResponseClass::of(e) as usize].inc(),
            ProxyError::Shed(_) => self.shed.inc(),
            // Counted by the layer, with its delays (`limit_req_*`).
            ProxyError::LimitReqRejected(_)
            | ProxyError::NoRoute
            | ProxyError::BadRequest(_)
            | ProxyError::HeadersTooLarge { .. }
            | ProxyError::Internal(_) => 0,
        };
    }
}
