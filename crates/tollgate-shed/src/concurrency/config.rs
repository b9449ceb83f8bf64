//! The concurrency limit's settings, as the proxy's YAML writes them.

use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;

/// The concurrency limit's settings, as written in the proxy's YAML.
///
/// How the key is taken from a request (a header, the client address) is
/// the proxy's to configure; it hands the layer a function.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyConfig {
    /// Requests in flight per key, at most.
    pub max_in_flight: usize,
    /// The retry-after hint a shed request carries (default 1 s).
    #[serde(
        default = "one_second",
        deserialize_with = "tollgate_core::duration::deserialize"
    )]
    pub retry_after: Duration,
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}

impl ConcurrencyConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_in_flight == 0 {
            return Err(ConfigError {
                field: "max_in_flight",
                message: "must be at least 1".to_owned(),
            });
        }
        Ok(())
    }
}
