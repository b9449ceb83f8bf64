//! Priority classes and the priority shedder's settings.

use std::fmt;
use std::time::Duration;

use http::HeaderName;
use serde::Deserialize;

/// A request's priority class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Shed first.
    Sheddable,
    /// Everything without a class.
    Default,
    /// May use the reserved slots.
    Critical,
}

impl Priority {
    /// The class a header value names; missing or unknown values are `Default`.
    pub fn from_header(value: Option<&http::HeaderValue>) -> Self {
        let Some(value) = value else {
            return Priority::Default;
        };
        let bytes = value.as_bytes();
        if bytes.eq_ignore_ascii_case(b"critical") {
            Priority::Critical
        } else if bytes.eq_ignore_ascii_case(b"sheddable") {
            Priority::Sheddable
        } else {
            Priority::Default
        }
    }

    /// The class's name as written in the header.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Sheddable => "sheddable",
            Priority::Default => "default",
            Priority::Critical => "critical",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The priority layer's settings, as written in the proxy's YAML.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityConfig {
    /// The request header naming the class (default `x-priority`).
    #[serde(default = "default_header")]
    pub header: String,
    /// In-flight requests of all classes together, at most.
    pub max_in_flight: usize,
    /// Percent of `max_in_flight` only critical requests may use (default 20).
    #[serde(default = "twenty")]
    pub critical_reserved_percent: u32,
    /// Percent of `max_in_flight` sheddable requests may not use, on top of
    /// the critical reserve (default 20).
    #[serde(default = "twenty")]
    pub default_reserved_percent: u32,
    /// The retry-after hint a shed request carries (default 1 s).
    #[serde(
        default = "one_second",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub retry_after: Duration,
    /// Wait in a bounded line instead of an immediate 503 (absent: no line).
    #[serde(default)]
    pub queue: Option<QueueConfig>,
}

/// The line requests wait in when their class has no slot.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Requests waiting at once, at most (all classes together).
    pub max_queued: usize,
    /// The longest a request waits; then it gets 503 + Retry-After (default 1 s).
    #[serde(
        default = "one_second",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub max_wait: Duration,
    /// Waiting this long is worth one class (default 100 ms).
    #[serde(
        default = "hundred_millis",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub aging: Duration,
}

impl QueueConfig {
    /// A line of `max_queued` with the default wait and aging.
    pub fn new(max_queued: usize) -> Self {
        QueueConfig {
            max_queued,
            max_wait: one_second(),
            aging: hundred_millis(),
        }
    }

    fn validate(&self) -> Result<(), PriorityConfigError> {
        let error = |field, message: &str| {
            Err(PriorityConfigError {
                field,
                message: message.to_owned(),
            })
        };
        if self.max_queued == 0 {
            return error(
                "queue.max_queued",
                "must be at least 1 (leave `queue` out for none)",
            );
        }
        if self.max_wait.is_zero() {
            return error("queue.max_wait", "must be above 0");
        }
        if self.aging.is_zero() {
            return error("queue.aging", "must be above 0");
        }
        Ok(())
    }
}

fn hundred_millis() -> Duration {
    Duration::from_millis(100)
}

fn default_header() -> String {
    "x-priority".to_owned()
}
fn twenty() -> u32 {
    20
}
fn one_second() -> Duration {
    Duration::from_secs(1)
}

/// A priority configuration that cannot be used (the crate's [`ConfigError`](crate::ConfigError)).
pub type PriorityConfigError = crate::ConfigError;

/// The in-flight limit of each class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClassLimits {
    pub(crate) critical: usize,
    pub(crate) default: usize,
    pub(crate) sheddable: usize,
}

impl ClassLimits {
    pub(crate) fn of(&self, priority: Priority) -> usize {
        match priority {
            Priority::Critical => self.critical,
            Priority::Default => self.default,
            Priority::Sheddable => self.sheddable,
        }
    }
}

impl PriorityConfig {
    /// Settings with the default header, reserves and hint.
    pub fn new(max_in_flight: usize) -> Self {
        PriorityConfig {
            header: default_header(),
            max_in_flight,
            critical_reserved_percent: twenty(),
            default_reserved_percent: twenty(),
            retry_after: one_second(),
            queue: None,
        }
    }

    /// The header name, checked.
    pub(crate) fn header_name(&self) -> Result<HeaderName, PriorityConfigError> {
        HeaderName::from_bytes(self.header.as_bytes()).map_err(|_| PriorityConfigError {
            field: "header",
            message: format!("`{}` is not a valid header name", self.header),
        })
    }

    /// Checks the values and computes each class's limit.
    pub(crate) fn limits(&self) -> Result<ClassLimits, PriorityConfigError> {
        let error = |field, message: String| Err(PriorityConfigError { field, message });
        if let Some(queue) = &self.queue {
            queue.validate()?;
        }
        if self.max_in_flight == 0 {
            return error("max_in_flight", "must be at least 1".to_owned());
        }
        for (field, value) in [
            ("critical_reserved_percent", self.critical_reserved_percent),
            ("default_reserved_percent", self.default_reserved_percent),
        ] {
            if value > 100 {
                return error(field, format!("is a percentage, 0 to 100, got {value}"));
            }
        }
        let n = self.max_in_flight;
        let reserve = |percent: u32| (n * percent as usize).div_ceil(100);
        let critical_reserve = reserve(self.critical_reserved_percent);
        let default_reserve = reserve(self.default_reserved_percent);
        let default = n.saturating_sub(critical_reserve);
        let sheddable = default.saturating_sub(default_reserve);
        if default == 0 {
            return error(
                "critical_reserved_percent",
                format!(
                    "{}% of max_in_flight {n} leaves no slot for default requests",
                    self.critical_reserved_percent
                ),
            );
        }
        if sheddable == 0 {
            return error(
                "default_reserved_percent",
                format!(
                    "with critical_reserved_percent {}, {}% of max_in_flight {n} leaves no slot for sheddable requests",
                    self.critical_reserved_percent, self.default_reserved_percent
                ),
            );
        }
        Ok(ClassLimits {
            critical: n,
            default,
            sheddable,
        })
    }
}
