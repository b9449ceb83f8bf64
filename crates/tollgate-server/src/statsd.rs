//! statsd output with envoyproxy/ratelimit's stat names, for `USE_STATSD=true` (plain statsd) and `USE_DOG_STATSD=true` (DogStatsD tags), over TCP or UDP.
//!
//! [`StatsdFlusher`] sends, every flush interval, what the counters of
//! [`Metrics`] gained since the last flush as statsd counters (`NAME:N|c`),
//! gauges as they are (`NAME:N|g`), and each gRPC call's response time as a
//! timer in milliseconds (`NAME:MS|ms`). The names ([`stats`]):
//!
//! * `ratelimit.service.rate_limit.<stats key>.{total_hits,over_limit,near_limit,within_limit,shadow_mode,over_limit_with_local_cache}`,
//!   `ratelimit.service.rate_limit.<domain>.domain_not_found`
//! * `ratelimit_server.ShouldRateLimit.total_requests`, `ratelimit_server.ShouldRateLimit.response_time`
//! * `ratelimit.service.call.should_rate_limit.{redis_error,service_error}`
//! * `ratelimit.service.config_load_success`, `ratelimit.service.config_load_error`,
//!   `ratelimit.service.global_shadow_mode`
//! * `ratelimit.redis_pool.cx_active` (a gauge), `ratelimit.redis_pool.cx_total`
//!
//! The extra tags (upstream's `EXTRA_TAGS`) go on every line, sorted by
//! name, with `.`, `:` and `|` in a value replaced by `_` as upstream's stats
//! library does: in plain statsd as that library writes them, in the name
//! (`NAME.__k1=v1.__k2=v2:N|c`); in DogStatsD after the type
//! (`NAME:N|c|#k1:v1,k2:v2`).
//!
//! Transports, as upstream's: plain statsd goes over TCP unless
//! `STATSD_PROTOCOL=udp` (its stats library's default and setting);
//! DogStatsD goes over UDP (its client's default). Over UDP the lines are
//! packed into datagrams of at most [`MAX_DATAGRAM`] bytes and a failed
//! send is dropped. Over TCP the flusher connects when it has something to
//! send (within [`CONNECT_TIMEOUT`]), writes within [`WRITE_TIMEOUT`], and
//! after a failed write drops the connection and connects again at the
//! next flush; while no connection can be made, lines wait in a buffer of
//! at most `buffer_bytes`, and lines past it are dropped and counted.
//! The flusher runs on its own task: a slow or unreachable statsd server
//! never delays a decision.
//!
//! A stats key holds request values for `detailed_metric` and
//! `value_to_metric` rules: each part is at most `--max-metric-label-bytes`
//! ([`crate::metric_key`]) and holds no character that would end the line
//! or add tags (`statsd_safe`).
//!
//! [`stats_text`] lists the same stats, with their totals, as upstream's
//! debug port lists its own at `/stats`: one `name: value` line each.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

use crate::exposition::ExtraTags;
use crate::metrics::{GRPC_METHOD, Metrics};
use crate::rule_stats::RuleStat;

/// The largest datagram sent: fits an Ethernet MTU with IP and UDP headers.
pub const MAX_DATAGRAM: usize = 1432;

/// Upstream's default flush interval (`STATS_FLUSH_INTERVAL`).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(10);

/// The most bytes of lines kept while a TCP statsd server cannot be reached, unless configured otherwise (about what upstream's stats library keeps).
pub const DEFAULT_BUFFER_BYTES: usize = 4 << 20;

/// How long a TCP connection to the statsd server may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

/// How long one flush's write to the TCP statsd server may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// How statsd lines travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// One connection, reopened after a failure (upstream's default for plain statsd).
    Tcp,
    /// Datagrams, each dropped if it cannot be sent.
    Udp,
}

/// How tags are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Plain statsd: tags in the name, `.__name=value`.
    Plain,
    /// DogStatsD: tags after the type, `|#name:value,…`.
    Dog,
}

/// Where and how [`StatsdFlusher`] sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsdOptions {
    /// `host:port`.
    pub target: String,
    /// TCP or UDP.
    pub transport: Transport,
    /// Plain statsd or DogStatsD.
    pub dialect: Dialect,
    /// The most bytes of lines kept while the server cannot be reached (TCP).
    pub buffer_bytes: usize,
}

/// What the flusher kept and dropped, for `/metrics`.
#[derive(Debug, Default)]
pub struct StatsdStats {
    /// Bytes of lines waiting for a connection.
    pub pending_bytes: AtomicU64,
    /// The most bytes that may wait (the setting).
    pub buffer_bytes: AtomicU64,
    /// Lines dropped: past the buffer, or in a failed send.
    pub dropped_lines: AtomicU64,
}

/// Writes [`StatsdStats`] on each scrape.
#[derive(Debug)]
pub struct StatsdCollector(pub Arc<StatsdStats>);

impl Collector for StatsdCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let load = |c: &AtomicU64| i64::try_from(c.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        for (name, help, value) in [
            (
                "ratelimit_statsd_pending_bytes",
                "Bytes of statsd lines waiting for a connection to the statsd server",
                load(&self.0.pending_bytes),
            ),
            (
                "ratelimit_statsd_buffer_limit_bytes",
                "The most bytes of statsd lines kept while the server cannot be reached (--statsd-buffer-bytes)",
                load(&self.0.buffer_bytes),
            ),
        ] {
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        let dropped = ConstCounter::new(self.0.dropped_lines.load(Ordering::Relaxed));
        let metric = encoder.encode_descriptor(
            "ratelimit_statsd_dropped_lines",
            "statsd lines dropped: past the buffer while the server could not be reached, or in a failed send",
            None,
            dropped.metric_type(),
        )?;
        dropped.encode(metric)
    }
}

/// Whether a stat is sent as a counter (its gain since the last flush) or a gauge (its value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// `|c`, the gain since the last flush.
    Counter,
    /// `|g`, the value.
    Gauge,
}

/// One stat under its statsd name, with its total (a counter) or value (a gauge).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Upstream's statsd name.
    pub name: String,
    /// The total since start, or the gauge's value.
    pub value: u64,
    /// Counter or gauge.
    pub kind: StatKind,
}

/// Every stat of `metrics` under upstream's statsd names.
pub fn stats(metrics: &Metrics) -> Vec<Stat> {
    let counter = |name: String, value: u64| Stat {
        name,
        value,
        kind: StatKind::Counter,
    };
    let mut out = Vec::new();
    for (key, values) in metrics.rule_stats().snapshot() {
        let dotted = statsd_safe(&key.dotted());
        for stat in RuleStat::ALL {
            let value = values[stat as usize];
            if value > 0 {
                out.push(counter(
                    format!("ratelimit.service.rate_limit.{dotted}.{}", stat.name()),
                    value,
                ));
            }
        }
    }
    let now = metrics.service_snapshot();
    for (name, value) in [
        (
            format!("ratelimit_server.{GRPC_METHOD}.total_requests"),
            now.total_requests,
        ),
        (
            "ratelimit.service.call.should_rate_limit.redis_error".to_owned(),
            now.redis_errors,
        ),
        (
            "ratelimit.service.call.should_rate_limit.service_error".to_owned(),
            now.service_errors,
        ),
        (
            "ratelimit.service.config_load_success".to_owned(),
            now.config_load_success,
        ),
        (
            "ratelimit.service.config_load_error".to_owned(),
            now.config_load_error,
        ),
        (
            "ratelimit.service.global_shadow_mode".to_owned(),
            now.global_shadow_mode,
        ),
    ] {
        out.push(counter(name, value));
    }
    if let Some((active, total)) = metrics.redis_pool() {
        out.push(Stat {
            name: "ratelimit.redis_pool.cx_active".to_owned(),
            value: active,
            kind: StatKind::Gauge,
        });
        out.push(counter("ratelimit.redis_pool.cx_total".to_owned(), total));
    }
    out
}

/// Every stat of `metrics` as upstream's debug port lists its stats at `/stats`: `name: value` lines, sorted by name.
pub fn stats_text(metrics: &Metrics) -> String {
    let mut all = stats(metrics);
    all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let mut text = String::new();
    for stat in all {
        text.push_str(&stat.name);
        text.push_str(": ");
        text.push_str(&stat.value.to_string());
        text.push('\n');
    }
    text
}

/// The socket lines go out on.
#[derive(Debug)]
enum Sink {
    Udp(UdpSocket),
    /// The connection, once made (and again after a failure).
    Tcp(Option<TcpStream>),
}

/// Sends [`Metrics`] to a statsd server.
#[derive(Debug)]
pub struct StatsdFlusher {
    metrics: Arc<Metrics>,
    options: StatsdOptions,
    sink: Sink,
    /// Each counter's total at the last flush.
    sent: HashMap<String, u64>,
    /// Lines waiting for a connection (TCP), at most `options.buffer_bytes`.
    pending: VecDeque<String>,
    pending_bytes: usize,
    stats: Arc<StatsdStats>,
    /// The extra tags, written once in the dialect's form.
    tags: String,
}

impl StatsdFlusher {
    /// A flusher sending as `options` say: over UDP `target` is resolved now;
    /// over TCP it is resolved and connected at the first flush (so a server
    /// not up yet delays nothing).
    pub async fn connect(metrics: Arc<Metrics>, options: StatsdOptions) -> std::io::Result<Self> {
        let sink = match options.transport {
            Transport::Tcp => Sink::Tcp(None),
            Transport::Udp => {
                let remote = tokio::net::lookup_host(&options.target)
                    .await?
                    .next()
                    .ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            format!("{} has no address", options.target),
                        )
                    })?;
                let local = if remote.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let socket = UdpSocket::bind(local).await?;
                socket.connect(remote).await?;
                Sink::Udp(socket)
            }
        };
        let stats = metrics.statsd_stats();
        stats
            .buffer_bytes
            .store(options.buffer_bytes as u64, Ordering::Relaxed);
        let tags = written_tags(metrics.extra_tags(), options.dialect);
        Ok(StatsdFlusher {
            metrics,
            options,
            sink,
            sent: HashMap::new(),
            pending: VecDeque::new(),
            pending_bytes: 0,
            stats,
            tags,
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

    /// Sends what changed since the last flush, with what was waiting.
    pub async fn flush(&mut self) {
        for line in self.lines() {
            self.keep(line);
        }
        match &mut self.sink {
            Sink::Udp(socket) => {
                let lines: Vec<String> = self.pending.drain(..).collect();
                self.pending_bytes = 0;
                for datagram in datagrams(&lines) {
                    if let Err(error) = socket.send(datagram.as_bytes()).await {
                        let count = datagram.split('\n').count() as u64;
                        self.stats.dropped_lines.fetch_add(count, Ordering::Relaxed);
                        tracing::debug!(%error, "a statsd datagram was not sent");
                    }
                }
            }
            Sink::Tcp(connection) => {
                if self.pending.is_empty() {
                    return;
                }
                if connection.is_none() {
                    match tokio::time::timeout(
                        CONNECT_TIMEOUT,
                        TcpStream::connect(&self.options.target),
                    )
                    .await
                    {
                        Ok(Ok(stream)) => *connection = Some(stream),
                        Ok(Err(error)) => {
                            tracing::debug!(%error, target = %self.options.target, "cannot connect to statsd; lines wait");
                        }
                        Err(_) => {
                            tracing::debug!(target = %self.options.target, "connecting to statsd timed out; lines wait");
                        }
                    }
                }
                let Some(stream) = connection else {
                    self.stats
                        .pending_bytes
                        .store(self.pending_bytes as u64, Ordering::Relaxed);
                    return;
                };
                let mut bytes = String::with_capacity(self.pending_bytes);
                for line in &self.pending {
                    bytes.push_str(line);
                    bytes.push('\n');
                }
                let count = self.pending.len() as u64;
                self.pending.clear();
                self.pending_bytes = 0;
                let written =
                    tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(bytes.as_bytes())).await;
                if !matches!(written, Ok(Ok(()))) {
                    // What reached the server is unknown: drop it rather than count twice.
                    self.stats.dropped_lines.fetch_add(count, Ordering::Relaxed);
                    tracing::debug!(target = %self.options.target, "a statsd write failed; reconnecting at the next flush");
                    *connection = None;
                }
            }
        }
        self.stats
            .pending_bytes
            .store(self.pending_bytes as u64, Ordering::Relaxed);
    }

    /// Keeps `line` to send, unless the buffer is full: then it is dropped and counted.
    fn keep(&mut self, line: String) {
        let size = line.len() + 1;
        if self.options.transport == Transport::Tcp
            && self.pending_bytes + size > self.options.buffer_bytes
        {
            self.stats.dropped_lines.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.pending_bytes += size;
        self.pending.push_back(line);
    }

    /// The statsd lines of what changed since the last call.
    fn lines(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for stat in stats(&self.metrics) {
            let (value, kind) = match stat.kind {
                StatKind::Gauge => (stat.value, "g"),
                StatKind::Counter => {
                    let before = self.sent.insert(stat.name.clone(), stat.value);
                    let delta = stat.value.saturating_sub(before.unwrap_or(0));
                    if delta == 0 {
                        continue;
                    }
                    (delta, "c")
                }
            };
            lines.push(self.line(&stat.name, &value.to_string(), kind));
        }
        for seconds in self.metrics.take_timings() {
            let name = format!("ratelimit_server.{GRPC_METHOD}.response_time");
            lines.push(self.line(&name, &format!("{:.3}", seconds * 1000.0), "ms"));
        }
        lines
    }

    /// One line: `name`, `value` and `kind`, with the tags as the dialect writes them.
    fn line(&self, name: &str, value: &str, kind: &str) -> String {
        match self.options.dialect {
            Dialect::Plain => format!("{name}{}:{value}|{kind}", self.tags),
            Dialect::Dog => format!("{name}:{value}|{kind}{}", self.tags),
        }
    }
}

/// The extra tags as `dialect` writes them after a name (plain) or a type (DogStatsD), sorted by name.
fn written_tags(tags: &ExtraTags, dialect: Dialect) -> String {
    let mut pairs: Vec<(String, String)> = tags
        .pairs()
        .iter()
        .map(|(name, value)| {
            (
                name.clone(),
                statsd_safe(&value.replace(['.', ':', '|'], "_")),
            )
        })
        .collect();
    pairs.sort_unstable();
    match dialect {
        Dialect::Plain => pairs
            .iter()
            .map(|(name, value)| format!(".__{name}={value}"))
            .collect(),
        Dialect::Dog if pairs.is_empty() => String::new(),
        Dialect::Dog => {
            let joined: Vec<String> = pairs
                .iter()
                .map(|(name, value)| format!("{name}:{value}"))
                .collect();
            format!("|#{}", joined.join(","))
        }
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

    #[test]
    fn tags_are_sorted_and_written_in_each_dialect() {
        let tags = ExtraTags::parse("zone:eu.1,app:rl").expect("valid");
        assert_eq!(written_tags(&tags, Dialect::Plain), ".__app=rl.__zone=eu_1");
        assert_eq!(written_tags(&tags, Dialect::Dog), "|#app:rl,zone:eu_1");
        assert_eq!(written_tags(&ExtraTags::default(), Dialect::Dog), "");
    }
}
