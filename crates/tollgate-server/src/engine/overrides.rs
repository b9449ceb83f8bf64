//! Descriptor `limit` overrides: the limit a request asks for, and the counter key it gets (length-prefixed, so no two overrides share one).

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, FixedWindow};
use tollgate_protocol::rls::model::{CurrentLimit, LimitOverride};

use super::error::EngineError;

/// The fixed window and reported limit of descriptor `index`'s override.
pub(super) fn override_limit(
    index: usize,
    limit: &LimitOverride,
) -> Result<(AnyAlgorithm, CurrentLimit), EngineError> {
    let Some(unit) = limit.unit else {
        return Err(EngineError::InvalidArgument(format!(
            "descriptors[{index}].limit.unit must be one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR, not UNKNOWN"
        )));
    };
    let multiplier = limit.unit_multiplier.unwrap_or(1).max(1);
    let window = unit
        .duration()
        .checked_mul(multiplier)
        .unwrap_or(Duration::MAX);
    let algorithm = FixedWindow::new(u64::from(limit.requests_per_unit), window)
        .map_err(|e| EngineError::InvalidArgument(format!("descriptors[{index}].limit: {e}")))?;
    Ok((
        algorithm.into(),
        CurrentLimit {
            name: String::new(),
            requests_per_unit: limit.requests_per_unit,
            unit,
            unit_multiplier: multiplier,
            window,
        },
    ))
}

/// The counter key of an override: a marker no rule key starts with, the
/// domain, the entries and the override's rate and window, all length-prefixed.
pub(super) fn override_key(
    domain: &str,
    entries: &[(String, String)],
    limit: &CurrentLimit,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(64);
    key.extend_from_slice(b"tgo");
    push_part(&mut key, domain.as_bytes());
    key.extend_from_slice(&(entries.len() as u64).to_be_bytes());
    for (k, v) in entries {
        push_part(&mut key, k.as_bytes());
        push_part(&mut key, v.as_bytes());
    }
    key.extend_from_slice(&u64::from(limit.requests_per_unit).to_be_bytes());
    let window = u64::try_from(limit.window.as_nanos()).unwrap_or(u64::MAX);
    key.extend_from_slice(&window.to_be_bytes());
    key
}

/// Appends one length-prefixed part to a key.
pub(super) fn push_part(key: &mut Vec<u8>, part: &[u8]) {
    key.extend_from_slice(&(part.len() as u64).to_be_bytes());
    key.extend_from_slice(part);
}
