//! Errors in an algorithm's parameters.

use std::fmt;

/// A parameter an algorithm cannot work with, named with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    parameter: &'static str,
    reason: String,
}

impl ConfigError {
    /// An error naming `parameter` (as its field is called, e.g. `max_tokens`) and why it is wrong.
    pub fn new(parameter: &'static str, reason: impl Into<String>) -> Self {
        ConfigError {
            parameter,
            reason: reason.into(),
        }
    }

    /// The parameter that is wrong, e.g. `max_tokens`.
    pub fn parameter(&self) -> &'static str {
        self.parameter
    }

    /// Why it is wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.parameter, self.reason)
    }
}

impl std::error::Error for ConfigError {}
