//! The proto3 JSON forms of the wire fields that are not plain strings and numbers, for serde's `with`.
//!
//! Reading accepts what proto3 JSON allows: integers as numbers or decimal
//! strings, enums by name or number, `null` for absent. Writing uses the
//! canonical form: 32-bit integers as numbers, 64-bit ones as strings, enums
//! by name, durations as seconds with a trailing `s` (`"15s"`, `"0.5s"`).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// A proto3 JSON scalar as written: a number or a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Number(serde_json::Number),
    Text(String),
}

/// Reads an unsigned integer (number or decimal string); `None` for `null` or absent.
fn read_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Scalar>::deserialize(d)? {
        None => Ok(None),
        Some(Scalar::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("{n} is not an unsigned integer"))),
        Some(Scalar::Text(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("{s:?} is not an unsigned integer"))),
    }
}

/// Reads an unsigned 32-bit integer.
fn read_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match read_u64(d)? {
        None => Ok(None),
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| D::Error::custom(format!("{n} does not fit in 32 bits"))),
    }
}

/// `uint32`: a number; `null` reads as 0.
pub mod uint32 {
    use serde::{Deserializer, Serializer};

    use super::read_u32;

    /// Writes the number.
    pub fn serialize<S: Serializer>(value: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(*value)
    }

    /// Reads a number or a decimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        Ok(read_u32(d)?.unwrap_or(0))
    }
}

/// `google.protobuf.UInt32Value`: a number, or absent.
pub mod uint32_value {
    use envoy_types::pb::google::protobuf::UInt32Value;
    use serde::{Deserializer, Serializer};

    use super::read_u32;

    /// Writes the number.
    pub fn serialize<S: Serializer>(value: &Option<UInt32Value>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.serialize_u32(v.value),
            None => s.serialize_none(),
        }
    }

    /// Reads a number or a decimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<UInt32Value>, D::Error> {
        Ok(read_u32(d)?.map(|value| UInt32Value { value }))
    }
}

/// `google.protobuf.UInt64Value`: a decimal string, or absent.
pub mod uint64_value {
    use envoy_types::pb::google::protobuf::UInt64Value;
    use serde::{Deserializer, Serializer};

    use super::read_u64;

    /// Writes the decimal string.
    pub fn serialize<S: Serializer>(value: &Option<UInt64Value>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.serialize_str(&v.value.to_string()),
            None => s.serialize_none(),
        }
    }

    /// Reads a number or a decimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<UInt64Value>, D::Error> {
        Ok(read_u64(d)?.map(|value| UInt64Value { value }))
    }
}

/// A unit enum (`RateLimitUnit`, `RateLimit.Unit`): `MINUTE`, `UNKNOWN` for 0.
pub mod unit {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use tollgate_core::Unit;

    use super::Scalar;
    use crate::rls::numbers::{UNIT_UNKNOWN, unit_of, wire_unit};

    /// Writes the enum name (a number outside the enum stays a number).
    pub fn serialize<S: Serializer>(value: &i32, s: S) -> Result<S::Ok, S::Error> {
        match unit_of(*value) {
            Some(unit) => s.serialize_str(&unit.name().to_ascii_uppercase()),
            None if *value == UNIT_UNKNOWN => s.serialize_str("UNKNOWN"),
            None => s.serialize_i32(*value),
        }
    }

    /// Reads an enum name or number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        match Option::<Scalar>::deserialize(d)? {
            None => Ok(UNIT_UNKNOWN),
            Some(Scalar::Text(name)) if name == "UNKNOWN" => Ok(UNIT_UNKNOWN),
            Some(Scalar::Text(name)) => name.parse::<Unit>().map(wire_unit).map_err(|_| {
                D::Error::custom(format!(
                    "unknown unit {name:?}; expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
                ))
            }),
            Some(Scalar::Number(n)) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .filter(|n| *n == UNIT_UNKNOWN || unit_of(*n).is_some())
                .ok_or_else(|| D::Error::custom(format!("unknown unit number {n}"))),
        }
    }
}

/// The `RateLimitResponse.Code` enum: `OK`, `OVER_LIMIT`, `UNKNOWN`.
pub mod code {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Scalar;
    use crate::rls::numbers::{CODE_OK, CODE_OVER_LIMIT, CODE_UNKNOWN};

    /// The enum name of a code number (`UNKNOWN` for anything but OK and OVER_LIMIT).
    pub fn name(code: i32) -> &'static str {
        match code {
            CODE_OK => "OK",
            CODE_OVER_LIMIT => "OVER_LIMIT",
            _ => "UNKNOWN",
        }
    }

    /// Writes the enum name.
    pub fn serialize<S: Serializer>(value: &i32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(name(*value))
    }

    /// Reads an enum name or number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        match Option::<Scalar>::deserialize(d)? {
            None => Ok(CODE_UNKNOWN),
            Some(Scalar::Text(text)) => [CODE_UNKNOWN, CODE_OK, CODE_OVER_LIMIT]
                .into_iter()
                .find(|c| name(*c) == text)
                .ok_or_else(|| D::Error::custom(format!("unknown code {text:?}"))),
            Some(Scalar::Number(n)) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| D::Error::custom(format!("unknown code number {n}"))),
        }
    }
}

/// `google.protobuf.Duration`: seconds with a trailing `s` (`"15s"`, `"0.5s"`).
pub mod duration {
    use std::time::Duration as StdDuration;

    use envoy_types::pb::google::protobuf::Duration;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use tollgate_core::duration::parse_duration;

    /// Writes the seconds (a negative duration, which nothing here sends, as 0s).
    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        let Some(d) = value else {
            return s.serialize_none();
        };
        let d = StdDuration::new(
            u64::try_from(d.seconds).unwrap_or(0),
            u32::try_from(d.nanos).unwrap_or(0),
        );
        let text = if d.subsec_nanos() == 0 {
            format!("{}s", d.as_secs())
        } else {
            format!("{}s", d.as_secs_f64())
        };
        s.serialize_str(&text)
    }

    /// Reads `"1.5s"` (or any duration the core grammar reads).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let d = parse_duration(&text)
            .map_err(|e| D::Error::custom(format!("{text:?} is not a duration ({e})")))?;
        Ok(Some(Duration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
        }))
    }
}
