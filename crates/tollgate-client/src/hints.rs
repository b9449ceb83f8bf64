//! [`ServerHints`]: what a response says about when to send the next request.
//!
//! Read, in this order of trust, from:
//!
//! * **`Retry-After`** (RFC 9110 §10.2.3): delay-seconds (`Retry-After: 3`)
//!   or an HTTP-date (`Retry-After: Wed, 21 Oct 2026 07:28:00 GMT`, parsed by
//!   `httpdate`). A date is measured from the response's own `Date` header
//!   when it has one, so the client's clock skew does not matter, and from
//!   the caller's wall clock otherwise. A date in the past means "now".
//! * **IETF `RateLimit`** (draft-ietf-httpapi-ratelimit-headers, an RFC 9651
//!   list parsed by `sfv`): `"name";r=<remaining>;t=<seconds to reset>`. With
//!   several items the one with the least remaining counts (ties: the later
//!   reset), the one that runs out first.
//! * **`RateLimit-Remaining` / `-Reset` / `-Limit`** (the older draft, and
//!   envoyproxy/ratelimit's trio), then **`X-RateLimit-*`**. A reset larger
//!   than 10⁹ is read as Unix epoch seconds (GitHub's form), smaller as delta seconds.
//!
//! `RateLimit-Policy` gives the quota (`q`) when the trio gives no limit.
//! Anything unreadable is ignored: hints only ever slow a client down.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use sfv::{BareItem, List, ListEntry, Parser};

/// Values above this in a reset header are Unix epoch seconds, not delta seconds.
const EPOCH_RESET_THRESHOLD: u64 = 1_000_000_000;

/// What one response says about the server's limit.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tollgate_client::ServerHints;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("ratelimit", "\"per-minute\";r=0;t=20".parse().unwrap());
/// headers.insert("ratelimit-policy", "\"per-minute\";q=60;w=60".parse().unwrap());
/// // The wall clock matters only for an HTTP-date Retry-After without a Date header.
/// let hints = ServerHints::from_headers(&headers, SystemTime::UNIX_EPOCH);
/// assert_eq!(hints.remaining, Some(0));
/// // Nothing left: no request before the reset, then one a second (60 a minute).
/// assert_eq!(hints.must_wait(), Some(Duration::from_secs(20)));
/// assert_eq!(hints.server_spacing(), Some(Duration::from_secs(1)));
///
/// headers.insert("retry-after", "3".parse().unwrap());
/// let hints = ServerHints::from_headers(&headers, SystemTime::UNIX_EPOCH);
/// assert_eq!(hints.must_wait(), Some(Duration::from_secs(3)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerHints {
    /// `Retry-After`: wait at least this long before the next request.
    pub retry_after: Option<Duration>,
    /// Requests left in the current window.
    pub remaining: Option<u64>,
    /// Time until the window resets.
    pub reset: Option<Duration>,
    /// The window's quota.
    pub limit: Option<u64>,
    /// The window's length (`RateLimit-Policy`'s `w`).
    pub window: Option<Duration>,
}

impl ServerHints {
    /// The hints in `headers`, with `wall_now` the caller's wall clock (used
    /// only for an HTTP-date `Retry-After` when the response has no `Date`).
    pub fn from_headers(headers: &HeaderMap, wall_now: SystemTime) -> ServerHints {
        let mut hints = ServerHints {
            retry_after: retry_after(headers, wall_now),
            ..ServerHints::default()
        };
        if let Some((remaining, reset)) = header_str(headers, "ratelimit").and_then(ietf_ratelimit)
        {
            hints.remaining = Some(remaining);
            hints.reset = Some(Duration::from_secs(reset));
        }
        for prefix in ["ratelimit-", "x-ratelimit-"] {
            let number = |name: &str| header_u64(headers, &format!("{prefix}{name}"));
            if hints.remaining.is_none() {
                hints.remaining = number("remaining");
            }
            if hints.reset.is_none() {
                hints.reset = number("reset").map(|r| reset_delta(r, wall_now));
            }
            if hints.limit.is_none() {
                hints.limit = number("limit");
            }
        }
        if let Some((quota, window)) = header_str(headers, "ratelimit-policy").and_then(ietf_policy)
        {
            hints.limit = hints.limit.or(Some(quota));
            hints.window = window.map(Duration::from_secs);
        }
        hints
    }

    /// How far apart requests must leave to send no faster than the server
    /// admits: `window / limit`, or `reset / limit` without a window (the
    /// reset is at most a window away, so that is never slower).
    pub fn server_spacing(&self) -> Option<Duration> {
        let limit = u32::try_from(self.limit?).unwrap_or(u32::MAX).max(1);
        Some(self.window.or(self.reset)? / limit)
    }

    /// The earliest the server allows the next request, from now: its
    /// `Retry-After`, or the reset when nothing remains.
    pub fn must_wait(&self) -> Option<Duration> {
        match (self.retry_after, self.remaining, self.reset) {
            (Some(wait), _, _) => Some(wait),
            (None, Some(0), Some(reset)) => Some(reset),
            _ => None,
        }
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    header_str(headers, name)?.parse().ok()
}

/// `Retry-After` as a wait from now (delay-seconds or HTTP-date).
fn retry_after(headers: &HeaderMap, wall_now: SystemTime) -> Option<Duration> {
    let value = header_str(headers, "retry-after")?;
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let now = header_str(headers, "date")
        .and_then(|d| httpdate::parse_http_date(d).ok())
        .unwrap_or(wall_now);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A reset header's value as a wait from now: epoch seconds when large, delta seconds otherwise.
fn reset_delta(value: u64, wall_now: SystemTime) -> Duration {
    if value > EPOCH_RESET_THRESHOLD {
        let at = UNIX_EPOCH + Duration::from_secs(value);
        at.duration_since(wall_now).unwrap_or(Duration::ZERO)
    } else {
        Duration::from_secs(value)
    }
}

/// The non-negative integer parameter `name` of a list item.
fn int_param(entry: &ListEntry, name: &str) -> Option<u64> {
    let ListEntry::Item(item) = entry else {
        return None;
    };
    item.params
        .iter()
        .find(|(key, _)| key.as_str() == name)
        .and_then(|(_, value)| match value {
            BareItem::Integer(i) => u64::try_from(i64::from(*i)).ok(),
            _ => None,
        })
}

fn parse_list(value: &str) -> Option<List> {
    Parser::new(value).parse_list().ok()
}

/// `RateLimit`: the item with the least `r` (the later `t` on ties), as `(r, t)`.
fn ietf_ratelimit(value: &str) -> Option<(u64, u64)> {
    parse_list(value)?
        .iter()
        .filter_map(|entry| Some((int_param(entry, "r")?, int_param(entry, "t").unwrap_or(0))))
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
}

/// `RateLimit-Policy`: the item with the smallest quota, as `(q, w)`.
fn ietf_policy(value: &str) -> Option<(u64, Option<u64>)> {
    parse_list(value)?
        .iter()
        .filter_map(|entry| Some((int_param(entry, "q")?, int_param(entry, "w"))))
        .min_by_key(|(quota, _)| *quota)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    const NOW: u64 = 1_790_000_000;

    fn wall() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    #[test]
    fn retry_after_in_seconds_and_as_a_date() {
        let h = headers(&[("retry-after", "7")]);
        assert_eq!(
            ServerHints::from_headers(&h, wall()).retry_after,
            Some(Duration::from_secs(7))
        );
        let at = httpdate::fmt_http_date(wall() + Duration::from_secs(30));
        let h = headers(&[("retry-after", &at)]);
        assert_eq!(
            ServerHints::from_headers(&h, wall()).retry_after,
            Some(Duration::from_secs(30))
        );
        // The response's own Date wins over a skewed client clock.
        let date = httpdate::fmt_http_date(wall() + Duration::from_secs(20));
        let h = headers(&[("retry-after", &at), ("date", &date)]);
        assert_eq!(
            ServerHints::from_headers(&h, wall()).retry_after,
            Some(Duration::from_secs(10))
        );
        let past = httpdate::fmt_http_date(wall() - Duration::from_secs(5));
        let h = headers(&[("retry-after", &past)]);
        assert_eq!(
            ServerHints::from_headers(&h, wall()).retry_after,
            Some(Duration::ZERO)
        );
        let h = headers(&[("retry-after", "soon")]);
        assert_eq!(ServerHints::from_headers(&h, wall()).retry_after, None);
    }

    #[test]
    fn the_ietf_fields_pick_the_item_that_runs_out_first() {
        let h = headers(&[
            ("ratelimit", r#""minute";r=40;t=30, "login";r=2;t=50"#),
            (
                "ratelimit-policy",
                r#""minute";q=100;w=60, "login";q=3;w=60"#,
            ),
        ]);
        let hints = ServerHints::from_headers(&h, wall());
        assert_eq!(hints.remaining, Some(2));
        assert_eq!(hints.reset, Some(Duration::from_secs(50)));
        assert_eq!(hints.limit, Some(3));
        assert_eq!(hints.window, Some(Duration::from_secs(60)));
        assert_eq!(hints.server_spacing(), Some(Duration::from_secs(20)));
        assert_eq!(hints.must_wait(), None);
    }

    #[test]
    fn the_trio_and_x_ratelimit_fill_in_with_epoch_or_delta_resets() {
        let h = headers(&[
            ("ratelimit-limit", "5"),
            ("ratelimit-remaining", "0"),
            ("ratelimit-reset", "12"),
        ]);
        let hints = ServerHints::from_headers(&h, wall());
        assert_eq!((hints.limit, hints.remaining), (Some(5), Some(0)));
        assert_eq!(hints.must_wait(), Some(Duration::from_secs(12)));
        let epoch = (NOW + 45).to_string();
        let h = headers(&[
            ("x-ratelimit-remaining", "3"),
            ("x-ratelimit-reset", &epoch),
            ("x-ratelimit-limit", "60"),
        ]);
        let hints = ServerHints::from_headers(&h, wall());
        assert_eq!(hints.reset, Some(Duration::from_secs(45)));
        assert_eq!((hints.limit, hints.remaining), (Some(60), Some(3)));
    }

    #[test]
    fn unreadable_fields_are_ignored() {
        let h = headers(&[
            ("ratelimit", "not a list;;"),
            ("ratelimit-remaining", "-1"),
            ("x-ratelimit-reset", "x"),
        ]);
        assert_eq!(
            ServerHints::from_headers(&h, wall()),
            ServerHints::default()
        );
    }
}
