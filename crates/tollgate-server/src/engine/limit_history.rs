//! [`LimitHistory`]: the limits each rule's counters were kept under across reloads, so a count carries on when a limit changes, even through a load that lacked the rule.
//!
//! A counter's key is its rule's domain, path and limit index with the
//! request's values; its store is the limit's algorithm (rate included).
//! When a reload changes only a limit's figures, the counts of the old
//! store are copied into the new one. Comparing the new rules with the
//! running ones alone is not enough: a limits file written in several steps
//! can load half-written, without the rule (or with the rule but without
//! its limit), and when the whole file loads the rule is new to the running
//! rules, so its count would start again from zero. The history remembers,
//! for every limit loaded recently, the algorithms it had (the latest
//! [`MAX_ALGORITHMS`]), missing rules included, for as long as a store of one
//! of them is kept (in service or retired, see
//! [`tollgate_store::RetiredStores`]); a count is carried from each of them,
//! and the most used wins.

use std::collections::HashMap;
use std::time::Duration;

use tollgate_core::AnyAlgorithm;
use tollgate_rules::{AlgorithmKind, RuleSet};

/// How many algorithms of one limit are remembered (a file's intermediate states each may give one).
pub(super) const MAX_ALGORITHMS: usize = 4;

/// A limit of a rule: its domain, its rule's path and its index among the rule's limits.
type LimitIdentity = (String, Vec<(String, Option<String>)>, usize);

/// The counter a limit keeps: counts carry only between the same algorithm kind and window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CounterShape {
    kind: AlgorithmKind,
    window: Option<Duration>,
}

/// What one limit was counted under: its shape, and its algorithms, latest last.
#[derive(Debug)]
struct Past {
    shape: CounterShape,
    algorithms: Vec<AnyAlgorithm>,
}

/// The algorithms each limit of the rules loaded recently was counted under.
#[derive(Debug, Default)]
pub(super) struct LimitHistory {
    limits: HashMap<LimitIdentity, Past>,
}

impl LimitHistory {
    /// The history of a first load of `rules`.
    pub(super) fn new(rules: &RuleSet) -> Self {
        let mut history = LimitHistory::default();
        history.carries(rules);
        history
    }

    /// The counts to carry into `rules`' stores — `(from, to)` for each
    /// algorithm `from` a limit of `rules` was counted under before, with
    /// the same kind and window, whose algorithm is now `to` — and records
    /// `rules`. Limits missing from `rules` are remembered as they were.
    pub(super) fn carries(&mut self, rules: &RuleSet) -> Vec<(AnyAlgorithm, AnyAlgorithm)> {
        let mut carries = Vec::new();
        for domain in rules.domains() {
            for rule in rules.rules(domain) {
                for (index, limit) in rule.limits.iter().enumerate() {
                    let Some(to) = limit.algorithm else { continue };
                    let shape = CounterShape {
                        kind: limit.algorithm_kind,
                        window: limit.window.map(|w| w.duration()),
                    };
                    let identity = (domain.to_owned(), rule.path.clone(), index);
                    let past = self.limits.entry(identity).or_insert_with(|| Past {
                        shape,
                        algorithms: Vec::new(),
                    });
                    if past.shape != shape {
                        *past = Past {
                            shape,
                            algorithms: Vec::new(),
                        };
                    }
                    for &from in &past.algorithms {
                        if from != to && !carries.contains(&(from, to)) {
                            carries.push((from, to));
                        }
                    }
                    past.algorithms.retain(|&a| a != to);
                    past.algorithms.push(to);
                    if past.algorithms.len() > MAX_ALGORITHMS {
                        past.algorithms.remove(0);
                    }
                }
            }
        }
        carries
    }

    /// Forgets every algorithm without a store (`kept` false): no count is left to carry from it.
    pub(super) fn forget_unless(&mut self, kept: impl Fn(&AnyAlgorithm) -> bool) {
        self.limits.retain(|_, past| {
            past.algorithms.retain(|a| kept(a));
            !past.algorithms.is_empty()
        });
    }

    /// How many limits are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.limits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_rules::{LoadOptions, load_sources};

    fn rules(yaml: &str) -> RuleSet {
        let (rules, _) = load_sources(
            [(std::path::Path::new("l.yaml"), yaml)],
            LoadOptions::default(),
        )
        .into_result()
        .expect("valid rules");
        rules
    }

    fn login(per_hour: u32) -> String {
        format!(
            "domain: d\ndescriptors:\n  - key: path\n    value: /login\n    rate_limit: {{unit: hour, requests_per_unit: {per_hour}}}\n  - key: path\n    value: /keep\n    rate_limit: {{unit: day, requests_per_unit: 5}}\n"
        )
    }

    const WITHOUT_LOGIN: &str = "domain: d\ndescriptors:\n  - key: path\n    value: /keep\n    rate_limit: {unit: day, requests_per_unit: 5}\n";

    fn algorithm(rules: &RuleSet, value: &str) -> AnyAlgorithm {
        rules
            .rules("d")
            .find(|r| r.path[0].1.as_deref() == Some(value))
            .and_then(|r| r.limits[0].algorithm)
            .expect("the rule and its algorithm")
    }

    #[test]
    fn a_limit_missing_from_one_load_carries_from_its_last_algorithm_when_it_returns() {
        let (ten, twenty) = (rules(&login(10)), rules(&login(20)));
        let mut history = LimitHistory::new(&ten);
        assert!(history.carries(&rules(WITHOUT_LOGIN)).is_empty());
        assert_eq!(
            history.carries(&twenty),
            [(algorithm(&ten, "/login"), algorithm(&twenty, "/login"))]
        );
    }

    #[test]
    fn every_recent_algorithm_is_carried_from_and_a_new_window_carries_nothing() {
        let (ten, two, twenty) = (rules(&login(10)), rules(&login(2)), rules(&login(20)));
        let mut history = LimitHistory::new(&ten);
        history.carries(&two);
        let carries = history.carries(&twenty);
        assert!(carries.contains(&(algorithm(&ten, "/login"), algorithm(&twenty, "/login"))));
        assert!(carries.contains(&(algorithm(&two, "/login"), algorithm(&twenty, "/login"))));
        let per_day = rules(&login(10).replace("unit: hour", "unit: day"));
        assert!(
            history.carries(&per_day).is_empty(),
            "another window, another counter"
        );
    }

    #[test]
    fn a_limit_whose_algorithms_have_no_store_is_forgotten() {
        let mut history = LimitHistory::new(&rules(&login(10)));
        assert_eq!(history.len(), 2);
        history.carries(&rules(WITHOUT_LOGIN));
        let keep = algorithm(&rules(WITHOUT_LOGIN), "/keep");
        history.forget_unless(|a| *a == keep);
        assert_eq!(history.len(), 1);
        for _ in 0..2 * MAX_ALGORITHMS {
            history.carries(&rules(&login(7)));
        }
        assert_eq!(history.len(), 2);
    }
}
