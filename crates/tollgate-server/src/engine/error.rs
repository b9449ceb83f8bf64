//! [`EngineError`]: why the engine cannot answer a request (a malformed one; the message names the field).

use std::error::Error;
use std::fmt;

/// Why a request cannot be answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// The request is malformed; the message says which field and why.
    InvalidArgument(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::InvalidArgument(message) => f.write_str(message),
        }
    }
}

impl Error for EngineError {}
