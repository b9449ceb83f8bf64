//! Durations as people, limits files and Envoy's JSON write them, and whole seconds rounded up.
//!
//! [`parse_duration`] is the one grammar every Tollgate surface reads (the
//! command line, limits files, the proxy's Envoy-style config, upstream
//! clusters, load shedding):
//!
//! * a limits-file unit name, alone or after a count: `minute`, `2 hours`,
//!   `3days`, `month` (30 days), `year` (365 days), as [`Unit`] defines them;
//! * protobuf JSON seconds with up to nine decimals: `1s`, `0.5s`,
//!   `0.000000001s` (exact, no floating point);
//! * humantime's forms: `500ms`, `1h 30m`, `2m`, `10us`, `1d`, `1w`, except its
//!   months and years (30.44 and 365.25 days there), which would disagree
//!   with the unit names, so they are refused when mixed with other units.
//!
//! Negative, empty and unknown forms are errors whose message names the
//! text and the forms that would work. [`ceil_seconds`] is the one rounding
//! of a duration to whole seconds: up, so a reset or retry time reported in
//! seconds is never earlier than the real one; [`format_duration`] writes a
//! duration back, short and exact.

use std::fmt;
use std::time::Duration;

use crate::Unit;

/// What every duration error suggests instead.
const EXPECTED: &str = "expected a duration such as 500ms, 0.5s, 1s, 1m, 1h 30m, 1d, 1w, \
                        or a unit name: second, minute, hour, day, week, month (30 days), year (365 days)";

/// Why a text is not a duration; its message names the text and the forms that work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError {
    message: String,
}

impl DurationError {
    fn new(message: String) -> Self {
        Self { message }
    }
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration in Tollgate's one grammar (see the [module docs](self)).
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::duration::parse_duration;
///
/// assert_eq!(parse_duration("0.5s").unwrap(), Duration::from_millis(500));
/// assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
/// assert_eq!(parse_duration("2 minutes").unwrap(), Duration::from_secs(120));
/// assert!(parse_duration("-1s").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::new(format!("an empty duration; {EXPECTED}")));
    }
    if let Some(duration) = parse_unit_term(text)? {
        return Ok(duration);
    }
    if let Some(duration) = parse_decimal_seconds(text)? {
        return Ok(duration);
    }
    if text
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|word| ["M", "month", "months", "y", "yr", "yrs", "year", "years"].contains(&word))
    {
        return Err(DurationError::new(format!(
            "`{text}` mixes months or years with other units; write them alone \
             (`month`, `2 months`, `year`): a month is 30 days, a year 365"
        )));
    }
    humantime::parse_duration(text)
        .map_err(|e| DurationError::new(format!("`{text}` is not a duration ({e}); {EXPECTED}")))
}

/// Parses `[count][ ]unit[s]` with a limits-file unit name, or `None` when `text` is not of that form.
fn parse_unit_term(text: &str) -> Result<Option<Duration>, DurationError> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, name) = text.split_at(digits_end);
    let name = name.trim_start();
    let unit = match name.parse::<Unit>() {
        Ok(unit) => unit,
        Err(_) => match name.strip_suffix(['s', 'S']).map(str::parse::<Unit>) {
            Some(Ok(unit)) => unit,
            _ => return Ok(None),
        },
    };
    let count: u64 = if digits.is_empty() {
        1
    } else {
        digits
            .parse()
            .map_err(|_| DurationError::new(format!("`{text}` is too long a duration")))?
    };
    count
        .checked_mul(unit.seconds())
        .map(|secs| Some(Duration::from_secs(secs)))
        .ok_or_else(|| DurationError::new(format!("`{text}` is too long a duration")))
}

/// Parses protobuf JSON's `<seconds>[.<fraction>]s`, or `None` when `text` is not of that form.
fn parse_decimal_seconds(text: &str) -> Result<Option<Duration>, DurationError> {
    let Some(number) = text.strip_suffix('s') else {
        return Ok(None);
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let is_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !is_digits(whole) || !is_digits(fraction) {
        return Ok(None);
    }
    if number.ends_with('.') {
        return Ok(None);
    }
    if fraction.len() > 9 {
        return Err(DurationError::new(format!(
            "`{text}` has more than nine decimals; a duration is kept to the nanosecond"
        )));
    }
    let seconds: u64 = whole
        .parse()
        .map_err(|_| DurationError::new(format!("`{text}` is too long a duration")))?;
    let nanos: u32 = if fraction.is_empty() {
        0
    } else {
        // Pad to nine digits: "5" is 500 000 000 ns.
        let padded = format!("{fraction:0<9}");
        padded
            .parse()
            .map_err(|_| DurationError::new(format!("`{text}` is not a duration; {EXPECTED}")))?
    };
    Ok(Some(Duration::new(seconds, nanos)))
}

/// `d` in whole seconds, rounded up (saturating), so a time reported in seconds is never early.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::duration::ceil_seconds;
///
/// assert_eq!(ceil_seconds(Duration::from_millis(1)), 1);
/// assert_eq!(ceil_seconds(Duration::from_secs(2)), 2);
/// assert_eq!(ceil_seconds(Duration::ZERO), 0);
/// ```
pub fn ceil_seconds(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// Formats a duration compactly and exactly: `1m`, `2h`, `3d`, `2.5s`, `333.333334ms`.
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    const SEC: u128 = 1_000_000_000;
    for (unit_nanos, suffix) in [(86_400 * SEC, "d"), (3_600 * SEC, "h"), (60 * SEC, "m")] {
        if nanos >= unit_nanos && nanos.is_multiple_of(unit_nanos) {
            return format!("{}{suffix}", nanos / unit_nanos);
        }
    }
    let (scale, suffix) = if nanos >= SEC {
        (SEC, "s")
    } else if nanos >= 1_000_000 {
        (1_000_000, "ms")
    } else if nanos >= 1_000 {
        (1_000, "µs")
    } else {
        return format!("{nanos}ns");
    };
    let whole = nanos / scale;
    let fraction = nanos % scale;
    if fraction == 0 {
        return format!("{whole}{suffix}");
    }
    let digits = scale.ilog10() as usize;
    let fraction = format!("{fraction:0digits$}");
    format!("{whole}.{}{suffix}", fraction.trim_end_matches('0'))
}

/// `#[serde(deserialize_with = "tollgate_core::duration::deserialize")]`: a duration field read from a string.
#[cfg(feature = "serde")]
pub fn deserialize<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// Like [`deserialize`], for an optional duration field (`#[serde(default, deserialize_with = …)]`).
#[cfg(feature = "serde")]
pub fn deserialize_option<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    let text =
        <Option<std::borrow::Cow<'de, str>> as serde::Deserialize>::deserialize(deserializer)?;
    text.map(|text| parse_duration(&text).map_err(serde::de::Error::custom))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Duration {
        parse_duration(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn unit_names_take_the_units_lengths() {
        assert_eq!(ok("second"), Duration::from_secs(1));
        assert_eq!(ok("minute"), Duration::from_secs(60));
        assert_eq!(ok("2 hours"), Duration::from_secs(7200));
        assert_eq!(ok("3days"), Duration::from_secs(3 * 86_400));
        assert_eq!(ok("month"), Duration::from_secs(30 * 86_400));
        assert_eq!(ok("year"), Duration::from_secs(365 * 86_400));
    }

    #[test]
    fn protobuf_json_seconds_are_exact() {
        assert_eq!(ok("0.5s"), Duration::from_millis(500));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("0.05s"), Duration::from_millis(50));
        assert_eq!(ok("0.000000001s"), Duration::from_nanos(1));
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert!(parse_duration("0.0000000001s").is_err());
    }

    #[test]
    fn humantime_forms_parse() {
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("10us"), Duration::from_micros(10));
        assert_eq!(ok("1h 30m"), Duration::from_secs(5400));
        assert_eq!(ok("1w"), Duration::from_secs(7 * 86_400));
        assert_eq!(ok(" 2m "), Duration::from_secs(120));
    }

    #[test]
    fn bad_forms_name_the_text() {
        for text in [
            "",
            "-1s",
            "1.s",
            ".5s",
            "1e3s",
            "fast",
            "1M 2d",
            "18446744073709551616s",
        ] {
            let error = parse_duration(text).expect_err(text).to_string();
            assert!(
                text.trim().is_empty() || error.contains(text.trim()),
                "{text}: {error}"
            );
        }
        assert!(
            parse_duration("1M 2d")
                .unwrap_err()
                .to_string()
                .contains("30 days")
        );
    }

    #[test]
    fn rounding_is_up_and_saturates() {
        assert_eq!(ceil_seconds(Duration::new(1, 1)), 2);
        assert_eq!(ceil_seconds(Duration::new(u64::MAX, 1)), u64::MAX);
    }

    #[test]
    fn formatting_is_exact_and_short() {
        assert_eq!(format_duration(Duration::from_secs(60)), "1m");
        assert_eq!(format_duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(format_duration(Duration::from_millis(2_500)), "2.5s");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(
            format_duration(Duration::from_nanos(333_333_334)),
            "333.333334ms"
        );
        assert_eq!(format_duration(Duration::from_micros(5)), "5µs");
        assert_eq!(format_duration(Duration::from_nanos(7)), "7ns");
        assert_eq!(format_duration(Duration::ZERO), "0ns");
    }
}
