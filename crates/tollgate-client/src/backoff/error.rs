//! [`ClientError`]: why the client gave no response.

use std::fmt;
use std::time::Duration;

/// Why a request through [`Backoff`](super::Backoff) ended without a response.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError<E> {
    /// The inner service failed (connection refused, timeout, …).
    Inner(E),
    /// The adaptive throttle rejected the request locally; it was not sent.
    Throttled {
        /// The rejection probability it was drawn against.
        probability: f64,
    },
    /// The circuit breaker is open after repeated 503s; it was not sent.
    CircuitOpen {
        /// When the breaker lets a probe through.
        retry_in: Duration,
    },
}

impl<E: fmt::Display> fmt::Display for ClientError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Inner(e) => write!(f, "request failed: {e}"),
            ClientError::Throttled { probability } => write!(
                f,
                "rejected locally by adaptive throttling (p = {probability:.3})"
            ),
            ClientError::CircuitOpen { retry_in } => write!(
                f,
                "circuit open after repeated 503s; next probe in {retry_in:?}"
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ClientError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Inner(e) => Some(e),
            _ => None,
        }
    }
}
