//! The engine answers RLS requests like envoyproxy/ratelimit, on a manual clock: which rule applies ([`matching`]) and how it counts ([`counting`]).

mod counting;
mod matching;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_core::{ManualClock, Timestamp, Unit};
use tollgate_protocol::rls::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, LimitOverride, RateLimitRequest,
    RateLimitResponse,
};
use tollgate_rules::{LoadOptions, RuleSet, load_sources};
use tollgate_server::{Engine, EngineError, EngineOptions};

/// A minute boundary: `1_699_999_980` is a whole number of minutes since the epoch.
const MINUTE_START: u64 = 1_699_999_980;

fn rules(yaml: &str) -> Arc<RuleSet> {
    let loaded = load_sources([(Path::new("test.yaml"), yaml)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

/// An engine on a manual clock `secs_into_minute` seconds after a minute boundary.
fn engine_at(yaml: &str, secs_into_minute: u64) -> (Engine<ManualClock>, ManualClock) {
    engine_with(yaml, secs_into_minute, EngineOptions::default())
}

fn engine_with(
    yaml: &str,
    secs_into_minute: u64,
    options: EngineOptions,
) -> (Engine<ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(MINUTE_START + secs_into_minute));
    (Engine::new(rules(yaml), options, clock.clone()), clock)
}

fn descriptor(entries: &[(&str, &str)]) -> Descriptor {
    Descriptor::new(entries.iter().copied())
}

fn request(domain: &str, descriptors: Vec<Descriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

fn call(engine: &Engine<ManualClock>, req: &RateLimitRequest) -> RateLimitResponse {
    match engine.should_rate_limit(req) {
        Ok(response) => response,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// The single status of a one-descriptor call.
fn one(engine: &Engine<ManualClock>, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
    let response = call(engine, &request(domain, vec![descriptor(entries)]));
    assert_eq!(response.statuses.len(), 1);
    response.statuses.into_iter().next().unwrap()
}

fn codes_and_remaining(
    engine: &Engine<ManualClock>,
    domain: &str,
    entries: &[(&str, &str)],
    calls: usize,
) -> Vec<(Code, u32)> {
    (0..calls)
        .map(|_| {
            let s = one(engine, domain, entries);
            (s.code, s.limit_remaining)
        })
        .collect()
}

fn limit_of(status: &DescriptorStatus) -> (u32, Unit) {
    let limit = status.current_limit.as_ref().expect("a current limit");
    (limit.requests_per_unit, limit.unit)
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

const SECS: fn(u64) -> Duration = Duration::from_secs;
