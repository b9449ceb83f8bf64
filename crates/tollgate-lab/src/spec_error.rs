//! Why an algorithm or traffic spec could not be built: a parameter missing, or one out of range.

use std::fmt;

use tollgate_core::ConfigError;

/// Why an [`crate::AlgorithmSpec`] or a [`crate::TrafficSpec`] could not be built.
///
/// Parameters are named as the specs' fields are (`max_tokens`,
/// `arrival_rate`); each front end turns the name into its own (a CLI flag,
/// a query field).
#[derive(Clone, Debug, PartialEq)]
pub enum SpecError {
    /// The chosen algorithm or profile needs this parameter, and it was not given.
    Missing(&'static str),
    /// A parameter is out of range; the error names it.
    Invalid(ConfigError),
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Missing(parameter) => write!(f, "{parameter}: is required"),
            SpecError::Invalid(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for SpecError {}

impl From<ConfigError> for SpecError {
    fn from(error: ConfigError) -> Self {
        SpecError::Invalid(error)
    }
}
