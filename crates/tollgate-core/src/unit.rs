//! The named window lengths of envoyproxy/ratelimit.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A named window length, as envoyproxy/ratelimit and Envoy's RLS API spell it.
///
/// Month and year are fixed lengths (30 and 365 days), aligned to the Unix
/// epoch like every window, exactly as upstream does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// 1 second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86 400 seconds (UTC days).
    Day,
    /// 604 800 seconds; weeks start on Thursday 00:00 UTC, as the epoch did.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The unit's length.
    pub const fn duration(self) -> Duration {
        Duration::from_secs(self.seconds())
    }

    /// The lower-case name used in limits files.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Unit {
    type Err = String;

    /// Parses a unit name, case-insensitively, as upstream does.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown unit {s:?}; expected one of second, minute, hour, day, week, month, year")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_have_upstream_lengths_and_parse_case_insensitively() {
        assert_eq!(Unit::Week.seconds(), 7 * 86_400);
        assert_eq!(Unit::Month.seconds(), 30 * 86_400);
        assert_eq!(Unit::Year.seconds(), 365 * 86_400);
        assert_eq!("MINUTE".parse::<Unit>(), Ok(Unit::Minute));
        let err = "fortnight".parse::<Unit>().unwrap_err();
        assert!(err.contains("fortnight") && err.contains("week"), "{err}");
    }
}
