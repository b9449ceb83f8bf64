//! A quota bucket id read as a descriptor of the stream's domain, and what the rules say about it.

use std::collections::BTreeMap;
use std::time::Duration;

use tollgate_rules::{Applied, RuleSet};

/// What a bucket's Envoys are told to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No rule, an `unlimited` rule or a shadow-mode rule: allow every request.
    AllowAll,
    /// A rule whose limit is 0 requests: deny every request.
    DenyAll,
    /// A rule's rate, shared among the Envoys reporting the bucket.
    Share(Rate),
}

/// One bucket's budget: `requests` per `window`, of which `burst` may come at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// The counter the budget is kept for (the rule's counter key for this bucket).
    pub counter: Vec<u8>,
    /// Requests per window.
    pub requests: u64,
    /// The window.
    pub window: Duration,
    /// Requests that may come at once (the limit's `burst`, else `requests`).
    pub burst: u64,
}

impl Rate {
    /// How long the counter remembers what was spent: the window, or, for
    /// a burst larger than the rate, the time a spent burst takes to refill
    /// (`W × burst / requests`). Spend older than that has left every
    /// algorithm's count: a fixed window has reset, a sliding window no
    /// longer counts it, a token bucket has refilled.
    pub fn memory(&self) -> Duration {
        let refill =
            self.window.as_nanos() * u128::from(self.burst) / u128::from(self.requests.max(1));
        let nanos = refill.max(self.window.as_nanos());
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// Why a bucket id was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketError {
    /// The id has no entries.
    Empty,
    /// More entries than a descriptor may have.
    TooManyEntries {
        /// Entries in the id.
        entries: usize,
        /// The most allowed.
        max: usize,
    },
    /// An entry with an empty key.
    EmptyKey,
}

impl std::fmt::Display for BucketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketError::Empty => write!(f, "a bucket id has no entries"),
            BucketError::TooManyEntries { entries, max } => write!(
                f,
                "a bucket id has {entries} entries, more than --max-descriptor-entries ({max})"
            ),
            BucketError::EmptyKey => write!(f, "a bucket id has an entry with an empty key"),
        }
    }
}

/// The descriptor of a bucket id: its entries sorted by key (byte order).
pub fn descriptor<'a>(
    bucket: impl IntoIterator<Item = (&'a String, &'a String)>,
    max_entries: usize,
) -> Result<Vec<(&'a str, &'a str)>, BucketError> {
    let sorted: BTreeMap<&str, &str> = bucket
        .into_iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if sorted.is_empty() {
        return Err(BucketError::Empty);
    }
    if sorted.len() > max_entries {
        return Err(BucketError::TooManyEntries {
            entries: sorted.len(),
            max: max_entries,
        });
    }
    if sorted.contains_key("") {
        return Err(BucketError::EmptyKey);
    }
    Ok(sorted.into_iter().collect())
}

/// What `rules` say about the bucket `entries` of `domain`.
///
/// With several limits, the one with the smallest rate per second is
/// shared (the others could only allow more).
pub fn policy(rules: &RuleSet, domain: &str, entries: &[(&str, &str)]) -> Policy {
    let applied = rules.resolve(domain, &[entries]);
    match applied.into_iter().next() {
        None | Some(Applied::NoLimit) | Some(Applied::Unlimited(_)) => Policy::AllowAll,
        Some(Applied::Limited {
            rule,
            limit_indices,
        }) => {
            if rule.shadow_mode {
                return Policy::AllowAll;
            }
            let rates = limit_indices.into_iter().filter_map(|i| {
                let limit = &rule.limits[i];
                let window = limit.window?.duration();
                Some((i, u64::from(limit.requests_per_unit), window, limit.burst))
            });
            let tightest = rates.min_by(|a, b| {
                // a.requests / a.window < b.requests / b.window, without division.
                (u128::from(a.1) * b.2.as_nanos()).cmp(&(u128::from(b.1) * a.2.as_nanos()))
            });
            match tightest {
                None => Policy::AllowAll,
                Some((_, 0, _, _)) => Policy::DenyAll,
                Some((index, requests, window, burst)) => Policy::Share(Rate {
                    counter: rule.counter_key(domain, entries, index),
                    requests,
                    window,
                    burst: burst.unwrap_or(requests).max(1),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::Path;
    use tollgate_rules::{LoadOptions, load_sources};

    fn rules(yaml: &str) -> RuleSet {
        let loaded = load_sources([(Path::new("q.yaml"), yaml)], LoadOptions::default());
        assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
        loaded.rule_set
    }

    fn bucket(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_bucket_is_a_descriptor_in_key_order_matched_by_the_rules() {
        let rules = rules(
            "domain: q\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 10}\n  - key: open\n    rate_limit: {unlimited: true}\n  - key: shadow\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: none\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
        );
        let id = bucket(&[("b", "2"), ("a", "1")]);
        let entries = descriptor(&id, 8).unwrap();
        assert_eq!(entries, vec![("a", "1"), ("b", "2")]);
        let Policy::Share(rate) = policy(&rules, "q", &entries) else {
            panic!("a limited rule is shared");
        };
        assert_eq!(
            (rate.requests, rate.window, rate.burst),
            (10, Duration::from_secs(1), 10)
        );
        let other = bucket(&[("a", "1"), ("b", "3")]);
        let Policy::Share(other) = policy(&rules, "q", &descriptor(&other, 8).unwrap()) else {
            panic!("shared");
        };
        assert_ne!(rate.counter, other.counter, "each value its own budget");
        for (pairs, expected) in [
            (&[("open", "x")][..], Policy::AllowAll),
            (&[("shadow", "x")][..], Policy::AllowAll),
            (&[("none", "x")][..], Policy::DenyAll),
            (&[("unknown", "x")][..], Policy::AllowAll),
        ] {
            let id = bucket(pairs);
            assert_eq!(
                policy(&rules, "q", &descriptor(&id, 8).unwrap()),
                expected,
                "{pairs:?}"
            );
        }
        assert_eq!(policy(&rules, "other", &[("a", "1")]), Policy::AllowAll);
    }

    #[test]
    fn bad_bucket_ids_are_refused_naming_the_problem() {
        assert_eq!(descriptor(&bucket(&[]), 8), Err(BucketError::Empty));
        assert_eq!(
            descriptor(&bucket(&[("", "x")]), 8),
            Err(BucketError::EmptyKey)
        );
        let wide = bucket(&[("a", "1"), ("b", "2"), ("c", "3")]);
        assert_eq!(
            descriptor(&wide, 2).unwrap_err().to_string(),
            "a bucket id has 3 entries, more than --max-descriptor-entries (2)"
        );
    }
}
