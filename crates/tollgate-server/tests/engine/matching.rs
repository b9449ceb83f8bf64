//! Which rule answers a descriptor: nesting, wildcards, `replaces`, shadow modes, `unlimited`, unknown domains.

use crate::*;

#[test]
fn fixed_window_counts_remaining_and_reset_like_upstream() {
    let (engine, clock) = engine_at(
        "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
",
        45,
    );
    let limit = CurrentLimit {
        name: String::new(),
        requests_per_unit: 3,
        unit: Unit::Minute,
        unit_multiplier: 1,
        window: SECS(60),
    };
    for remaining in [2, 1, 0] {
        let s = one(&engine, "d", &[("k", "v")]);
        assert_eq!(
            s,
            DescriptorStatus {
                code: Code::Ok,
                current_limit: Some(limit.clone()),
                limit_remaining: remaining,
                duration_until_reset: Some(SECS(15)),
                retry_after: None,
                shadowed: false,
            }
        );
    }
    let response = call(&engine, &request("d", vec![descriptor(&[("k", "v")])]));
    assert_eq!(response.overall, Code::OverLimit);
    assert_eq!(
        response.statuses,
        vec![DescriptorStatus {
            code: Code::OverLimit,
            current_limit: Some(limit.clone()),
            limit_remaining: 0,
            duration_until_reset: Some(SECS(15)),
            retry_after: Some(SECS(15)),
            shadowed: false,
        }]
    );
    clock.advance(SECS(14));
    assert_eq!(one(&engine, "d", &[("k", "v")]).code, Code::OverLimit);
    clock.advance(SECS(1));
    let s = one(&engine, "d", &[("k", "v")]);
    assert_eq!((s.code, s.limit_remaining), (Code::Ok, 2));
    // At a boundary the window has its whole length to run, as upstream says.
    assert_eq!(s.duration_until_reset, Some(SECS(60)));
}

const MESSAGING: &str = "
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 7}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 8}
";

#[test]
fn nested_descriptors_apply_only_at_the_last_entry() {
    let (engine, _) = engine_at(MESSAGING, 0);
    let nested = one(
        &engine,
        "messaging",
        &[("message_type", "marketing"), ("to_number", "2061234567")],
    );
    assert_eq!(limit_of(&nested), (5, Unit::Day));
    assert_eq!(nested.limit_remaining, 4);
    let top = one(&engine, "messaging", &[("to_number", "2061234567")]);
    assert_eq!(
        (limit_of(&top), top.limit_remaining),
        ((100, Unit::Day), 99)
    );
    // The intermediate descriptor has no rule of its own.
    assert_eq!(
        one(&engine, "messaging", &[("message_type", "marketing")]),
        no_limit()
    );
    // A rule at an intermediate level does not apply to a longer request.
    assert_eq!(
        limit_of(&one(&engine, "messaging", &[("a", "1")])),
        (7, Unit::Second)
    );
    assert_eq!(
        limit_of(&one(&engine, "messaging", &[("a", "1"), ("b", "2")])),
        (8, Unit::Second)
    );
    assert_eq!(
        one(&engine, "messaging", &[("a", "1"), ("b", "2"), ("c", "3")]),
        no_limit()
    );
    // Other message types match nothing.
    assert_eq!(
        one(
            &engine,
            "messaging",
            &[("message_type", "transactional"), ("to_number", "1")]
        ),
        no_limit()
    );
}

#[test]
fn key_only_is_the_default_and_counts_each_value_separately() {
    let (engine, _) = engine_at(
        "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    rate_limit: {unit: second, requests_per_unit: 1}
",
        0,
    );
    let users = one(&engine, "mongo_cps", &[("database", "users")]);
    assert_eq!(
        (limit_of(&users), users.limit_remaining),
        ((500, Unit::Second), 499)
    );
    let a = codes_and_remaining(&engine, "mongo_cps", &[("database", "a")], 2);
    assert_eq!(a, [(Code::Ok, 0), (Code::OverLimit, 0)]);
    // Another value has its own counter under the same key-only rule.
    let b = one(&engine, "mongo_cps", &[("database", "b")]);
    assert_eq!((b.code, limit_of(&b)), (Code::Ok, (1, Unit::Second)));
    // An empty value can only match the key-only rule.
    assert_eq!(
        limit_of(&one(&engine, "mongo_cps", &[("database", "")])),
        (1, Unit::Second)
    );
}

#[test]
fn wildcards_match_after_exact_values() {
    let (engine, _) = engine_at(
        "
domain: w
descriptors:
  - key: path
    value: /api/admin
    rate_limit: {unit: minute, requests_per_unit: 9}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
",
        0,
    );
    assert_eq!(
        limit_of(&one(&engine, "w", &[("path", "/api/admin")])),
        (9, Unit::Minute)
    );
    let x = codes_and_remaining(&engine, "w", &[("path", "/api/x")], 3);
    assert_eq!(x, [(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)]);
    // Each matching value counts on its own (no share_threshold).
    assert_eq!(one(&engine, "w", &[("path", "/api/y")]).limit_remaining, 1);
    assert_eq!(one(&engine, "w", &[("path", "/other")]), no_limit());
}

#[test]
fn replaces_drops_the_named_limit_for_the_whole_request() {
    let (engine, _) = engine_at(
        "
domain: r
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 2, name: generic}
  - key: user
    value: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: generic
",
        0,
    );
    let both = call(
        &engine,
        &request(
            "r",
            vec![descriptor(&[("api", "x")]), descriptor(&[("user", "vip")])],
        ),
    );
    assert_eq!(both.statuses[0], no_limit());
    assert_eq!(limit_of(&both.statuses[1]), (100, Unit::Minute));
    // Alone, the generic limit applies, and it was not consumed above.
    let alone = one(&engine, "r", &[("api", "x")]);
    assert_eq!(
        (limit_of(&alone), alone.limit_remaining),
        ((2, Unit::Minute), 1)
    );
    assert_eq!(
        alone.current_limit.map(|l| l.name),
        Some("generic".to_owned())
    );
}

#[test]
fn shadow_mode_rules_report_ok_but_keep_their_limit() {
    let (engine, _) = engine_at(
        "
domain: s
descriptors:
  - key: k
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        30,
    );
    let first = one(&engine, "s", &[("k", "v")]);
    assert_eq!((first.code, first.shadowed), (Code::Ok, false));
    let response = call(&engine, &request("s", vec![descriptor(&[("k", "v")])]));
    assert_eq!(response.overall, Code::Ok);
    let s = &response.statuses[0];
    assert_eq!(
        (s.code, s.limit_remaining, s.retry_after, s.shadowed),
        (Code::Ok, 0, None, true)
    );
    assert_eq!(limit_of(s), (1, Unit::Minute));
    assert_eq!(s.duration_until_reset, Some(SECS(30)));
}

#[test]
fn global_shadow_mode_answers_ok_overall_and_keeps_the_statuses() {
    let options = EngineOptions {
        global_shadow_mode: true,
        ..EngineOptions::default()
    };
    let (engine, _) = engine_with(
        "
domain: g
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        0,
        options,
    );
    let req = request("g", vec![descriptor(&[("k", "v")])]);
    assert_eq!(call(&engine, &req).overall, Code::Ok);
    let response = call(&engine, &req);
    assert_eq!(response.overall, Code::Ok);
    assert_eq!(response.statuses[0].code, Code::OverLimit);
    assert_eq!(response.statuses[0].retry_after, Some(SECS(60)));
    assert!(
        !response.statuses[0].shadowed,
        "the rule itself is not in shadow mode"
    );
}

#[test]
fn overall_is_over_limit_when_any_descriptor_is() {
    let (engine, _) = engine_at(
        "
domain: o
descriptors:
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 100}
",
        0,
    );
    let req = request(
        "o",
        vec![descriptor(&[("big", "1")]), descriptor(&[("small", "1")])],
    );
    assert_eq!(call(&engine, &req).overall, Code::Ok);
    let response = call(&engine, &req);
    assert_eq!(response.overall, Code::OverLimit);
    let codes: Vec<Code> = response.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::Ok, Code::OverLimit]);
}

#[test]
fn unlimited_is_ok_with_the_largest_remaining_and_never_counts() {
    let (engine, _) = engine_at(
        "
domain: u
descriptors:
  - key: k
    rate_limit: {unlimited: true}
",
        0,
    );
    for _ in 0..1000 {
        let s = one(&engine, "u", &[("k", "v")]);
        assert_eq!(
            s,
            DescriptorStatus {
                limit_remaining: 4_294_967_295,
                ..no_limit()
            }
        );
    }
    assert_eq!(engine.store_count(), 0);
}

#[test]
fn unknown_domains_and_unmatched_descriptors_are_ok_without_a_limit() {
    let (engine, _) = engine_at(MESSAGING, 0);
    let response = call(
        &engine,
        &request("nope", vec![descriptor(&[("to_number", "1")])]),
    );
    assert_eq!(response.overall, Code::Ok);
    assert_eq!(response.statuses, vec![no_limit()]);
    assert_eq!(one(&engine, "messaging", &[("zzz", "1")]), no_limit());
    // Upstream looks the domain up before the override: none in an unknown domain.
    let mut d = descriptor(&[("k", "v")]);
    d.limit = Some(LimitOverride {
        requests_per_unit: 0,
        unit: Some(Unit::Second),
        unit_multiplier: None,
    });
    assert_eq!(
        call(&engine, &request("nope", vec![d])).statuses,
        vec![no_limit()]
    );
}
