//! The header renderers' tests: picking, the trio, structured fields, what `render` emits, `Retry-After` and jitter.

use std::time::Duration;

use tollgate_core::Unit;

use super::*;
use crate::rls::model::{Code, CurrentLimit, Descriptor, DescriptorStatus, RateLimitResponse};

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
    DescriptorStatus::no_limit()
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
    assert_eq!(
        policy_item("burst", u64::from(short.requests_per_unit), short.window),
        "\"burst\";q=5;w=1"
    );
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
        delay: std::time::Duration::ZERO,
        from_local_cache: false,
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
        delay: std::time::Duration::ZERO,
        from_local_cache: false,
    };
    let rendered = all.render(&descriptors, &ok);
    assert_eq!(rendered.headers.len(), 5);
    assert_eq!(rendered.raw_body, None);
    let none = RateLimitResponse {
        overall: Code::Ok,
        statuses: vec![no_limit()],
        delay: std::time::Duration::ZERO,
        from_local_cache: false,
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
