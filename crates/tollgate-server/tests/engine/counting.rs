//! How the matched rules count: hits, refunds, overrides, several limits, every algorithm, reloads, bad input and threads.

use crate::*;

const TEN_PER_MINUTE: &str = "
domain: h
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
";

#[test]
fn hits_addend_zero_means_one_and_descriptor_hits_override_it() {
    let (engine, _) = engine_at(TEN_PER_MINUTE, 0);
    let mut req = request("h", vec![descriptor(&[("k", "v")])]);
    req.hits_addend = 0;
    assert_eq!(call(&engine, &req).statuses[0].limit_remaining, 9);
    req.hits_addend = 5;
    assert_eq!(call(&engine, &req).statuses[0].limit_remaining, 4);
    req.descriptors[0].hits_addend = Some(3);
    assert_eq!(call(&engine, &req).statuses[0].limit_remaining, 1);
    // Descriptor-level 0 checks without consuming.
    req.descriptors[0].hits_addend = Some(0);
    for _ in 0..3 {
        let s = &call(&engine, &req).statuses[0];
        assert_eq!((s.code, s.limit_remaining), (Code::Ok, 1));
    }
    req.descriptors[0].hits_addend = Some(1);
    assert_eq!(call(&engine, &req).statuses[0].limit_remaining, 0);
    // At the limit a check-only call is still OK, as upstream (count not above the limit).
    req.descriptors[0].hits_addend = Some(0);
    assert_eq!(call(&engine, &req).statuses[0].code, Code::Ok);
    // A multi-hit call that does not fit is over.
    req.descriptors[0].hits_addend = None;
    req.hits_addend = 2;
    assert_eq!(call(&engine, &req).overall, Code::OverLimit);
}

#[test]
fn negative_hits_give_units_back() {
    for algorithm in ["fixed_window", "token_bucket", "sliding_log"] {
        let yaml = format!(
            "
domain: n
descriptors:
  - key: k
    rate_limit: {{unit: minute, requests_per_unit: 5, algorithm: {algorithm}}}
"
        );
        let (engine, _) = engine_at(&yaml, 0);
        let mut req = request("n", vec![descriptor(&[("k", "v")])]);
        req.descriptors[0].hits_addend = Some(3);
        assert_eq!(
            call(&engine, &req).statuses[0].limit_remaining,
            2,
            "{algorithm}"
        );
        req.descriptors[0].hits_addend = Some(2);
        req.descriptors[0].is_negative_hits = true;
        let s = &call(&engine, &req).statuses[0];
        assert_eq!((s.code, s.limit_remaining), (Code::Ok, 4), "{algorithm}");
        assert_eq!(s.retry_after, None);
        req.descriptors[0].is_negative_hits = false;
        req.descriptors[0].hits_addend = Some(4);
        let s = &call(&engine, &req).statuses[0];
        assert_eq!((s.code, s.limit_remaining), (Code::Ok, 0), "{algorithm}");
    }
}

fn with_override(entries: &[(&str, &str)], rpu: u32, unit: Unit, mult: Option<u32>) -> Descriptor {
    let mut d = descriptor(entries);
    d.limit = Some(LimitOverride {
        requests_per_unit: rpu,
        unit: Some(unit),
        unit_multiplier: mult,
    });
    d
}

#[test]
fn limit_overrides_count_in_their_own_fixed_window() {
    let (engine, clock) = engine_at(TEN_PER_MINUTE, 0);
    let req = request(
        "h",
        vec![with_override(&[("k", "v")], 2, Unit::Minute, None)],
    );
    let first = call(&engine, &req).statuses.remove(0);
    assert_eq!(
        first.current_limit,
        Some(CurrentLimit {
            name: String::new(),
            requests_per_unit: 2,
            unit: Unit::Minute,
            unit_multiplier: 1,
            window: SECS(60),
        })
    );
    assert_eq!(first.limit_remaining, 1);
    assert_eq!(call(&engine, &req).statuses[0].limit_remaining, 0);
    assert_eq!(call(&engine, &req).overall, Code::OverLimit);
    // The rule's own counter was not touched.
    assert_eq!(one(&engine, "h", &[("k", "v")]).limit_remaining, 9);
    // Another limit for the same entries has its own counter.
    let other = request(
        "h",
        vec![with_override(&[("k", "v")], 5, Unit::Minute, None)],
    );
    assert_eq!(call(&engine, &other).statuses[0].limit_remaining, 4);
    // The multiplier stretches the window: 5 minutes, epoch-aligned.
    clock.advance(SECS(90));
    let five = request(
        "h",
        vec![with_override(&[("k", "v")], 2, Unit::Minute, Some(5))],
    );
    let s = call(&engine, &five).statuses.remove(0);
    let limit = s.current_limit.clone().unwrap();
    assert_eq!((limit.unit_multiplier, limit.window), (5, SECS(300)));
    let into_window = (MINUTE_START + 90) % 300;
    assert_eq!(s.duration_until_reset, Some(SECS(300 - into_window)));
    assert_eq!(s.limit_remaining, 1);
    // Negative hits give back to the override's counter.
    let mut spend = request("h", vec![with_override(&[("k", "n")], 3, Unit::Hour, None)]);
    spend.descriptors[0].hits_addend = Some(3);
    assert_eq!(call(&engine, &spend).statuses[0].limit_remaining, 0);
    spend.descriptors[0].hits_addend = Some(2);
    spend.descriptors[0].is_negative_hits = true;
    let s = call(&engine, &spend).statuses.remove(0);
    assert_eq!((s.code, s.limit_remaining), (Code::Ok, 2));
    // A multiplier of 0 means 1; requests_per_unit 0 is always over.
    let zero = request(
        "h",
        vec![with_override(&[("k", "z")], 0, Unit::Second, Some(0))],
    );
    let s = call(&engine, &zero).statuses.remove(0);
    assert_eq!(
        (s.code, s.current_limit.unwrap().unit_multiplier),
        (Code::OverLimit, 1)
    );
}

const TWO_LIMITS: &str = "
domain: m
descriptors:
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: token_bucket, name: per_second}
      - {unit: minute, requests_per_unit: 15, algorithm: token_bucket, name: per_minute}
";

fn reported(s: &DescriptorStatus) -> (Code, String, u32) {
    let name = s
        .current_limit
        .as_ref()
        .map(|l| l.name.clone())
        .unwrap_or_default();
    (s.code, name, s.limit_remaining)
}

#[test]
fn several_limits_report_the_most_restrictive_and_a_denial_consumes_nothing_else() {
    let (engine, clock) = engine_at(TWO_LIMITS, 0);
    for i in 1..=10u32 {
        let s = one(&engine, "m", &[("k", "v")]);
        assert_eq!(reported(&s), (Code::Ok, "per_second".to_owned(), 10 - i));
    }
    let denied = one(&engine, "m", &[("k", "v")]);
    assert_eq!(
        reported(&denied),
        (Code::OverLimit, "per_second".to_owned(), 0)
    );
    assert_eq!(denied.retry_after, Some(Duration::from_millis(100)));
    // The denied call did not take a token of the per-minute bucket: 5 were
    // left, plus a quarter token after a second, minus this call = 4.
    clock.advance(SECS(1));
    let s = one(&engine, "m", &[("k", "v")]);
    assert_eq!(reported(&s), (Code::Ok, "per_minute".to_owned(), 4));
    for left in (0..4).rev() {
        let s = one(&engine, "m", &[("k", "v")]);
        assert_eq!(reported(&s), (Code::Ok, "per_minute".to_owned(), left));
    }
    // A quarter token is left; three quarters more take 3 s at 15 per minute.
    let s = one(&engine, "m", &[("k", "v")]);
    assert_eq!(reported(&s), (Code::OverLimit, "per_minute".to_owned(), 0));
    assert_eq!(s.retry_after, Some(SECS(3)));
}

#[test]
fn fixed_window_limits_count_denied_requests_next_to_other_limits() {
    let (engine, clock) = engine_at(
        "
domain: f
descriptors:
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 1, algorithm: token_bucket, name: bucket}
      - {unit: minute, requests_per_unit: 5, name: window}
",
        0,
    );
    assert_eq!(
        reported(&one(&engine, "f", &[("k", "v")])),
        (Code::Ok, "bucket".to_owned(), 0)
    );
    // Denied by the bucket; the fixed window still counts it, like upstream.
    assert_eq!(
        reported(&one(&engine, "f", &[("k", "v")])),
        (Code::OverLimit, "bucket".to_owned(), 0)
    );
    clock.advance(SECS(1));
    let s = one(&engine, "f", &[("k", "v")]);
    assert_eq!(reported(&s), (Code::Ok, "bucket".to_owned(), 0));
    clock.advance(SECS(1));
    // 5 - 4 counted (three allowed, one denied) = 1.
    assert_eq!(
        reported(&one(&engine, "f", &[("k", "v")])),
        (Code::Ok, "bucket".to_owned(), 0)
    );
    let s = call(
        &engine,
        &RateLimitRequest {
            descriptors: vec![Descriptor {
                hits_addend: Some(0),
                ..descriptor(&[("k", "v")])
            }],
            ..request("f", vec![])
        },
    );
    assert_eq!(reported(&s.statuses[0]), (Code::Ok, "bucket".to_owned(), 0));
    clock.advance(SECS(1));
    // Both have 0 left: the first limit is reported on ties.
    let s = one(&engine, "f", &[("k", "v")]);
    assert_eq!(reported(&s), (Code::Ok, "bucket".to_owned(), 0));
    // Four allowed calls and one denied one: the sixth is over the window.
    clock.advance(SECS(1));
    let s = one(&engine, "f", &[("k", "v")]);
    assert_eq!(reported(&s), (Code::OverLimit, "window".to_owned(), 0));
    assert_eq!(s.retry_after, Some(SECS(56)));
}

#[test]
fn every_algorithm_runs_through_the_engine() {
    let (engine, clock) = engine_at(
        "
domain: a
descriptors:
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: gcra}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
  - key: lb
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: leaky_bucket, burst: 1}
",
        0,
    );
    for key in ["tb", "gcra", "sw", "sl", "lb"] {
        let got = codes_and_remaining(&engine, "a", &[(key, "x")], 3);
        let codes: Vec<Code> = got.iter().map(|(c, _)| *c).collect();
        assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit], "{key}");
        assert_eq!(got[1].1, 0, "{key}");
    }
    let tb = one(&engine, "a", &[("tb", "x")]);
    assert_eq!(tb.retry_after, Some(Duration::from_millis(500)));
    let gcra = one(&engine, "a", &[("gcra", "x")]);
    assert_eq!(gcra.retry_after, Some(Duration::from_millis(500)));
    let sl = one(&engine, "a", &[("sl", "x")]);
    assert_eq!(sl.retry_after, Some(SECS(60)));
    clock.advance(Duration::from_millis(500));
    assert_eq!(one(&engine, "a", &[("tb", "x")]).code, Code::Ok);
    assert_eq!(one(&engine, "a", &[("gcra", "x")]).code, Code::Ok);
    assert_eq!(one(&engine, "a", &[("sl", "x")]).code, Code::OverLimit);
    assert_eq!(engine.store_count(), 5);
}

#[test]
fn counters_survive_a_reload_and_a_change_of_their_rate() {
    let v1 = "
domain: d
descriptors:
  - key: same
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: changed
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: token_bucket}
";
    let (engine, _) = engine_at(v1, 0);
    for _ in 0..2 {
        one(&engine, "d", &[("same", "x")]);
        one(&engine, "d", &[("changed", "x")]);
    }
    let reloaded = engine.with_rules(rules(v1));
    assert_eq!(one(&reloaded, "d", &[("same", "x")]).limit_remaining, 0);
    assert_eq!(one(&reloaded, "d", &[("changed", "x")]).limit_remaining, 1);
    let v2 = v1.replace("requests_per_unit: 4", "requests_per_unit: 6");
    let changed = reloaded.with_rules(rules(&v2));
    drop(reloaded);
    drop(engine);
    assert_eq!(one(&changed, "d", &[("same", "x")]).code, Code::OverLimit);
    // Issue 13: the count carries over a change of the rate, as upstream's.
    // 3 of 4/minute taken is 45 s to full; at 6/minute (10 s a token) one
    // more makes 55 s of the 60 s capacity, so none is left.
    let after = one(&changed, "d", &[("changed", "x")]);
    assert_eq!((after.code, after.limit_remaining), (Code::Ok, 0));
    assert_eq!(
        one(&changed, "d", &[("changed", "x")]).code,
        Code::OverLimit
    );
    assert_eq!(changed.store_count(), 2);
}

fn invalid(engine: &Engine<ManualClock>, req: &RateLimitRequest) -> String {
    match engine.should_rate_limit(req) {
        Err(EngineError::InvalidArgument(message)) => message,
        Ok(r) => panic!("expected an error, got {r:?}"),
    }
}

#[test]
fn malformed_requests_are_invalid_arguments_with_a_message() {
    let (engine, _) = engine_at(TEN_PER_MINUTE, 0);
    let ok = descriptor(&[("k", "v")]);
    assert_eq!(
        invalid(&engine, &request("", vec![ok.clone()])),
        "rate limit domain must not be empty"
    );
    assert_eq!(
        invalid(&engine, &request("h", vec![])),
        "rate limit descriptor list must not be empty"
    );
    assert_eq!(
        invalid(
            &engine,
            &request("h", vec![ok.clone(), Descriptor::default()])
        ),
        "descriptors[1].entries must not be empty"
    );
    assert_eq!(
        invalid(
            &engine,
            &request("h", vec![ok.clone(), descriptor(&[("a", "1"), ("", "2")])])
        ),
        "descriptors[1].entries[1].key must not be empty"
    );
    let mut unknown_unit = ok.clone();
    unknown_unit.limit = Some(LimitOverride {
        requests_per_unit: 1,
        unit: None,
        unit_multiplier: None,
    });
    assert_eq!(
        invalid(&engine, &request("h", vec![unknown_unit])),
        "descriptors[0].limit.unit must be one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR, not UNKNOWN"
    );
    let huge = with_override(&[("k", "v")], 1, Unit::Year, Some(u32::MAX));
    let message = invalid(&engine, &request("h", vec![ok.clone(), huge]));
    assert!(message.starts_with("descriptors[1].limit: "), "{message}");
    // A rejected request consumed nothing.
    assert_eq!(one(&engine, "h", &[("k", "v")]).limit_remaining, 9);
    assert_eq!(
        EngineError::InvalidArgument("x".to_owned()).to_string(),
        "x"
    );
}

#[test]
fn extreme_hits_never_panic() {
    let (engine, _) = engine_at(
        "
domain: x
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log}
",
        0,
    );
    for key in ["fw", "tb", "sl"] {
        for negative in [false, true] {
            let mut d = descriptor(&[(key, "v")]);
            d.hits_addend = Some(u64::MAX);
            d.is_negative_hits = negative;
            let s = call(&engine, &request("x", vec![d])).statuses.remove(0);
            let expected = if negative { Code::Ok } else { Code::OverLimit };
            assert_eq!(s.code, expected, "{key} negative={negative}");
            if !negative {
                // A cost that can never pass has no retry time.
                assert_eq!(s.retry_after, None, "{key}");
            }
        }
    }
}

fn hammer(yaml: &str) -> usize {
    let (engine, _) = engine_at(yaml, 0);
    let allowed = AtomicUsize::new(0);
    let req = request("c", vec![descriptor(&[("k", "hot")])]);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..1000 {
                    if let Ok(r) = engine.should_rate_limit(&req)
                        && r.overall == Code::Ok
                    {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    allowed.into_inner()
}

#[test]
fn four_threads_on_one_key_admit_exactly_the_limit() {
    let fixed = "
domain: c
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
";
    assert_eq!(hammer(fixed), 100);
    let bucket = "
domain: c
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket}
";
    assert_eq!(hammer(bucket), 100);
}

#[test]
fn duration_windows_are_reported_in_the_largest_whole_unit() {
    let (engine, _) = engine_at(
        "
domain: w
descriptors:
  - key: a
    rate_limit: {window: 2h, requests_per_unit: 1}
  - key: b
    rate_limit: {window: 90s, requests_per_unit: 1}
  - key: c
    rate_limit: {window: 1500ms, requests_per_unit: 1, algorithm: sliding_log}
",
        0,
    );
    let unit = |key: &str| {
        let l = one(&engine, "w", &[(key, "v")]).current_limit.unwrap();
        (l.unit, l.unit_multiplier, l.window)
    };
    assert_eq!(unit("a"), (Unit::Hour, 2, SECS(7200)));
    assert_eq!(unit("b"), (Unit::Second, 90, SECS(90)));
    assert_eq!(unit("c"), (Unit::Second, 2, Duration::from_millis(1500)));
}

#[test]
fn override_stores_beyond_the_bound_are_refused_until_one_is_all_fresh() {
    let options = EngineOptions {
        max_override_stores: 2,
        ..EngineOptions::default()
    };
    let (engine, clock) = engine_with(TEN_PER_MINUTE, 0, options);
    // One override limit per requests_per_unit: each is its own store.
    let with_override = |requests_per_unit: u32| {
        let mut d = descriptor(&[("k", "v")]);
        d.limit = Some(LimitOverride {
            requests_per_unit,
            unit: Some(Unit::Hour),
            unit_multiplier: None,
        });
        let response = call(&engine, &request("h", vec![d]));
        (
            response.statuses[0].code,
            response.statuses[0].limit_remaining,
        )
    };
    assert_eq!(with_override(5), (Code::Ok, 4));
    clock.advance(SECS(1));
    assert_eq!(with_override(6), (Code::Ok, 5));
    clock.advance(SECS(1));
    assert_eq!(
        with_override(5),
        (Code::Ok, 3),
        "the 5/hour override is used again"
    );
    clock.advance(SECS(1));
    assert_eq!(
        with_override(7),
        (Code::OverLimit, 0),
        "a third store would need dropping counts in use: refused"
    );
    assert_eq!(engine.override_store_count(), 2);
    // Neither store in use lost a count.
    clock.advance(SECS(1));
    assert_eq!(with_override(6), (Code::Ok, 4));
    assert_eq!(with_override(5), (Code::Ok, 2));
    // Two hours idle, every key of the store used longest ago is fresh: it makes room.
    clock.advance(SECS(2 * 3600));
    assert_eq!(with_override(6), (Code::Ok, 5), "a new hour");
    assert_eq!(with_override(7), (Code::Ok, 6));
    assert_eq!(engine.override_store_count(), 2);
}

#[test]
fn a_leaky_bucket_with_delay_shapes_requests_within_the_burst_and_refuses_beyond() {
    // 10 per second, burst 3: from idle one passes, three wait 100, 200 and
    // 300 ms (nginx's `limit_req burst=3`), the fifth is over.
    let (engine, _clock) = engine_at(
        "domain: shape\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 3, delay: 0}\n",
        0,
    );
    let req = request("shape", vec![descriptor(&[("k", "v")])]);
    let seen: Vec<(Code, Duration)> = (0..5)
        .map(|_| {
            let r = call(&engine, &req);
            (r.overall, r.delay)
        })
        .collect();
    let ms = Duration::from_millis;
    assert_eq!(
        seen,
        [
            (Code::Ok, ms(0)),
            (Code::Ok, ms(100)),
            (Code::Ok, ms(200)),
            (Code::Ok, ms(300)),
            (Code::OverLimit, ms(0)),
        ]
    );
    // `delay: 2` (nginx `delay=2`): two more pass at once before any waits.
    let (engine, _) = engine_at(
        "domain: shape\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 3, delay: 2}\n",
        0,
    );
    let delays: Vec<Duration> = (0..4).map(|_| call(&engine, &req).delay).collect();
    assert_eq!(delays, [ms(0), ms(0), ms(0), ms(100)]);
    // The policer (no `delay`) never delays.
    let (engine, _) = engine_at(
        "domain: shape\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 3}\n",
        0,
    );
    assert!((0..4).all(|_| call(&engine, &req).delay.is_zero()));
}

#[test]
fn delay_on_another_algorithm_or_beyond_the_burst_is_an_error_at_delay() {
    for (yaml, wanted) in [
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, delay: 0}\n",
            "`delay` shapes a `leaky_bucket` only",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 2, delay: 3}\n",
            "`delay`",
        ),
    ] {
        let loaded = load_sources([(Path::new("d.yaml"), yaml)], LoadOptions::default());
        let text = loaded.diagnostics.to_string();
        assert!(
            loaded.diagnostics.has_errors() && text.contains(wanted),
            "{text}"
        );
    }
}
