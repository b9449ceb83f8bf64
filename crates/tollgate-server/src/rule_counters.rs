//! The counters of each rule whose stats key names no request value, found from the rule itself, so a call neither builds that key nor hashes it.
//!
//! A rule's stats key is its config path unless the request's values go
//! into it (`detailed_metric`, `value_to_metric` on a wildcard or key-only
//! level: [`Rule::metric_key_varies`]). For the others every request that
//! matches the rule counts under the same key, so the key's counters are
//! looked up once and kept against the rule. A rule is known by its address
//! inside the config it was matched in; the cache holds that config (an
//! `Arc`), so no address can be reused by another rule while it is in the
//! cache, and a call matched in another config (after a reload) starts the
//! cache afresh. Calls read it without a lock or a shared write
//! (`arc_swap`); a rule's first call adds it by copying the map, so the
//! cache holds at most [`RULE_COUNTERS_MAX`] rules and a config with more
//! counts the rest by their keys, as before.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use tollgate_rules::{Rule, RuleSet};

use crate::rule_stats::Counters;

/// The most rules the cache keeps counters for.
pub(crate) const RULE_COUNTERS_MAX: usize = 4096;

/// One config's rules and their counters.
struct Cached {
    rules: Arc<RuleSet>,
    by_rule: HashMap<usize, Arc<Counters>, foldhash::fast::RandomState>,
}

/// Each cached rule's counters, for the config they were matched in.
#[derive(Default)]
pub(crate) struct RuleCounters {
    cached: ArcSwapOption<Cached>,
}

impl std::fmt::Debug for RuleCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rules = self.cached.load().as_ref().map_or(0, |c| c.by_rule.len());
        f.debug_struct("RuleCounters")
            .field("rules", &rules)
            .finish()
    }
}

/// The key a rule is cached under: its address inside `rules`.
fn address(rule: &Rule) -> usize {
    std::ptr::from_ref(rule) as usize
}

impl RuleCounters {
    /// Runs `count` on the counters of `rule` (matched in `rules`) and
    /// answers true, or answers false when they are not cached.
    pub(crate) fn count(
        &self,
        rules: &Arc<RuleSet>,
        rule: &Rule,
        count: impl FnOnce(&Counters),
    ) -> bool {
        let cached = self.cached.load();
        let Some(cached) = cached.as_ref() else {
            return false;
        };
        if !Arc::ptr_eq(&cached.rules, rules) {
            return false;
        }
        match cached.by_rule.get(&address(rule)) {
            Some(counters) => {
                count(counters);
                true
            }
            None => false,
        }
    }

    /// Keeps `counters` as those of `rule` (matched in `rules`); a rule of
    /// another config than the cached one replaces the cache.
    pub(crate) fn keep(&self, rules: &Arc<RuleSet>, rule: &Rule, counters: Arc<Counters>) {
        self.cached.rcu(|cached| {
            let mut by_rule = match cached.as_ref() {
                Some(c) if Arc::ptr_eq(&c.rules, rules) => {
                    if c.by_rule.len() >= RULE_COUNTERS_MAX {
                        return Some(Arc::clone(c));
                    }
                    c.by_rule.clone()
                }
                _ => HashMap::default(),
            };
            by_rule.insert(address(rule), Arc::clone(&counters));
            Some(Arc::new(Cached {
                rules: Arc::clone(rules),
                by_rule,
            }))
        });
    }
}
