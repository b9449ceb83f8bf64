//! Conversions between the plain-Rust [`model`](super::model) and the protobuf [`wire`] messages.
//!
//! * Units go through [`Unit`]: one table of wire numbers, names and
//!   lengths come from the unit itself.
//! * `duration_until_reset` is rounded **up** to whole seconds on the wire,
//!   like upstream reports it, so it is never earlier than the real reset.
//! * An answer read back from the wire ([`model_response`]) knows no exact
//!   `retry_after`; an OVER_LIMIT status waits for its reset, which is
//!   Envoy's own rule for `Retry-After`.

use std::time::Duration;

use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value, UInt64Value};
use tollgate_core::Unit;
use tollgate_core::duration::ceil_seconds;

use super::model::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, LimitOverride, RateLimitRequest,
    RateLimitResponse,
};
pub use super::numbers::{unit_of, wire_unit};
use super::wire;

/// The unit of a `RateLimitOverride` (`envoy.type.v3.RateLimitUnit`, which
/// has no WEEK); `None` for anything else, which a service rejects.
fn override_unit(number: i32) -> Option<Unit> {
    unit_of(number).filter(|u| *u != Unit::Week)
}

/// The wire number of a code.
pub fn wire_code(code: Code) -> i32 {
    match code {
        Code::Ok => wire::CODE_OK,
        Code::OverLimit => wire::CODE_OVER_LIMIT,
    }
}

/// The code of a wire number; `None` for UNKNOWN (which Envoy reads as OK) or any other number.
pub fn code_of(number: i32) -> Option<Code> {
    match number {
        wire::CODE_OK => Some(Code::Ok),
        wire::CODE_OVER_LIMIT => Some(Code::OverLimit),
        _ => None,
    }
}

/// The enum name of a wire code: `OK`, `OVER_LIMIT` or `UNKNOWN`.
pub fn code_name(number: i32) -> &'static str {
    code_of(number).map_or("UNKNOWN", Code::name)
}

/// `d` rounded up to whole seconds, as a protobuf duration.
pub fn whole_seconds_up(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(ceil_seconds(d)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// A protobuf duration as a std one (a negative one is zero).
pub fn std_duration(d: &PbDuration) -> Duration {
    Duration::new(
        u64::try_from(d.seconds).unwrap_or(0),
        u32::try_from(d.nanos).unwrap_or(0),
    )
}

/// The window of a wire limit: its unit × `unit_multiplier` (0 or absent is 1); `None` for UNKNOWN.
pub fn window(limit: &wire::RateLimit) -> Option<Duration> {
    let multiplier = limit.unit_multiplier.map_or(1, |m| m.value).max(1);
    Some(
        unit_of(limit.unit)?
            .duration()
            .checked_mul(multiplier)
            .unwrap_or(Duration::MAX),
    )
}

/// The model form of a wire request.
pub fn engine_request(request: wire::RateLimitRequest) -> RateLimitRequest {
    RateLimitRequest {
        domain: request.domain,
        descriptors: request
            .descriptors
            .into_iter()
            .map(engine_descriptor)
            .collect(),
        hits_addend: request.hits_addend,
    }
}

/// The model form of one wire descriptor.
fn engine_descriptor(descriptor: wire::RateLimitDescriptor) -> Descriptor {
    Descriptor {
        entries: descriptor
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect(),
        limit: descriptor.limit.map(|limit| LimitOverride {
            requests_per_unit: limit.requests_per_unit,
            unit: override_unit(limit.unit),
            unit_multiplier: limit.unit_multiplier.map(|m| m.value),
        }),
        hits_addend: descriptor.hits_addend.map(|h| h.value),
        is_negative_hits: descriptor.is_negative_hits,
    }
}

/// The wire form of a model request.
pub fn wire_request(request: &RateLimitRequest) -> wire::RateLimitRequest {
    wire::RateLimitRequest {
        domain: request.domain.clone(),
        descriptors: request.descriptors.iter().map(wire_descriptor).collect(),
        hits_addend: request.hits_addend,
    }
}

/// The wire form of one model descriptor.
pub fn wire_descriptor(descriptor: &Descriptor) -> wire::RateLimitDescriptor {
    wire::RateLimitDescriptor {
        entries: descriptor
            .entries
            .iter()
            .map(|(key, value)| wire::Entry {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        limit: descriptor.limit.map(|limit| wire::RateLimitOverride {
            requests_per_unit: limit.requests_per_unit,
            unit: limit.unit.map_or(wire::UNIT_UNKNOWN, wire_unit),
            unit_multiplier: limit.unit_multiplier.map(|value| UInt32Value { value }),
        }),
        hits_addend: descriptor.hits_addend.map(|value| UInt64Value { value }),
        is_negative_hits: descriptor.is_negative_hits,
    }
}

/// The wire form of a model answer (no headers, no body).
pub fn wire_response(response: &RateLimitResponse) -> wire::RateLimitResponse {
    wire::RateLimitResponse {
        overall_code: wire_code(response.overall),
        statuses: response.statuses.iter().map(wire_status).collect(),
        ..wire::RateLimitResponse::default()
    }
}

fn wire_status(status: &DescriptorStatus) -> wire::DescriptorStatus {
    wire::DescriptorStatus {
        code: wire_code(status.code),
        current_limit: status.current_limit.as_ref().map(wire_limit),
        limit_remaining: status.limit_remaining,
        duration_until_reset: status.duration_until_reset.map(whole_seconds_up),
    }
}

fn wire_limit(limit: &CurrentLimit) -> wire::RateLimit {
    wire::RateLimit {
        name: limit.name.clone(),
        requests_per_unit: limit.requests_per_unit,
        unit: wire_unit(limit.unit),
        unit_multiplier: Some(UInt32Value {
            value: limit.unit_multiplier.max(1),
        }),
    }
}

/// The model form of a wire answer, as a client reads it.
///
/// UNKNOWN codes read as OK (Envoy's rule); a limit in an unknown unit is
/// left out; an OVER_LIMIT status's `retry_after` is its reset.
pub fn model_response(response: &wire::RateLimitResponse) -> RateLimitResponse {
    RateLimitResponse {
        overall: code_of(response.overall_code).unwrap_or(Code::Ok),
        statuses: response.statuses.iter().map(model_status).collect(),
        // Held by the service, not sent.
        delay: std::time::Duration::ZERO,
        from_local_cache: false,
    }
}

fn model_status(status: &wire::DescriptorStatus) -> DescriptorStatus {
    let code = code_of(status.code).unwrap_or(Code::Ok);
    let reset = status.duration_until_reset.as_ref().map(std_duration);
    DescriptorStatus {
        code,
        current_limit: status.current_limit.as_ref().and_then(|limit| {
            Some(CurrentLimit {
                name: limit.name.clone(),
                requests_per_unit: limit.requests_per_unit,
                unit: unit_of(limit.unit)?,
                unit_multiplier: limit.unit_multiplier.map_or(1, |m| m.value).max(1),
                window: window(limit)?,
            })
        }),
        limit_remaining: status.limit_remaining,
        duration_until_reset: reset,
        retry_after: (code == Code::OverLimit).then(|| reset.unwrap_or_default()),
        shadowed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_round_trip_and_override_units_have_no_week() {
        for unit in Unit::ALL {
            assert_eq!(unit_of(wire_unit(unit)), Some(unit));
        }
        assert_eq!(unit_of(wire::UNIT_UNKNOWN), None);
        assert_eq!(unit_of(8), None);
        assert_eq!(override_unit(wire::UNIT_WEEK), None);
        assert_eq!(override_unit(wire::UNIT_YEAR), Some(Unit::Year));
        assert_eq!(code_name(wire::CODE_OK), "OK");
        assert_eq!(code_name(wire::CODE_OVER_LIMIT), "OVER_LIMIT");
        assert_eq!(code_name(wire::CODE_UNKNOWN), "UNKNOWN");
    }

    #[test]
    fn requests_round_trip_and_resets_round_up() {
        let mut descriptor = Descriptor::new([("user", "alice")]);
        descriptor.hits_addend = Some(0);
        descriptor.limit = Some(LimitOverride {
            requests_per_unit: 5,
            unit: Some(Unit::Minute),
            unit_multiplier: Some(2),
        });
        let request = RateLimitRequest {
            domain: "d".to_owned(),
            descriptors: vec![descriptor],
            hits_addend: 3,
        };
        assert_eq!(engine_request(wire_request(&request)), request);
        assert_eq!(whole_seconds_up(Duration::from_millis(14_001)).seconds, 15);
        assert_eq!(whole_seconds_up(Duration::from_secs(15)).seconds, 15);
    }
}
