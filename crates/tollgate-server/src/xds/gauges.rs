//! [`XdsState`]: what the xDS client has done (connected, updates applied and refused, the last update's size), and its gauges.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::sync::watch;

/// The xDS client's state, shared with the metrics and with a start that waits for the first config.
#[derive(Debug)]
pub struct XdsState {
    connected: AtomicBool,
    last_update_bytes: AtomicU64,
    max_update_bytes: u64,
    refused: AtomicU64,
    applied: watch::Sender<u64>,
}

impl XdsState {
    /// A client that has done nothing yet, taking updates of at most `max_update_bytes`.
    pub fn new(max_update_bytes: usize) -> Self {
        XdsState {
            connected: AtomicBool::new(false),
            last_update_bytes: AtomicU64::new(0),
            max_update_bytes: max_update_bytes as u64,
            refused: AtomicU64::new(0),
            applied: watch::Sender::new(0),
        }
    }

    /// Whether a stream to the server is open now.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    pub(super) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
    }

    pub(super) fn record_size(&self, bytes: usize) {
        self.last_update_bytes
            .store(bytes as u64, Ordering::Relaxed);
    }

    pub(super) fn record_applied(&self) {
        self.applied.send_modify(|n| *n += 1);
    }

    pub(super) fn record_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// How many updates went into service.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// How many updates were refused (NACKed).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Returns once a first update has gone into service.
    pub async fn first_applied(&self) {
        let mut applied = self.applied.subscribe();
        // The sender lives in self, so the channel cannot close while waited on.
        let _ = applied.wait_for(|n| *n > 0).await;
    }
}

/// Writes `ratelimit_xds_connected`, `ratelimit_xds_update_bytes`,
/// `ratelimit_xds_update_bytes_limit` (`--config-xds-max-update-bytes`) and
/// `ratelimit_xds_updates_total{outcome="applied|refused"}`.
pub struct XdsCollector(pub Arc<XdsState>);

impl fmt::Debug for XdsCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("XdsCollector").finish_non_exhaustive()
    }
}

impl Collector for XdsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let state = &self.0;
        let gauges = [
            (
                "ratelimit_xds_connected",
                "1 while a stream to the xDS server is open",
                u64::from(state.is_connected()),
            ),
            (
                "ratelimit_xds_update_bytes",
                "Bytes of the last update received from the xDS server",
                state.last_update_bytes.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_xds_update_bytes_limit",
                "The most bytes an update may have (--config-xds-max-update-bytes)",
                state.max_update_bytes,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "ratelimit_xds_updates",
            "Updates from the xDS server, by outcome (applied, or refused and NACKed)",
            None,
            MetricType::Counter,
        )?;
        for (outcome, value) in [("applied", state.applied()), ("refused", state.refused())] {
            let labels = [("outcome", outcome)];
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
