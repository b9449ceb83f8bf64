//! The check function's answer, read straight from Redis's reply: four numbers per counter (outcome, remaining, reset, retry), turned into decisions.
//!
//! For one counter (most calls) the function answers one 32-byte string,
//! four little-endian doubles (Lua's numbers, packed by Redis's `struct`
//! library): one bulk string for the client to read, where an array of
//! four integers was five values. For more counters it answers an array of
//! four integers per counter. Either way each number is cut to an integer
//! toward zero, as Redis does when it turns a Lua number into an integer reply.

use redis::{FromRedisValue, ParsingError, Value};
use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, Decision, DelayMode, Outcome};

use crate::script_params::nanos;

/// The bytes of one counter's answer: four little-endian doubles.
const PACKED_LEN: usize = 32;

/// The check function's answer: four integers per counter, in KEYS order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CheckReply {
    /// One counter's four numbers (the 32-byte string).
    One([i64; 4]),
    /// Four integers per counter (an array, for more than one counter).
    Many(Vec<i64>),
}

impl CheckReply {
    /// The integers, four per counter.
    pub(crate) fn values(&self) -> &[i64] {
        match self {
            CheckReply::One(values) => values,
            CheckReply::Many(values) => values,
        }
    }
}

impl FromRedisValue for CheckReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::BulkString(bytes) => unpack(&bytes).map(CheckReply::One),
            Value::Array(_) => Ok(CheckReply::Many(Vec::<i64>::from_redis_value(v)?)),
            other => Err(format!("the check function answered {other:?}").into()),
        }
    }

    fn from_redis_value_ref(v: &Value) -> Result<Self, ParsingError> {
        match v {
            Value::BulkString(bytes) => unpack(bytes).map(CheckReply::One),
            Value::Array(_) => Ok(CheckReply::Many(Vec::<i64>::from_redis_value_ref(v)?)),
            other => Err(format!("the check function answered {other:?}").into()),
        }
    }
}

/// Four little-endian doubles, each cut to an integer toward zero.
fn unpack(bytes: &[u8]) -> Result<[i64; 4], ParsingError> {
    if bytes.len() != PACKED_LEN {
        return Err(format!(
            "the check function answered {} bytes, not {PACKED_LEN}",
            bytes.len()
        )
        .into());
    }
    let mut values = [0i64; 4];
    for (value, chunk) in values.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(chunk);
        // `as` cuts toward zero (and saturates), as Redis's `(long long)` of a Lua number.
        *value = f64::from_le_bytes(raw) as i64;
    }
    Ok(values)
}

/// The decision for one counter from the script's four integers.
pub(crate) fn to_decision(algorithm: &AnyAlgorithm, reply: &[i64]) -> Decision {
    let at = |i: usize| reply.get(i).copied().unwrap_or(0).max(0) as u64;
    let outcome = match at(0) {
        0 => Outcome::Allowed,
        1 => Outcome::Denied,
        _ => Outcome::Exceeds,
    };
    let limit = algorithm.capacity();
    let (remaining, reset, mut wait) = (at(1), at(2), at(3));
    if let (Outcome::Allowed, AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(lb))) =
        (outcome, algorithm)
    {
        // The shaper's delay: the backlog beyond what passes undelayed.
        let free_units = match lb.mode() {
            DelayMode::NoDelay => lb.burst() + 1,
            DelayMode::Delay => 1,
            DelayMode::DelayAfter(n) => n + 1,
        };
        wait = reset.saturating_sub(free_units.saturating_mul(nanos(lb.drain_interval())));
    }
    Decision::from_parts(outcome, limit, remaining, reset, wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(values: [f64; 4]) -> Value {
        Value::BulkString(values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    #[test]
    fn one_counter_is_four_doubles_cut_toward_zero() {
        let reply = CheckReply::from_redis_value(packed([1.0, 41.9, 1e18, -2.5])).unwrap();
        assert_eq!(reply.values(), &[1, 41, 1_000_000_000_000_000_000, -2]);
    }

    #[test]
    fn more_counters_are_an_array_of_integers() {
        let ints = (1..=8).map(Value::Int).collect();
        let reply = CheckReply::from_redis_value(Value::Array(ints)).unwrap();
        assert_eq!(reply.values(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn a_string_of_another_length_or_another_type_is_an_error() {
        for wrong in [
            Value::BulkString(vec![0; 31]),
            Value::BulkString(vec![0; 64]),
            Value::Int(0),
            Value::Nil,
        ] {
            let e = CheckReply::from_redis_value(wrong).unwrap_err();
            assert!(e.to_string().contains("check function answered"), "{e}");
        }
    }
}
