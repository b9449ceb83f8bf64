//! statsd output with envoyproxy/ratelimit's stat names, for `USE_STATSD=true`.
//!
//! [`StatsdFlusher`] sends, every flush interval, what the counters of
//! [`Metrics`] gained since the last flush as statsd counters (`NAME:N|c`),
//! and each gRPC call's response time as a timer in milliseconds
//! (`NAME:MS|ms`), over UDP in datagrams of at most [`MAX_DATAGRAM`] bytes:
//!
//! * `ratelimit.service.rate_limit.<stats key>.{total_hits,over_limit,near_limit,within_limit,shadow_mode}`
//! * `ratelimit_server.ShouldRateLimit.total_requests`, `ratelimit_server.ShouldRateLimit.response_time`
//! * `ratelimit.service.call.should_rate_limit.{redis_error,service_error}`
//! * `ratelimit.service.config_load_success`, `ratelimit.service.config_load_error`,
//!   `ratelimit.service.global_shadow_mode`
//!
//! A stats key holds request values for `detailed_metric` and
//! `value_to_metric` rules: each part is at most `--max-metric-label-bytes`
//! ([`crate::metric_key`]) and holds no character that would end the line
//! or add tags ([`statsd_safe`]). Counters that did not change are not sent. A send that fails is logged
//! at debug level and dropped, as statsd over UDP is.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;

use crate::metrics::{GRPC_METHOD, Metrics, ServiceSnapshot};
use crate::rule_stats::{RuleStat, StatValues, StatsKey};

/// The largest datagram sent: fits an Ethernet MTU with IP and UDP headers.
pub const MAX_DATAGRAM: usize = 1432;

/// Upstream's default flush interval (`STATS_FLUSH_INTERVAL`).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(10);

/// Sends [`Metrics`] to a statsd server.
#[derive(Debug)]
pub struct StatsdFlusher {
    metrics: Arc<Metrics>,
    socket: UdpSocket,
    rules: HashMap<StatsKey, StatValues>,
    service: ServiceSnapshot,
}

impl StatsdFlusher {
    /// A flusher sending to `target` (`host:port`), resolved once now.
    pub async fn connect(metrics: Arc<Metrics>, target: &str) -> std::io::Result<Self> {
        let remote = tokio::net::lookup_host(target)
            .await?
            .next()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{target} has no address"),
                )
            })?;
        let local = if remote.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let socket = UdpSocket::bind(local).await?;
        socket.connect(remote).await?;
        Ok(StatsdFlusher {
            metrics,
            socket,
            rules: HashMap::new(),
            service: ServiceSnapshot::default(),
        })
    }

    /// Flushes every `interval` until `stop` completes, then once more.
    pub async fn run(mut self, interval: Duration, stop: impl Future<Output = ()>) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.flush().await,
                () = &mut stop => break,
            }
        }
        self.flush().await;
    }

    /// Sends what changed since the last flush.
    pub async fn flush(&mut self) {
        let lines = self.lines();
        for datagram in datagrams(&lines) {
            if let Err(error) = self.socket.send(datagram.as_bytes()).await {
                tracing::debug!(%error, "a statsd datagram was not sent");
            }
        }
    }

    /// The statsd lines of what changed since the last call.
    fn lines(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for (key, values) in self.metrics.rule_stats().snapshot() {
            let before = self.rules.get(&key).copied().unwrap_or_default();
            let dotted = statsd_safe(&key.dotted());
            for stat in RuleStat::ALL {
                let delta = values[stat as usize].saturating_sub(before[stat as usize]);
                if delta > 0 {
                    lines.push(format!(
                        "ratelimit.service.rate_limit.{dotted}.{}:{delta}|c",
                        stat.name()
                    ));
                }
            }
            self.rules.insert(key, values);
        }
        let now = self.metrics.service_snapshot();
        let before = std::mem::replace(&mut self.service, now);
        for (name, now, before) in [
            (
                format!("ratelimit_server.{GRPC_METHOD}.total_requests"),
                now.total_requests,
                before.total_requests,
            ),
            (
                "ratelimit.service.call.should_rate_limit.redis_error".to_owned(),
                now.redis_errors,
                before.redis_errors,
            ),
            (
                "ratelimit.service.call.should_rate_limit.service_error".to_owned(),
                now.service_errors,
                before.service_errors,
            ),
            (
                "ratelimit.service.config_load_success".to_owned(),
                now.config_load_success,
                before.config_load_success,
            ),
            (
                "ratelimit.service.config_load_error".to_owned(),
                now.config_load_error,
                before.config_load_error,
            ),
            (
                "ratelimit.service.global_shadow_mode".to_owned(),
                now.global_shadow_mode,
                before.global_shadow_mode,
            ),
        ] {
            let delta = now.saturating_sub(before);
            if delta > 0 {
                lines.push(format!("{name}:{delta}|c"));
            }
        }
        for seconds in self.metrics.take_timings() {
            lines.push(format!(
                "ratelimit_server.{GRPC_METHOD}.response_time:{:.3}|ms",
                seconds * 1000.0
            ));
        }
        lines
    }
}

/// `name` with what a statsd server would read as the end of a line or as
/// tags replaced by `_`: control characters (a newline would start a line
/// of the caller's choosing) and the tag syntax of the statsd_exporter's
/// InfluxDB (`,`), Librato (`#`) and SignalFx (`[`, `]`) formats. The
/// stats key already has `.`, `:` and `|` replaced, as upstream's.
fn statsd_safe(name: &str) -> String {
    name.replace(
        |c: char| c.is_control() || matches!(c, ',' | '#' | '[' | ']'),
        "_",
    )
}

/// `lines` packed into newline-separated datagrams of at most [`MAX_DATAGRAM`] bytes.
fn datagrams(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in lines {
        if !current.is_empty() && current.len() + 1 + line.len() > MAX_DATAGRAM {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_pack_into_bounded_datagrams() {
        let lines: Vec<String> = (0..300).map(|i| format!("a.b.c{i}:1|c")).collect();
        let packed = datagrams(&lines);
        assert!(packed.len() > 1);
        assert!(packed.iter().all(|d| d.len() <= MAX_DATAGRAM));
        let back: Vec<&str> = packed.iter().flat_map(|d| d.split('\n')).collect();
        assert_eq!(back, lines.iter().map(String::as_str).collect::<Vec<_>>());
    }

    #[test]
    fn a_request_value_cannot_end_a_statsd_line_or_add_tags() {
        let name = statsd_safe("d.user_a\ninjected:42|c\r,tag=v#t=v[t=v]");
        assert_eq!(name, "d.user_a_injected:42|c__tag=v_t=v_t=v_");
        assert!(!name.contains(['\n', '\r', ',', '#', '[', ']']), "{name}");
    }
}
