//! Which rules count in envoyproxy/ratelimit's own Redis keys under `--redis-key-format upstream`, and their keys.
//!
//! A rule upstream itself could have written counts in upstream's key, with
//! upstream's arithmetic, so upstream's pods and these share one budget
//! during a rolling switch: one limit, a fixed window of one of upstream's
//! units, not staggered. Every other rule keeps Tollgate's keys (the reason
//! is [`keeps_own_keys`]); so do descriptor `limit` overrides of a unit
//! multiplier other than 1.

use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm};
use tollgate_rules::Rule;

/// Why `rule` keeps Tollgate's keys under `--redis-key-format upstream`; None when it counts in upstream's.
pub fn keeps_own_keys(rule: &Rule) -> Option<&'static str> {
    let [limit] = rule.limits.as_slice() else {
        return Some("it has several limits (upstream has one per descriptor)");
    };
    if rule.stagger {
        return Some("its windows are staggered");
    }
    match limit.algorithm {
        Some(AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(window)))
            if tollgate_redis::upstream_key("", [], window.window(), 0).is_some() =>
        {
            None
        }
        Some(AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_))) => {
            Some("its window is not one of upstream's units (a unit_multiplier)")
        }
        _ => Some("it is not a fixed window"),
    }
}

/// Upstream's key for `algorithm` when it is a fixed window of one of
/// upstream's units, at `now_s` Unix seconds; None for anything else.
pub(super) fn upstream_key_of<'a>(
    algorithm: &AnyAlgorithm,
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    now_s: u64,
) -> Option<Vec<u8>> {
    match algorithm {
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(window)) => {
            tollgate_redis::upstream_key(domain, entries, window.window(), now_s)
        }
        _ => None,
    }
}
