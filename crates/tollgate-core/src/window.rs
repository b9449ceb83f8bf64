//! The checks of a window's length and limit that the three window algorithms share.

use std::time::Duration;

use crate::ConfigError;
use crate::clock::{LONGEST_SPAN_NANOS, duration_nanos};

/// `window` in nanoseconds, or the error naming it when it is zero or longer
/// than the longest span an algorithm accepts (2⁶¹ ns, about 73 years).
pub(crate) fn window_nanos(window: Duration) -> Result<u64, ConfigError> {
    let nanos = duration_nanos(window);
    if nanos == 0 || nanos > LONGEST_SPAN_NANOS {
        return Err(ConfigError::new(
            "window",
            "must be longer than zero and at most 73 years",
        ));
    }
    Ok(nanos)
}

/// `Ok` when `limit` is in `1..=max`, else the error naming it and `algorithm`.
pub(crate) fn check_limit(limit: u64, max: u64, algorithm: &str) -> Result<(), ConfigError> {
    if limit == 0 || limit > max {
        return Err(ConfigError::new(
            "limit",
            format!("{limit} is outside 1..={max} for the {algorithm}"),
        ));
    }
    Ok(())
}
