//! The wire numbers of the RLS enumerations (`RateLimitResponse.Code`, the units) and the unit each stands for.
//!
//! Messages keep enumerations as their `i32` numbers; these constants name
//! them, and [`wire_unit`] / [`unit_of`] go between a number and a
//! [`Unit`]. [`wire`](super::wire), [`json`](super::json) and
//! [`convert`](super::convert) all read them from here (and re-export them).

use tollgate_core::Unit;

/// The UNKNOWN code (`RateLimitResponse.Code`), which Envoy reads as OK.
pub const CODE_UNKNOWN: i32 = 0;
/// The OK code.
pub const CODE_OK: i32 = 1;
/// The OVER_LIMIT code.
pub const CODE_OVER_LIMIT: i32 = 2;

/// The UNKNOWN unit (`RateLimitUnit` and `RateLimit.Unit`).
pub const UNIT_UNKNOWN: i32 = 0;
/// The SECOND unit.
pub const UNIT_SECOND: i32 = 1;
/// The MINUTE unit.
pub const UNIT_MINUTE: i32 = 2;
/// The HOUR unit.
pub const UNIT_HOUR: i32 = 3;
/// The DAY unit.
pub const UNIT_DAY: i32 = 4;
/// The MONTH unit.
pub const UNIT_MONTH: i32 = 5;
/// The YEAR unit.
pub const UNIT_YEAR: i32 = 6;
/// The WEEK unit, only in `RateLimit.Unit` and numbered after YEAR.
pub const UNIT_WEEK: i32 = 7;

/// Every unit with its `RateLimit.Unit` number.
const WIRE_UNITS: [(Unit, i32); 7] = [
    (Unit::Second, UNIT_SECOND),
    (Unit::Minute, UNIT_MINUTE),
    (Unit::Hour, UNIT_HOUR),
    (Unit::Day, UNIT_DAY),
    (Unit::Week, UNIT_WEEK),
    (Unit::Month, UNIT_MONTH),
    (Unit::Year, UNIT_YEAR),
];

/// The `RateLimit.Unit` number of `unit`.
pub fn wire_unit(unit: Unit) -> i32 {
    WIRE_UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map_or(UNIT_UNKNOWN, |(_, n)| *n)
}

/// The unit of a `RateLimit.Unit` number; `None` for UNKNOWN or a number outside the enum.
pub fn unit_of(number: i32) -> Option<Unit> {
    WIRE_UNITS
        .iter()
        .find(|(_, n)| *n == number)
        .map(|(u, _)| *u)
}
