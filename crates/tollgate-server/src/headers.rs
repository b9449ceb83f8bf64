//! Response headers and the 429 body that Envoy adds to its reply (`response_headers_to_add`, `raw_body`).
//!
//! All of it is off by default, like upstream. [`HeaderOptions`] switches on:
//!
//! * **The trio** (upstream's `LIMIT_RESPONSE_HEADERS_ENABLED`):
//!   `RateLimit-Limit: 3`, `RateLimit-Remaining: 0`, `RateLimit-Reset: 50`
//!   (names configurable), from one status picked by [`pick_status`].
//! * **IETF draft-10 fields**: `RateLimit-Policy`, one item per status that
//!   has a limit (`"login";q=3;w=60, "user=alice";q=100;w=3600`), and
//!   `RateLimit` for the picked status (`"login";r=0;t=50`). Both are RFC
//!   9651 lists, items separated by `, `.
//! * **`Retry-After`** on OVER_LIMIT: whole seconds, rounded up from the
//!   exact time the request could pass, plus an upward jitter.
//! * **A JSON body** for the 429 (`raw_body`), described at [`raw_body`].
//!
//! Header values never depend on anything but the statuses, the request's
//! descriptors and the jitter source, which can be seeded ([`Jitter::seeded`]).

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::{Code, CurrentLimit, Descriptor, DescriptorStatus, RateLimitResponse};

/// The names of the three upstream-compatible headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitHeaderNames {
    /// The limit's `requests_per_unit` (upstream's `LIMIT_LIMIT_HEADER`).
    pub limit: String,
    /// The units left (upstream's `LIMIT_REMAINING_HEADER`).
    pub remaining: String,
    /// Whole seconds until the window resets (upstream's `LIMIT_RESET_HEADER`).
    pub reset: String,
}

impl Default for LimitHeaderNames {
    /// Upstream's defaults: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    fn default() -> Self {
        LimitHeaderNames {
            limit: "RateLimit-Limit".to_owned(),
            remaining: "RateLimit-Remaining".to_owned(),
            reset: "RateLimit-Reset".to_owned(),
        }
    }
}

/// Which headers (and body) the service asks Envoy to add; everything off by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderOptions {
    /// The `RateLimit-Limit` / `-Remaining` / `-Reset` trio, on every answer with a limit.
    pub limit_headers: bool,
    /// The trio's names.
    pub limit_header_names: LimitHeaderNames,
    /// The IETF draft-10 `RateLimit-Policy` and `RateLimit` fields, on every answer with a limit.
    pub ietf_headers: bool,
    /// `Retry-After` on OVER_LIMIT.
    pub retry_after: bool,
    /// The most jitter added to `Retry-After` (uniform in `[0, retry_after_jitter]`); zero by default.
    pub retry_after_jitter: Duration,
    /// A JSON body for the OVER_LIMIT reply.
    pub raw_body: bool,
}

impl HeaderOptions {
    /// Whether nothing is switched on.
    pub fn is_off(&self) -> bool {
        !(self.limit_headers || self.ietf_headers || self.retry_after || self.raw_body)
    }
}

/// The source of `Retry-After` jitter: a SplitMix64 sequence, seedable for tests; shared by all calls.
#[derive(Debug)]
pub struct Jitter {
    state: AtomicU64,
}

impl Jitter {
    /// A sequence starting from `seed`: the same seed gives the same jitters in the same order.
    pub fn seeded(seed: u64) -> Self {
        Jitter {
            state: AtomicU64::new(seed),
        }
    }

    /// A sequence from a per-process random seed.
    pub fn random() -> Self {
        Jitter::seeded(RandomState::new().hash_one(0x746f_6c6c_6761_7465_u64))
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut z = self
            .state
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A jitter uniform (to the nanosecond, up to a negligible modulo bias) in `[0, max]`.
    pub fn sample(&self, max: Duration) -> Duration {
        let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if max_ns == 0 {
            return Duration::ZERO;
        }
        let n = match max_ns.checked_add(1) {
            Some(bound) => self.next_u64() % bound,
            None => self.next_u64(),
        };
        Duration::from_nanos(n)
    }
}

/// What the service adds to a reply: headers in order, and the body for an OVER_LIMIT reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    /// `(name, value)` pairs, for `response_headers_to_add`.
    pub headers: Vec<(String, String)>,
    /// The JSON body, for `raw_body`.
    pub raw_body: Option<Vec<u8>>,
}

/// Renders [`HeaderOptions`] for each answer; shared by all calls.
#[derive(Debug)]
pub struct ResponseHeaders {
    options: HeaderOptions,
    jitter: Jitter,
}

impl Default for ResponseHeaders {
    /// Everything off.
    fn default() -> Self {
        ResponseHeaders::new(HeaderOptions::default(), Jitter::random())
    }
}

impl ResponseHeaders {
    /// A renderer for `options`, drawing `Retry-After` jitter from `jitter`.
    pub fn new(options: HeaderOptions, jitter: Jitter) -> Self {
        ResponseHeaders { options, jitter }
    }

    /// The options it renders.
    pub fn options(&self) -> &HeaderOptions {
        &self.options
    }

    /// The headers and body for `response`, the answer to a request with `descriptors`.
    pub fn render(&self, descriptors: &[Descriptor], response: &RateLimitResponse) -> Rendered {
        let options = &self.options;
        let mut rendered = Rendered::default();
        if options.is_off() {
            return rendered;
        }
        let statuses = &response.statuses;
        let picked = pick_status(statuses).and_then(|i| Some((i, statuses.get(i)?)));
        if options.limit_headers
            && let Some((_, status)) = picked
        {
            rendered
                .headers
                .extend(limit_headers(&options.limit_header_names, status));
        }
        if options.ietf_headers
            && let Some((i, status)) = picked
        {
            let policy = ratelimit_policy(descriptors, statuses);
            rendered
                .headers
                .push(("RateLimit-Policy".to_owned(), policy));
            let name = policy_name(descriptors.get(i), status);
            rendered
                .headers
                .push(("RateLimit".to_owned(), ratelimit_item(&name, status)));
        }
        if response.overall == Code::OverLimit && (options.retry_after || options.raw_body) {
            let retry = overall_retry_after(statuses).map(|wait| {
                retry_after_seconds(wait, self.jitter.sample(options.retry_after_jitter))
            });
            if options.retry_after
                && let Some(seconds) = retry
            {
                rendered
                    .headers
                    .push(("Retry-After".to_owned(), seconds.to_string()));
            }
            if options.raw_body {
                rendered.raw_body = Some(raw_body(descriptors, statuses, retry).into_bytes());
            }
        }
        rendered
    }
}

/// The status the trio and `RateLimit` describe, upstream's rule: among the
/// statuses with a limit, the last OVER_LIMIT one in request order; if none
/// is over, the one with the least remaining, the first on ties. `None` when
/// no status has a limit.
pub fn pick_status(statuses: &[DescriptorStatus]) -> Option<usize> {
    let mut over = None;
    let mut least: Option<(usize, u32)> = None;
    for (i, status) in statuses.iter().enumerate() {
        if status.current_limit.is_none() {
            continue;
        }
        if status.code == Code::OverLimit {
            over = Some(i);
        }
        if least.is_none_or(|(_, remaining)| status.limit_remaining < remaining) {
            least = Some((i, status.limit_remaining));
        }
    }
    over.or(least.map(|(i, _)| i))
}

/// The trio for `status`: limit, remaining, and whole seconds to the reset (rounded up).
pub fn limit_headers(names: &LimitHeaderNames, status: &DescriptorStatus) -> Vec<(String, String)> {
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    vec![
        (names.limit.clone(), limit.to_string()),
        (names.remaining.clone(), status.limit_remaining.to_string()),
        (names.reset.clone(), reset_seconds(status).to_string()),
    ]
}

/// Whole seconds until `status`'s limit resets, rounded up (0 without a reset).
fn reset_seconds(status: &DescriptorStatus) -> u64 {
    status.duration_until_reset.map_or(0, ceil_seconds)
}

/// `d` in whole seconds, rounded up.
pub fn ceil_seconds(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The `RateLimit-Policy` value: one `"name";q=N;w=S` item per status with a limit, in request order.
pub fn ratelimit_policy(descriptors: &[Descriptor], statuses: &[DescriptorStatus]) -> String {
    let mut out = String::new();
    for (i, status) in statuses.iter().enumerate() {
        let Some(limit) = &status.current_limit else {
            continue;
        };
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&policy_item(
            &policy_name(descriptors.get(i), status),
            limit,
        ));
    }
    out
}

/// One policy item: `"name";q=<requests_per_unit>;w=<window seconds, rounded up, at least 1>`.
pub fn policy_item(name: &str, limit: &CurrentLimit) -> String {
    format!(
        "{};q={};w={}",
        sf_string(name),
        limit.requests_per_unit,
        ceil_seconds(limit.window).max(1)
    )
}

/// The `RateLimit` item for `status`: `"name";r=<remaining>;t=<seconds>`.
///
/// `t` is the whole seconds (rounded up) until the limit resets; for an
/// OVER_LIMIT status with a known wait, the seconds until the request could
/// pass instead, so a `Retry-After` never points earlier than `t`.
pub fn ratelimit_item(name: &str, status: &DescriptorStatus) -> String {
    let t = match (status.code, status.retry_after) {
        (Code::OverLimit, Some(wait)) => ceil_seconds(wait),
        _ => reset_seconds(status),
    };
    format!("{};r={};t={}", sf_string(name), status.limit_remaining, t)
}

/// The policy name of a status: the limit's `name` when it has one, else
/// the descriptor's entries as `key=value`, joined by `;`
/// (`remote_address=10.0.0.1;path=/login`).
pub fn policy_name(descriptor: Option<&Descriptor>, status: &DescriptorStatus) -> String {
    if let Some(limit) = &status.current_limit
        && !limit.name.is_empty()
    {
        return limit.name.clone();
    }
    let mut name = String::new();
    for (k, v) in descriptor.map(|d| d.entries.as_slice()).unwrap_or_default() {
        if !name.is_empty() {
            name.push(';');
        }
        name.push_str(k);
        name.push('=');
        name.push_str(v);
    }
    name
}

/// `text` as an RFC 9651 String: quoted, with `"` and `\` escaped. Its
/// characters must be printable ASCII, so anything else (and `%`) is
/// percent-encoded byte by byte (`é` → `%C3%A9`).
pub fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for byte in text.bytes() {
        match byte {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(byte));
            }
            b'%' => out.push_str("%25"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out.push('"');
    out
}

/// How long the whole request must wait before it could pass: the longest
/// `retry_after` among the OVER_LIMIT statuses. `None` when none is over, or
/// when one of them can never pass (a cost larger than its limit).
pub fn overall_retry_after(statuses: &[DescriptorStatus]) -> Option<Duration> {
    let mut longest: Option<Duration> = None;
    for status in statuses.iter().filter(|s| s.code == Code::OverLimit) {
        let wait = status.retry_after?;
        longest = Some(longest.map_or(wait, |l| l.max(wait)));
    }
    longest
}

/// The `Retry-After` seconds for an exact wait and a jitter: `wait + jitter`
/// rounded up, so never earlier than `wait` and less than `wait + jitter + 1 s`.
pub fn retry_after_seconds(wait: Duration, jitter: Duration) -> u64 {
    ceil_seconds(wait.saturating_add(jitter))
}

/// The JSON body of an OVER_LIMIT reply:
///
/// ```json
/// {"code":"OVER_LIMIT","retry_after":50,"statuses":[
///   {"code":"OVER_LIMIT","limit":3,"name":"login","remaining":0,"reset":50,"retry_after":50,"window":60},
///   {"code":"OK","limit":null,"name":null,"remaining":0,"reset":null,"retry_after":null,"window":null}]}
/// ```
///
/// (on one line, keys in this order). The top-level `retry_after` is the `Retry-After` value
/// (jitter included), `null` when the request can never pass. Each status,
/// in request order: its `code`; the policy `name` as in `RateLimit-Policy`,
/// `limit` (requests per window) and `window` (seconds), all `null` without
/// a limit; `remaining`; `reset` (seconds until the limit resets, rounded
/// up); and its own exact wait rounded up, without jitter.
pub fn raw_body(
    descriptors: &[Descriptor],
    statuses: &[DescriptorStatus],
    retry_after: Option<u64>,
) -> String {
    let statuses: Vec<serde_json::Value> = statuses
        .iter()
        .enumerate()
        .map(|(i, status)| {
            let limit = status.current_limit.as_ref();
            serde_json::json!({
                "code": code_name(status.code),
                "name": limit.map(|_| policy_name(descriptors.get(i), status)),
                "limit": limit.map(|l| l.requests_per_unit),
                "window": limit.map(|l| ceil_seconds(l.window).max(1)),
                "remaining": status.limit_remaining,
                "reset": status.duration_until_reset.map(ceil_seconds),
                "retry_after": status.retry_after.map(ceil_seconds),
            })
        })
        .collect();
    serde_json::json!({
        "code": "OVER_LIMIT",
        "retry_after": retry_after,
        "statuses": statuses,
    })
    .to_string()
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::Unit;

    fn limit(name: &str, per: u32, window_secs: u64) -> CurrentLimit {
        CurrentLimit {
            name: name.to_owned(),
            requests_per_unit: per,
            unit: Unit::Second,
            unit_multiplier: u32::try_from(window_secs).unwrap_or(u32::MAX),
            window: Duration::from_secs(window_secs),
        }
    }

    fn status(
        code: Code,
        limit: Option<CurrentLimit>,
        remaining: u32,
        reset_ms: u64,
    ) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: limit,
            limit_remaining: remaining,
            duration_until_reset: Some(Duration::from_millis(reset_ms)),
            retry_after: (code == Code::OverLimit).then(|| Duration::from_millis(reset_ms)),
            shadowed: false,
        }
    }

    fn no_limit() -> DescriptorStatus {
        DescriptorStatus {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: 0,
            duration_until_reset: None,
            retry_after: None,
            shadowed: false,
        }
    }

    #[test]
    fn picking_prefers_the_last_over_limit_then_the_least_remaining_first_on_ties() {
        let ok = |rem| status(Code::Ok, Some(limit("", 10, 60)), rem, 1000);
        let over = || status(Code::OverLimit, Some(limit("", 10, 60)), 0, 1000);
        assert_eq!(pick_status(&[]), None);
        assert_eq!(pick_status(&[no_limit(), no_limit()]), None);
        assert_eq!(pick_status(&[ok(5), ok(3), ok(3), ok(4)]), Some(1));
        // A status without a limit never wins, even with remaining 0.
        assert_eq!(pick_status(&[no_limit(), ok(7)]), Some(1));
        assert_eq!(pick_status(&[ok(0), over(), ok(0), over(), ok(0)]), Some(3));
        assert_eq!(pick_status(&[over(), ok(0)]), Some(0));
    }

    #[test]
    fn the_trio_is_limit_remaining_and_reset_rounded_up() {
        let names = LimitHeaderNames::default();
        let s = status(Code::Ok, Some(limit("login", 3, 60)), 2, 49_750);
        assert_eq!(
            limit_headers(&names, &s),
            vec![
                ("RateLimit-Limit".to_owned(), "3".to_owned()),
                ("RateLimit-Remaining".to_owned(), "2".to_owned()),
                ("RateLimit-Reset".to_owned(), "50".to_owned()),
            ]
        );
        let custom = LimitHeaderNames {
            limit: "X-Limit".to_owned(),
            remaining: "X-Left".to_owned(),
            reset: "X-Reset".to_owned(),
        };
        let names: Vec<String> = limit_headers(&custom, &s)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["X-Limit", "X-Left", "X-Reset"]);
    }

    #[test]
    fn structured_fields_are_exact() {
        assert_eq!(sf_string("login"), "\"login\"");
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(sf_string("café 100%"), "\"caf%C3%A9 100%25\"");
        assert_eq!(sf_string("tab\there"), "\"tab%09here\"");

        let descriptors = vec![
            Descriptor::new([("path", "/login")]),
            Descriptor::new([("nothing", "here")]),
            Descriptor::new([("remote_address", "10.0.0.1"), ("path", "/x")]),
        ];
        let statuses = vec![
            status(Code::Ok, Some(limit("login", 3, 60)), 2, 49_750),
            no_limit(),
            status(Code::Ok, Some(limit("", 100, 3600)), 99, 1_000),
        ];
        assert_eq!(
            ratelimit_policy(&descriptors, &statuses),
            "\"login\";q=3;w=60, \"remote_address=10.0.0.1;path=/x\";q=100;w=3600"
        );
        assert_eq!(ratelimit_item("login", &statuses[0]), "\"login\";r=2;t=50");
        // A sub-second window is at least 1 s.
        let mut short = limit("burst", 5, 0);
        short.window = Duration::from_millis(500);
        assert_eq!(policy_item("burst", &short), "\"burst\";q=5;w=1");
        // Over the limit, t is the wait, not the reset.
        let mut denied = status(Code::OverLimit, Some(limit("gcra", 10, 60)), 0, 60_000);
        denied.retry_after = Some(Duration::from_millis(5_500));
        assert_eq!(ratelimit_item("gcra", &denied), "\"gcra\";r=0;t=6");
    }

    #[test]
    fn render_emits_only_what_is_switched_on() {
        let descriptors = vec![Descriptor::new([("path", "/login")])];
        let over = RateLimitResponse {
            overall: Code::OverLimit,
            statuses: vec![status(
                Code::OverLimit,
                Some(limit("login", 3, 60)),
                0,
                49_750,
            )],
        };
        let off = ResponseHeaders::new(HeaderOptions::default(), Jitter::seeded(1));
        assert_eq!(off.render(&descriptors, &over), Rendered::default());

        let all = ResponseHeaders::new(
            HeaderOptions {
                limit_headers: true,
                ietf_headers: true,
                retry_after: true,
                raw_body: true,
                ..HeaderOptions::default()
            },
            Jitter::seeded(1),
        );
        let rendered = all.render(&descriptors, &over);
        let pairs: Vec<(&str, &str)> = rendered
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("RateLimit-Limit", "3"),
                ("RateLimit-Remaining", "0"),
                ("RateLimit-Reset", "50"),
                ("RateLimit-Policy", "\"login\";q=3;w=60"),
                ("RateLimit", "\"login\";r=0;t=50"),
                ("Retry-After", "50"),
            ]
        );
        assert_eq!(
            String::from_utf8(rendered.raw_body.expect("a body")).expect("UTF-8"),
            "{\"code\":\"OVER_LIMIT\",\"retry_after\":50,\"statuses\":[{\"code\":\"OVER_LIMIT\",\
             \"limit\":3,\"name\":\"login\",\"remaining\":0,\"reset\":50,\"retry_after\":50,\"window\":60}]}"
        );

        // An OK answer: no Retry-After, no body; no limit at all: nothing.
        let ok = RateLimitResponse {
            overall: Code::Ok,
            statuses: vec![status(Code::Ok, Some(limit("login", 3, 60)), 1, 49_750)],
        };
        let rendered = all.render(&descriptors, &ok);
        assert_eq!(rendered.headers.len(), 5);
        assert_eq!(rendered.raw_body, None);
        let none = RateLimitResponse {
            overall: Code::Ok,
            statuses: vec![no_limit()],
        };
        assert_eq!(all.render(&descriptors, &none), Rendered::default());
    }

    #[test]
    fn retry_after_is_the_longest_wait_and_absent_when_a_request_can_never_pass() {
        let mut a = status(Code::OverLimit, Some(limit("a", 1, 60)), 0, 10_000);
        let b = status(Code::OverLimit, Some(limit("b", 1, 60)), 0, 30_500);
        let ok = status(Code::Ok, Some(limit("c", 1, 60)), 0, 90_000);
        assert_eq!(
            overall_retry_after(&[a.clone(), b.clone(), ok.clone()]),
            Some(Duration::from_millis(30_500))
        );
        assert_eq!(overall_retry_after(std::slice::from_ref(&ok)), None);
        a.retry_after = None;
        assert_eq!(overall_retry_after(&[a, b]), None);
    }

    #[test]
    fn retry_after_is_never_earlier_than_the_wait_nor_later_than_wait_plus_jitter_plus_one() {
        let random = Jitter::seeded(0x5eed);
        for jitter_max_ms in [0_u64, 1, 999, 1_000, 5_000, 30_000] {
            let jitter_max = Duration::from_millis(jitter_max_ms);
            let jitter = Jitter::seeded(jitter_max_ms);
            for _ in 0..20_000 {
                // Waits from 1 ns to ~18 minutes, with many near whole seconds.
                let wait_ns = match random.next_u64() % 3 {
                    0 => 1 + random.next_u64() % 1_100_000_000_000,
                    1 => (1 + random.next_u64() % 1_000) * 1_000_000_000,
                    _ => (1 + random.next_u64() % 1_000) * 1_000_000_000 + 1,
                };
                let wait = Duration::from_nanos(wait_ns);
                let seconds = retry_after_seconds(wait, jitter.sample(jitter_max));
                let header = Duration::from_secs(seconds);
                assert!(header >= wait, "{seconds} s < {wait:?}");
                assert!(
                    header < wait + jitter_max + Duration::from_secs(1),
                    "{seconds} s ≥ {wait:?} + {jitter_max:?} + 1 s"
                );
            }
        }
        assert_eq!(
            retry_after_seconds(Duration::from_secs(50), Duration::ZERO),
            50
        );
        assert_eq!(
            retry_after_seconds(Duration::from_nanos(50_000_000_001), Duration::ZERO),
            51
        );
    }

    #[test]
    fn jitter_is_seeded_bounded_and_spread() {
        let a = Jitter::seeded(42);
        let b = Jitter::seeded(42);
        let max = Duration::from_secs(10);
        let xs: Vec<Duration> = (0..1000).map(|_| a.sample(max)).collect();
        let ys: Vec<Duration> = (0..1000).map(|_| b.sample(max)).collect();
        assert_eq!(xs, ys, "the same seed gives the same sequence");
        assert!(xs.iter().all(|x| *x <= max));
        // Spread over the range: every whole second 0..10 is hit.
        let mut seen = [false; 10];
        for x in &xs {
            if let Some(slot) = seen.get_mut(usize::try_from(x.as_secs()).unwrap_or(10)) {
                *slot = true;
            }
        }
        assert!(seen.iter().all(|s| *s), "{seen:?}");
        assert_eq!(Jitter::seeded(7).sample(Duration::ZERO), Duration::ZERO);
        assert!(Jitter::seeded(7).sample(Duration::from_nanos(1)) <= Duration::from_nanos(1));
        let _ = Jitter::seeded(1).sample(Duration::MAX);
        assert_ne!(Jitter::seeded(1).next_u64(), Jitter::seeded(2).next_u64());
    }
}
