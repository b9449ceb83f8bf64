//! [`LimitReqPolicy`]: a route's compiled `limit_req`, its buckets per key and the bound on waiting requests.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderName, StatusCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tollgate_core::{Clock, DelayMode, LeakyBucket};
use tollgate_store::{StoreConfig, WordStore};

use super::error::{LimitReqRejected, RejectReason};
use super::metrics::KeyTables;
use crate::config::{ConfigPath, FieldError, LimitReqConfig};
use crate::local_ratelimit::SharedClock;

/// Keys tracked per route unless `max_keys` says otherwise.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// Requests waiting at once per route unless `max_waiting` says otherwise.
pub const DEFAULT_MAX_WAITING: usize = 10_000;

/// What a key is read from.
#[derive(Clone, Debug)]
enum KeySource {
    /// The trusted client address.
    ClientAddress,
    /// A request header's value (absent: the empty key).
    Header(HeaderName),
}

/// The series a route's `limit_req` reports (shared by the policies of successive reloads).
#[derive(Clone, Debug)]
pub struct LimitReqStats {
    /// Requests that waited their turn.
    pub delayed: Counter,
    /// Requests rejected (over the burst or the waiting bound).
    pub rejected: Counter,
    /// `dry_run`: requests that would have waited or been rejected.
    pub dry_run: Counter,
    /// How long delayed requests waited.
    pub delay: Histogram,
    /// Requests waiting now.
    pub waiting: Gauge,
    /// The route's key tables, for the keys held and their bound.
    pub tables: Arc<KeyTables>,
}

impl Default for LimitReqStats {
    /// Fresh series, not registered anywhere (tests).
    fn default() -> Self {
        LimitReqStats {
            delayed: Counter::default(),
            rejected: Counter::default(),
            dry_run: Counter::default(),
            delay: Histogram::new(DELAY_BUCKETS),
            waiting: Gauge::default(),
            tables: Arc::default(),
        }
    }
}

/// The delay histogram's buckets, in seconds: 1 ms to about 16 s.
pub const DELAY_BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

/// What `limit_req` says of one request.
#[derive(Debug)]
pub enum Verdict {
    /// Go upstream now.
    Pass,
    /// Go upstream after this wait; the [`Waiting`] slot frees itself when dropped.
    Wait(Duration, Waiting),
    /// Answer with this rejection.
    Reject(LimitReqRejected),
}

/// One of a route's `max_waiting` slots, held while a request waits.
#[derive(Debug)]
pub struct Waiting {
    policy: Arc<LimitReqPolicy>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.policy.waiting.fetch_sub(1, Ordering::AcqRel);
        self.policy.stats.waiting.dec();
    }
}

/// A compiled `limit_req` and the buckets of the keys seen.
pub struct LimitReqPolicy {
    key: KeySource,
    status: StatusCode,
    max_waiting: usize,
    dry_run: bool,
    clock: SharedClock,
    /// The keys' buckets: the store's bound and eviction order (least used
    /// first, so a flood of new keys never frees a key at its burst),
    /// watched by the route's `limit_req_keys` gauges.
    buckets: Arc<WordStore<LeakyBucket>>,
    waiting: AtomicUsize,
    stats: LimitReqStats,
}

impl std::fmt::Debug for LimitReqPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitReqPolicy")
            .field("bucket", self.buckets.algorithm())
            .field("key", &self.key)
            .field("status", &self.status)
            .field("max_waiting", &self.max_waiting)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

/// nginx's rate syntax: `N r/s` or `N r/m` (spaces allowed), N a whole number above 0.
pub fn parse_rate(text: &str) -> Result<(u64, Duration), String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (number, period) = if let Some(n) = compact.strip_suffix("r/s") {
        (n, Duration::from_secs(1))
    } else if let Some(n) = compact.strip_suffix("r/m") {
        (n, Duration::from_secs(60))
    } else {
        return Err(format!("`{text}` is not a rate: write `10r/s` or `30r/m`"));
    };
    match number.parse::<u64>() {
        Ok(n) if n > 0 => Ok((n, period)),
        _ => Err(format!(
            "`{text}` is not a rate: the number of requests must be a whole number above 0"
        )),
    }
}

impl LimitReqPolicy {
    /// Compiles `config` (at `at` in the file), reporting into `stats`.
    pub fn compile(
        config: &LimitReqConfig,
        clock: SharedClock,
        stats: LimitReqStats,
        at: &ConfigPath,
    ) -> Result<Self, FieldError> {
        let (rate, period) = parse_rate(&config.rate).map_err(|e| at.key("rate").error(e))?;
        let mode = match (config.nodelay, config.delay) {
            (true, Some(_)) => {
                return Err(at
                    .key("delay")
                    .error("excludes `nodelay` (nginx takes one or the other)"));
            }
            (true, None) => DelayMode::NoDelay,
            (false, Some(n)) => DelayMode::DelayAfter(n),
            (false, None) => DelayMode::Delay,
        };
        let bucket = LeakyBucket::new(rate, period, config.burst, mode).map_err(|e| {
            let field = if e.to_string().contains("delay") {
                "delay"
            } else {
                "burst"
            };
            at.key(field).error(e.to_string())
        })?;
        let key = match &config.key_header {
            None => KeySource::ClientAddress,
            Some(name) => {
                KeySource::Header(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    at.key("key_header")
                        .error(format!("`{name}` is not a header name"))
                })?)
            }
        };
        let status = match config.status {
            None => StatusCode::TOO_MANY_REQUESTS,
            Some(code) => StatusCode::from_u16(code)
                .ok()
                .filter(|s| s.is_client_error() || s.is_server_error())
                .ok_or_else(|| {
                    at.key("status")
                        .error(format!("{code} is not a 4xx or 5xx status"))
                })?,
        };
        let max_keys = config.max_keys.unwrap_or(DEFAULT_MAX_KEYS);
        if max_keys == 0 {
            return Err(at.key("max_keys").error("must be at least 1"));
        }
        let max_waiting = config.max_waiting.unwrap_or(DEFAULT_MAX_WAITING);
        let buckets = Arc::new(WordStore::new(bucket, StoreConfig::with_max_keys(max_keys)));
        stats.tables.watch(&buckets);
        Ok(LimitReqPolicy {
            key,
            status,
            max_waiting,
            dry_run: config.dry_run,
            clock,
            buckets,
            waiting: AtomicUsize::new(0),
            stats,
        })
    }

    /// The most requests that wait at once on this route.
    pub fn max_waiting(&self) -> usize {
        self.max_waiting
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Keys tracked now.
    pub fn keys(&self) -> usize {
        self.buckets.len()
    }

    /// The most keys tracked at once (`max_keys`, as the table rounds it).
    pub fn max_keys(&self) -> usize {
        self.buckets.max_keys()
    }

    /// The key of a request from `client` with `headers`.
    fn key_of(&self, client: IpAddr, headers: &HeaderMap) -> Vec<u8> {
        match &self.key {
            KeySource::ClientAddress => match client {
                IpAddr::V4(v4) => v4.octets().to_vec(),
                IpAddr::V6(v6) => v6.octets().to_vec(),
            },
            KeySource::Header(name) => headers
                .get(name)
                .map(|v| v.as_bytes().to_vec())
                .unwrap_or_default(),
        }
    }

    /// Decides one request from `client` with `headers`.
    pub fn decide(self: &Arc<Self>, client: IpAddr, headers: &HeaderMap) -> Verdict {
        let key = self.key_of(client, headers);
        let now = self.clock.now();
        let decision = self.buckets.check(key.as_slice(), now, 1);
        if !decision.is_allowed() {
            if self.dry_run {
                self.stats.dry_run.inc();
                return Verdict::Pass;
            }
            self.stats.rejected.inc();
            return Verdict::Reject(LimitReqRejected {
                status: self.status,
                retry_after: decision.retry_after().unwrap_or_default(),
                reason: RejectReason::OverBurst,
            });
        }
        let delay = decision.delay();
        if delay.is_zero() {
            return Verdict::Pass;
        }
        if self.dry_run {
            self.stats.dry_run.inc();
            return Verdict::Pass;
        }
        let slot = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w < self.max_waiting).then_some(w + 1)
            });
        if slot.is_err() {
            // It will not wait, so it takes nothing from the key's budget.
            self.buckets.refund(key.as_slice(), now, 1);
            self.stats.rejected.inc();
            return Verdict::Reject(LimitReqRejected {
                status: self.status,
                retry_after: delay,
                reason: RejectReason::QueueFull,
            });
        }
        self.stats.waiting.inc();
        self.stats.delayed.inc();
        self.stats.delay.observe(delay.as_secs_f64());
        Verdict::Wait(
            delay,
            Waiting {
                policy: Arc::clone(self),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{ManualClock, Timestamp};

    fn policy(yaml: &str) -> (Arc<LimitReqPolicy>, ManualClock) {
        let config: LimitReqConfig = serde_saphyr::from_str(yaml).expect("valid YAML");
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let policy = LimitReqPolicy::compile(
            &config,
            Arc::new(clock.clone()),
            LimitReqStats::default(),
            &ConfigPath::root().key("limit_req"),
        )
        .expect("compiles");
        (Arc::new(policy), clock)
    }

    fn ip() -> IpAddr {
        IpAddr::from([10, 0, 0, 1])
    }

    fn summary(verdict: &Verdict) -> String {
        match verdict {
            Verdict::Pass => "pass".into(),
            Verdict::Wait(d, _) => format!("wait {}ms", d.as_millis()),
            Verdict::Reject(r) => format!("reject {}", r.status.as_u16()),
        }
    }

    #[test]
    fn a_burst_from_idle_waits_its_turn_at_the_rate_then_is_rejected() {
        let (policy, _clock) = policy("{rate: 10r/s, burst: 3}");
        let seen: Vec<String> = (0..5)
            .map(|_| summary(&policy.decide(ip(), &HeaderMap::new())))
            .collect();
        assert_eq!(
            seen,
            [
                "pass",
                "wait 100ms",
                "wait 200ms",
                "wait 300ms",
                "reject 429"
            ]
        );
    }

    #[test]
    fn delay_n_passes_n_at_once_and_nodelay_passes_the_whole_burst() {
        let (two, _) = policy("{rate: 10r/s, burst: 4, delay: 2}");
        let seen: Vec<String> = (0..6)
            .map(|_| summary(&two.decide(ip(), &HeaderMap::new())))
            .collect();
        assert_eq!(
            seen,
            [
                "pass",
                "pass",
                "pass",
                "wait 100ms",
                "wait 200ms",
                "reject 429"
            ]
        );
        let (nodelay, _) = policy("{rate: 10r/s, burst: 2, nodelay: true, status: 503}");
        let seen: Vec<String> = (0..4)
            .map(|_| summary(&nodelay.decide(ip(), &HeaderMap::new())))
            .collect();
        assert_eq!(seen, ["pass", "pass", "pass", "reject 503"]);
    }

    #[test]
    fn excess_drains_at_the_rate_and_keys_are_apart() {
        let (policy, clock) = policy("{rate: 30r/m, burst: 1, nodelay: true, key_header: x-key}");
        let a = HeaderMap::from_iter([(HeaderName::from_static("x-key"), "a".parse().unwrap())]);
        let b = HeaderMap::from_iter([(HeaderName::from_static("x-key"), "b".parse().unwrap())]);
        assert_eq!(summary(&policy.decide(ip(), &a)), "pass");
        assert_eq!(summary(&policy.decide(ip(), &a)), "pass");
        assert_eq!(summary(&policy.decide(ip(), &a)), "reject 429");
        assert_eq!(summary(&policy.decide(ip(), &b)), "pass", "another key");
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            summary(&policy.decide(ip(), &a)),
            "pass",
            "one drained in 2 s"
        );
        assert_eq!(summary(&policy.decide(ip(), &a)), "reject 429");
    }

    #[test]
    fn past_max_waiting_a_request_that_would_wait_is_rejected_and_gives_its_unit_back() {
        let (policy, _) = policy("{rate: 10r/s, burst: 5, max_waiting: 1}");
        assert_eq!(summary(&policy.decide(ip(), &HeaderMap::new())), "pass");
        let first = policy.decide(ip(), &HeaderMap::new());
        assert_eq!(summary(&first), "wait 100ms");
        assert_eq!(policy.waiting(), 1);
        let second = policy.decide(ip(), &HeaderMap::new());
        assert!(
            matches!(&second, Verdict::Reject(r) if r.reason == RejectReason::QueueFull),
            "{second:?}"
        );
        drop(first);
        assert_eq!(policy.waiting(), 0);
        // The rejected request took nothing: the next waits 200 ms, not 300.
        assert_eq!(
            summary(&policy.decide(ip(), &HeaderMap::new())),
            "wait 200ms"
        );
    }

    #[test]
    fn a_flood_of_one_off_keys_never_frees_a_key_at_its_burst_or_with_requests_waiting() {
        // 64 keys at most; the flood brings 40 times that, each key sending
        // one request or its whole burst, 1 ms apart (nothing drains at 1r/m).
        for mode in ["nodelay: true", "delay: 0"] {
            for flood_requests in [1, 4] {
                let yaml = format!("{{rate: 1r/m, burst: 3, {mode}, max_keys: 64}}");
                let (policy, clock) = policy(&yaml);
                let victim = IpAddr::from([192, 0, 2, 1]);
                let none = HeaderMap::new();
                // The whole burst: four pass at once, or one passes and three wait.
                let spent: Vec<Verdict> = (0..4).map(|_| policy.decide(victim, &none)).collect();
                assert!(
                    spent.iter().all(|v| !matches!(v, Verdict::Reject(_))),
                    "{yaml}: {spent:?}"
                );
                drop(spent);
                assert_eq!(summary(&policy.decide(victim, &none)), "reject 429");
                for n in 0..2560u32 {
                    let client = IpAddr::from((10 << 24 | n).to_be_bytes());
                    for _ in 0..flood_requests {
                        drop(policy.decide(client, &none));
                    }
                    clock.advance(Duration::from_millis(1));
                    if n % 97 == 0 {
                        assert_eq!(
                            summary(&policy.decide(victim, &none)),
                            "reject 429",
                            "{yaml}, {flood_requests} per flood key: freed at flood key {n}"
                        );
                    }
                }
                assert!(policy.keys() <= 64, "{}", policy.keys());
            }
        }
    }

    #[test]
    fn dry_run_counts_but_neither_delays_nor_rejects() {
        let (policy, _) = policy("{rate: 10r/s, dry_run: true}");
        for _ in 0..5 {
            assert_eq!(summary(&policy.decide(ip(), &HeaderMap::new())), "pass");
        }
        assert_eq!(policy.stats.dry_run.get(), 4);
    }

    #[test]
    fn bad_settings_name_their_field() {
        for (yaml, field) in [
            ("{rate: 10}", "limit_req.rate"),
            ("{rate: 0r/s}", "limit_req.rate"),
            ("{rate: 10r/s, burst: 2, delay: 3}", "limit_req.delay"),
            ("{rate: 10r/s, delay: 1, nodelay: true}", "limit_req.delay"),
            ("{rate: 10r/s, status: 200}", "limit_req.status"),
            ("{rate: 10r/s, max_keys: 0}", "limit_req.max_keys"),
            ("{rate: 10r/s, key_header: \"a b\"}", "limit_req.key_header"),
        ] {
            let config: LimitReqConfig = serde_saphyr::from_str(yaml).expect("valid YAML");
            let error = LimitReqPolicy::compile(
                &config,
                Arc::new(ManualClock::new(Timestamp::from_secs(1))),
                LimitReqStats::default(),
                &ConfigPath::root().key("limit_req"),
            )
            .expect_err(yaml);
            assert!(error.to_string().contains(field), "{yaml}: {error}");
        }
    }
}
