//! Durations on the command line: `500ms`, `1s`, `1m`, `1h`, `1d`, `1w`, and the limits file's unit names.

use std::time::Duration;

use tollgate_core::Unit;

/// What every duration error suggests instead.
const EXPECTED: &str = "expected a duration such as 500ms, 1s, 1m, 1h, 1d, 1w, \
                        or a unit name: second, minute, hour, day, week, month (30 days), year (365 days)";

/// Parses a duration flag.
///
/// A limits-file unit name, alone or after a count (`minute`, `month`,
/// `2 hours`, `3days`), takes its length from [`Unit`] (a month is 30 days,
/// a year 365). Anything else goes to `humantime` (`1s`, `500ms`, `1h 30m`),
/// except its months and years, which are 30.44 and 365.25 days there and
/// would disagree with the unit names.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("empty; {EXPECTED}"));
    }
    if let Some(duration) = parse_unit_term(text)? {
        return Ok(duration);
    }
    if text
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|word| ["M", "month", "months", "y", "yr", "yrs", "year", "years"].contains(&word))
    {
        return Err(format!(
            "{text:?} mixes months or years with other units; write them alone \
             (`month`, `2 months`, `year`): a month is 30 days, a year 365"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}); {EXPECTED}"))
}

/// Parses `[count][ ]unit[s]` with a limits-file unit name, or `None` when `text` is not of that form.
fn parse_unit_term(text: &str) -> Result<Option<Duration>, String> {
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
            .map_err(|_| format!("{digits} {unit}s is too long"))?
    };
    count
        .checked_mul(unit.seconds())
        .map(|secs| Some(Duration::from_secs(secs)))
        .ok_or_else(|| format!("{count} {unit}s is too long"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humantime_forms_parse() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3_600)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5_400)));
    }

    #[test]
    fn unit_names_use_the_limits_file_lengths() {
        assert_eq!(parse_duration("second"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("Minute"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("week"), Ok(Duration::from_secs(604_800)));
        assert_eq!(
            parse_duration("month"),
            Ok(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(
            parse_duration("1month"),
            Ok(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(
            parse_duration("2 months"),
            Ok(Duration::from_secs(60 * 86_400))
        );
        assert_eq!(
            parse_duration("year"),
            Ok(Duration::from_secs(365 * 86_400))
        );
        assert_eq!(
            parse_duration("3 hours"),
            Ok(Duration::from_secs(3 * 3_600))
        );
    }

    #[test]
    fn bad_durations_say_what_was_expected() {
        for bad in [
            "",
            "fortnight",
            "5",
            "1x",
            "-1s",
            "1M 2d",
            "1y",
            "99999999999999999999 years",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(
                e.contains("expected") || e.contains("30 days") || e.contains("too long"),
                "{bad:?}: {e}"
            );
        }
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
