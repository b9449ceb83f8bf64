//! The cluster configuration: endpoints, the balancer and the health policies.
//!
//! Every struct deserializes from YAML with snake_case names and rejects
//! unknown fields; [`ClusterConfig::validate`] then checks the values and
//! names the first field that is wrong.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A configuration that cannot be used, with the field that is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    field: String,
    message: String,
}

impl ConfigError {
    /// An error about `field` (a dotted path such as `outlier_detection.consecutive_5xx`).
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The dotted path of the offending field (empty for a YAML syntax error).
    pub fn field(&self) -> &str {
        &self.field
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// One upstream cluster: a name, static endpoints and how requests are spread and guarded.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The cluster's name, used in metrics and errors.
    pub name: String,
    /// The endpoints requests go to.
    pub endpoints: Vec<EndpointConfig>,
    /// How a request picks an endpoint.
    #[serde(default)]
    pub lb_policy: LbPolicy,
    /// Ring size bounds for `lb_policy: ring_hash`.
    #[serde(default)]
    pub ring_hash: RingHashConfig,
    /// Below this percentage of available endpoints the balancer ignores
    /// ejections and failed health checks and uses every endpoint (Envoy's
    /// panic threshold, default 50; 0 turns panic mode off).
    #[serde(default = "default_panic_threshold")]
    pub healthy_panic_threshold: u32,
    /// Passive health: eject endpoints that keep failing.
    #[serde(default)]
    pub outlier_detection: Option<OutlierDetectionConfig>,
    /// The cluster-wide circuit breaker.
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreakerConfig>,
    /// Active HTTP health checks.
    #[serde(default)]
    pub health_check: Option<HealthCheckConfig>,
}

fn default_panic_threshold() -> u32 {
    50
}

/// One endpoint: where it listens and its share of traffic.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// `host:port` (an IP address or a DNS name, and a port).
    pub address: String,
    /// The endpoint's weight, 1 to 1000 (default 1); used by
    /// `weighted_round_robin`, `ring_hash` and `random`.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

/// The largest endpoint weight accepted.
pub const MAX_WEIGHT: u32 = 1000;

/// How a request picks an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LbPolicy {
    /// Each endpoint in turn, weights ignored.
    #[default]
    RoundRobin,
    /// nginx's smooth weighted round robin.
    WeightedRoundRobin,
    /// Power of two choices on in-flight requests.
    LeastRequest,
    /// Consistent hashing of a caller-given key onto a ring of virtual nodes.
    RingHash,
    /// A weighted random endpoint.
    Random,
}

/// The ring hash balancer's ring (virtual nodes per unit of weight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingHashConfig {
    /// Virtual nodes an endpoint gets per unit of its weight (default 256).
    ///
    /// The count does not depend on the other endpoints, so adding an
    /// endpoint moves only the keys that now land on its nodes (about 1/N).
    #[serde(default = "default_virtual_nodes")]
    pub virtual_nodes: u32,
}

fn default_virtual_nodes() -> u32 {
    256
}

/// The most virtual nodes a ring may hold (sum of weights × `virtual_nodes`).
pub const MAX_RING_SIZE: u64 = 1 << 20;

impl Default for RingHashConfig {
    fn default() -> Self {
        RingHashConfig {
            virtual_nodes: default_virtual_nodes(),
        }
    }
}

/// Outlier detection with Envoy's field names and defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutlierDetectionConfig {
    /// Consecutive 5xx (gateway failures included) before an ejection (default 5).
    #[serde(default = "five")]
    pub consecutive_5xx: u32,
    /// Consecutive gateway failures (502, 503, 504, connect error, timeout,
    /// reset) before an ejection (default 5).
    #[serde(default = "five")]
    pub consecutive_gateway_failure: u32,
    /// Percent chance a consecutive-5xx detection ejects (default 100).
    #[serde(default = "hundred")]
    pub enforcing_consecutive_5xx: u32,
    /// Percent chance a consecutive-gateway-failure detection ejects
    /// (default 0, as in Envoy: gateway failures still count as 5xx).
    #[serde(default)]
    pub enforcing_consecutive_gateway_failure: u32,
    /// An endpoint that stays in service this long takes one off its
    /// ejection multiplier (default 10 s).
    #[serde(
        default = "ten_seconds",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub interval: Duration,
    /// An ejection lasts this × the times the endpoint was ejected (default 30 s).
    #[serde(
        default = "thirty_seconds",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub base_ejection_time: Duration,
    /// The longest ejection (default 300 s; never shorter than `base_ejection_time`).
    #[serde(
        default = "three_hundred_seconds",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub max_ejection_time: Duration,
    /// At most this percentage of the cluster is ejected at once (default 10).
    #[serde(default = "ten")]
    pub max_ejection_percent: u32,
    /// Eject one endpoint even when that exceeds `max_ejection_percent` (default false).
    #[serde(default)]
    pub always_eject_one_host: bool,
}

fn five() -> u32 {
    5
}
fn ten() -> u32 {
    10
}
fn hundred() -> u32 {
    100
}
fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}
fn thirty_seconds() -> Duration {
    Duration::from_secs(30)
}
fn three_hundred_seconds() -> Duration {
    Duration::from_secs(300)
}

impl Default for OutlierDetectionConfig {
    fn default() -> Self {
        OutlierDetectionConfig {
            consecutive_5xx: 5,
            consecutive_gateway_failure: 5,
            enforcing_consecutive_5xx: 100,
            enforcing_consecutive_gateway_failure: 0,
            interval: ten_seconds(),
            base_ejection_time: thirty_seconds(),
            max_ejection_time: three_hundred_seconds(),
            max_ejection_percent: 10,
            always_eject_one_host: false,
        }
    }
}

/// The cluster's circuit breaker: closed → open → half-open → closed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Consecutive failed requests (5xx or gateway failure) that open the breaker (default 5).
    #[serde(default = "five")]
    pub failure_threshold: u32,
    /// How long the breaker stays open the first time (default 5 s); each
    /// failed probe doubles it.
    #[serde(
        default = "five_seconds",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub open_duration: Duration,
    /// The longest the breaker stays open (default 60 s).
    #[serde(
        default = "sixty_seconds",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub max_open_duration: Duration,
    /// Requests let through at once while half-open (default 1).
    #[serde(default = "one")]
    pub half_open_requests: u32,
    /// Envoy's `max_requests`: at most this many requests in flight across the
    /// cluster; the next one is refused (unlimited when unset).
    #[serde(default)]
    pub max_requests: Option<u32>,
}

fn one() -> u32 {
    1
}
fn five_seconds() -> Duration {
    Duration::from_secs(5)
}
fn sixty_seconds() -> Duration {
    Duration::from_secs(60)
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            failure_threshold: 5,
            open_duration: five_seconds(),
            max_open_duration: sixty_seconds(),
            half_open_requests: 1,
            max_requests: None,
        }
    }
}

/// Active HTTP health checks: a GET to every endpoint each interval.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// Time between two rounds of checks (default 5 s).
    #[serde(
        default = "five_seconds",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub interval: Duration,
    /// A check that has not answered in this time failed (default 1 s).
    #[serde(
        default = "one_second",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub timeout: Duration,
    /// The path requested, starting with `/`.
    pub path: String,
    /// The `Host` header sent (default: the endpoint's address).
    #[serde(default)]
    pub host: Option<String>,
    /// Statuses that pass: codes or half-open ranges `{start, end}` (default 200).
    #[serde(default = "default_statuses")]
    pub expected_statuses: Vec<StatusRange>,
    /// Consecutive failed checks that mark a healthy endpoint unhealthy (default 3).
    #[serde(default = "three")]
    pub unhealthy_threshold: u32,
    /// Consecutive passed checks that mark an unhealthy endpoint healthy (default 2).
    #[serde(default = "two")]
    pub healthy_threshold: u32,
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}
fn two() -> u32 {
    2
}
fn three() -> u32 {
    3
}
fn default_statuses() -> Vec<StatusRange> {
    vec![StatusRange {
        start: 200,
        end: 201,
    }]
}

/// HTTP statuses from `start` (inclusive) to `end` (exclusive), like Envoy's `Int64Range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRange {
    /// The first status in the range.
    pub start: u16,
    /// One past the last status in the range.
    pub end: u16,
}

impl StatusRange {
    /// Whether `status` is in the range.
    pub fn contains(&self, status: u16) -> bool {
        (self.start..self.end).contains(&status)
    }
}

impl<'de> Deserialize<'de> for StatusRange {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Code(u16),
            Range { start: u16, end: u16 },
        }
        match Raw::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom("expected a status code or a range {start, end}")
        })? {
            Raw::Code(code) => Ok(StatusRange {
                start: code,
                end: code.saturating_add(1),
            }),
            Raw::Range { start, end } => Ok(StatusRange { start, end }),
        }
    }
}

impl ClusterConfig {
    /// Parses one cluster from YAML and validates it.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let config: ClusterConfig =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::new("", e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every value and names the first one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::new("name", "must not be empty"));
        }
        if self.endpoints.is_empty() {
            return Err(ConfigError::new(
                "endpoints",
                "a cluster needs at least one endpoint",
            ));
        }
        for (i, endpoint) in self.endpoints.iter().enumerate() {
            let field = format!("endpoints[{i}]");
            validate_address(&endpoint.address)
                .map_err(|m| ConfigError::new(format!("{field}.address"), m))?;
            if endpoint.weight == 0 || endpoint.weight > MAX_WEIGHT {
                return Err(ConfigError::new(
                    format!("{field}.weight"),
                    format!("must be 1 to {MAX_WEIGHT}, got {}", endpoint.weight),
                ));
            }
            if self.endpoints[..i]
                .iter()
                .any(|e| e.address == endpoint.address)
            {
                return Err(ConfigError::new(
                    format!("{field}.address"),
                    format!("`{}` is listed twice", endpoint.address),
                ));
            }
        }
        positive("ring_hash.virtual_nodes", self.ring_hash.virtual_nodes)?;
        let ring_size = self
            .endpoints
            .iter()
            .map(|e| u64::from(e.weight))
            .sum::<u64>()
            * u64::from(self.ring_hash.virtual_nodes);
        if self.lb_policy == LbPolicy::RingHash && ring_size > MAX_RING_SIZE {
            return Err(ConfigError::new(
                "ring_hash.virtual_nodes",
                format!(
                    "the ring would hold {ring_size} virtual nodes (sum of weights × virtual_nodes), more than {MAX_RING_SIZE}"
                ),
            ));
        }
        percent("healthy_panic_threshold", self.healthy_panic_threshold)?;
        if let Some(od) = &self.outlier_detection {
            positive("outlier_detection.consecutive_5xx", od.consecutive_5xx)?;
            positive(
                "outlier_detection.consecutive_gateway_failure",
                od.consecutive_gateway_failure,
            )?;
            percent(
                "outlier_detection.enforcing_consecutive_5xx",
                od.enforcing_consecutive_5xx,
            )?;
            percent(
                "outlier_detection.enforcing_consecutive_gateway_failure",
                od.enforcing_consecutive_gateway_failure,
            )?;
            percent(
                "outlier_detection.max_ejection_percent",
                od.max_ejection_percent,
            )?;
            nonzero_duration("outlier_detection.interval", od.interval)?;
            nonzero_duration(
                "outlier_detection.base_ejection_time",
                od.base_ejection_time,
            )?;
        }
        if let Some(cb) = &self.circuit_breaker {
            positive("circuit_breaker.failure_threshold", cb.failure_threshold)?;
            positive("circuit_breaker.half_open_requests", cb.half_open_requests)?;
            nonzero_duration("circuit_breaker.open_duration", cb.open_duration)?;
            if cb.max_open_duration < cb.open_duration {
                return Err(ConfigError::new(
                    "circuit_breaker.max_open_duration",
                    "must not be shorter than open_duration",
                ));
            }
            if cb.max_requests == Some(0) {
                return Err(ConfigError::new(
                    "circuit_breaker.max_requests",
                    "must be at least 1 (leave it out for no limit)",
                ));
            }
        }
        if let Some(hc) = &self.health_check {
            nonzero_duration("health_check.interval", hc.interval)?;
            nonzero_duration("health_check.timeout", hc.timeout)?;
            if !hc.path.starts_with('/') {
                return Err(ConfigError::new(
                    "health_check.path",
                    format!("must start with `/`, got `{}`", hc.path),
                ));
            }
            if hc.path.parse::<http::uri::PathAndQuery>().is_err() {
                return Err(ConfigError::new(
                    "health_check.path",
                    format!("`{}` is not a valid request path", hc.path),
                ));
            }
            if let Some(host) = &hc.host
                && http::HeaderValue::from_str(host).is_err()
            {
                return Err(ConfigError::new(
                    "health_check.host",
                    format!("`{host}` is not a valid header value"),
                ));
            }
            if hc.expected_statuses.is_empty() {
                return Err(ConfigError::new(
                    "health_check.expected_statuses",
                    "must list at least one status",
                ));
            }
            for (i, range) in hc.expected_statuses.iter().enumerate() {
                if range.start < 100 || range.end > 600 || range.start >= range.end {
                    return Err(ConfigError::new(
                        format!("health_check.expected_statuses[{i}]"),
                        format!(
                            "range [{}, {}) must be non-empty and within 100..600",
                            range.start, range.end
                        ),
                    ));
                }
            }
            positive("health_check.unhealthy_threshold", hc.unhealthy_threshold)?;
            positive("health_check.healthy_threshold", hc.healthy_threshold)?;
        }
        Ok(())
    }
}

fn validate_address(address: &str) -> Result<(), String> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("`{address}` needs a port, as in host:port"));
    };
    if host.is_empty() {
        return Err(format!("`{address}` has no host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("`{address}` has no valid port (1 to 65535)")),
    }
    if format!("http://{address}/").parse::<http::Uri>().is_err() {
        return Err(format!("`{address}` is not a valid host:port"));
    }
    Ok(())
}

fn positive(field: &str, value: u32) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::new(field, "must be at least 1"));
    }
    Ok(())
}

fn percent(field: &str, value: u32) -> Result<(), ConfigError> {
    if value > 100 {
        return Err(ConfigError::new(
            field,
            format!("is a percentage, 0 to 100, got {value}"),
        ));
    }
    Ok(())
}

fn nonzero_duration(field: &str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::new(field, "must be longer than zero"));
    }
    Ok(())
}
