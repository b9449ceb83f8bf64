//! A request turned into counters: each descriptor's work (an answer already, or counters to check) and the counters with their keys, hash tags, lease periods and stagger offsets.

use std::time::Duration;

use smallvec::SmallVec;

use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm, Clock};
use tollgate_protocol::rls::model::{CurrentLimit, DescriptorStatus, RateLimitRequest};
use tollgate_rules::{Applied, Rule};
use tollgate_store::{AsCounter, Counter};

use super::error::EngineError;
use super::overrides::{override_key, override_limit};
use super::setup::Engine;
use super::upstream_keys::{keeps_own_keys, upstream_key_of};

/// What one descriptor needs: an answer already, or counters to check.
pub(super) enum Work<'r> {
    Done(DescriptorStatus),
    Rule {
        rule: &'r Rule,
        /// This descriptor's counters are `plan.counters[first..first + count]`.
        first: usize,
        count: usize,
    },
    Override {
        limit: CurrentLimit,
        first: usize,
    },
}

/// One counter to check, owning its key.
pub(super) struct PlannedCounter {
    pub(super) group: u32,
    pub(super) limit_index: usize,
    pub(super) key: Vec<u8>,
    pub(super) tag: u64,
    pub(super) algorithm: AnyAlgorithm,
    pub(super) hits: u64,
    pub(super) give_back: bool,
    /// The lease period of its rule in a shared store (zero: exact).
    pub(super) lease: Duration,
    /// Its rule is in the shares mode (`shares: true`) in a shared store.
    pub(super) shares: bool,
    /// A staggered fixed window's offset (nanoseconds; 0 for the rest).
    pub(super) phase_ns: u64,
}

impl AsCounter for PlannedCounter {
    #[inline]
    fn as_counter(&self) -> Counter<'_> {
        Counter {
            group: self.group,
            key: &self.key,
            tag: self.tag,
            algorithm: self.algorithm,
            hits: self.hits,
            give_back: self.give_back,
            phase_ns: self.phase_ns,
        }
    }
}

/// A request turned into counters: the descriptors' work, in request order.
pub(super) struct Plan<'r> {
    pub(super) work: Vec<Work<'r>>,
    pub(super) counters: Vec<PlannedCounter>,
}

impl Clone for PlannedCounter {
    fn clone(&self) -> Self {
        PlannedCounter {
            key: self.key.clone(),
            ..*self
        }
    }
}

impl<C: Clock> Engine<C> {
    /// Validates `request` and turns it into counters to check.
    pub(super) fn plan<'r>(&'r self, request: &RateLimitRequest) -> Result<Plan<'r>, EngineError> {
        validate(request)?;
        let overrides = request
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| d.limit.map(|o| override_limit(i, &o)).transpose())
            .collect::<Result<SmallVec<[_; 4]>, _>>()?;
        let domain = request.domain.as_str();
        let known_domain = self.domains.contains(domain);
        let applied = if known_domain {
            // Descriptors with an override skip matching, so their rules neither apply nor replace.
            let entries: SmallVec<[&[(String, String)]; 4]> = request
                .descriptors
                .iter()
                .map(|d| {
                    if d.limit.is_some() {
                        &[][..]
                    } else {
                        d.entries.as_slice()
                    }
                })
                .collect();
            self.rules.resolve(domain, &entries)
        } else {
            Vec::new()
        };
        let default_hits = u64::from(request.hits_addend.max(1));
        let default_lease = self
            .remote
            .as_ref()
            .map_or(Duration::ZERO, |r| r.lease_period());
        // Upstream's keys name the window by this instance's clock, as
        // upstream's do by its pod's.
        let upstream_now_s = self
            .remote
            .as_ref()
            .filter(|r| r.upstream_keys())
            .map(|_| self.clock.now().as_nanos() / 1_000_000_000);
        let mut plan = Plan {
            work: Vec::with_capacity(request.descriptors.len()),
            counters: Vec::new(),
        };
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let hits = descriptor.hits_addend.unwrap_or(default_hits);
            let group = u32::try_from(i).unwrap_or(u32::MAX);
            let give_back = descriptor.is_negative_hits;
            let work = if !known_domain {
                Work::Done(DescriptorStatus::no_limit())
            } else if let Some(Some((algorithm, limit))) = overrides.get(i) {
                let key = upstream_now_s
                    .and_then(|now_s| {
                        let entries = descriptor.entries.iter();
                        upstream_key_of(algorithm, domain, entries.map(pair), now_s)
                    })
                    .unwrap_or_else(|| override_key(domain, &descriptor.entries, limit));
                let tag = descriptor_tag(
                    domain,
                    descriptor
                        .entries
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                );
                plan.counters.push(PlannedCounter {
                    group,
                    limit_index: 0,
                    key,
                    tag,
                    algorithm: *algorithm,
                    hits,
                    give_back,
                    lease: Duration::ZERO,
                    shares: false,
                    phase_ns: 0,
                });
                Work::Override {
                    limit: limit.clone(),
                    first: plan.counters.len() - 1,
                }
            } else {
                match applied.get(i) {
                    Some(Applied::Limited {
                        rule,
                        limit_indices,
                    }) => {
                        let first = plan.counters.len();
                        let tag = descriptor_tag(
                            domain,
                            descriptor
                                .entries
                                .iter()
                                .enumerate()
                                .map(|(level, (k, v))| (k.as_str(), rule.counter_value(level, v))),
                        );
                        for &limit_index in limit_indices.iter() {
                            let Some(algorithm) =
                                rule.limits.get(limit_index).and_then(|l| l.algorithm)
                            else {
                                continue;
                            };
                            // Upstream's key, for a rule upstream could
                            // write (one limit, not staggered): exact, as
                            // upstream counts it.
                            let upstream = upstream_now_s
                                .filter(|_| keeps_own_keys(rule).is_none())
                                .and_then(|now_s| {
                                    let entries = descriptor.entries.iter().enumerate().map(
                                        |(level, (k, v))| {
                                            (k.as_str(), rule.counter_value(level, v))
                                        },
                                    );
                                    upstream_key_of(&algorithm, domain, entries, now_s)
                                });
                            if let Some(key) = upstream {
                                plan.counters.push(PlannedCounter {
                                    group,
                                    limit_index,
                                    key,
                                    tag,
                                    algorithm,
                                    hits,
                                    give_back,
                                    lease: Duration::ZERO,
                                    shares: false,
                                    phase_ns: 0,
                                });
                                continue;
                            }
                            // A staggered window stays exact: a lease ends
                            // with the window, and each key's window ends
                            // at its own instant.
                            let (phase_ns, lease) = match algorithm {
                                AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(window))
                                    if rule.stagger =>
                                {
                                    (window.stagger_phase(tag), Duration::ZERO)
                                }
                                _ => (0, rule.lease.unwrap_or(default_lease)),
                            };
                            plan.counters.push(PlannedCounter {
                                group,
                                limit_index,
                                key: rule.counter_key(domain, &descriptor.entries, limit_index),
                                tag,
                                algorithm,
                                hits,
                                give_back,
                                lease,
                                shares: rule.shares,
                                phase_ns,
                            });
                        }
                        Work::Rule {
                            rule,
                            first,
                            count: plan.counters.len() - first,
                        }
                    }
                    Some(Applied::Unlimited(_)) => Work::Done(DescriptorStatus::unlimited()),
                    Some(Applied::NoLimit) | None => Work::Done(DescriptorStatus::no_limit()),
                }
            };
            plan.work.push(work);
        }
        Ok(plan)
    }
}

/// An entry as two string slices.
fn pair((k, v): &(String, String)) -> (&str, &str) {
    (k.as_str(), v.as_str())
}

/// The hash a descriptor's counters share (their cluster hash tag), from
/// the entries that name its counters.
fn descriptor_tag<'a>(domain: &str, entries: impl Iterator<Item = (&'a str, &'a str)>) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3Default::new();
    hasher.update(&(domain.len() as u64).to_be_bytes());
    hasher.update(domain.as_bytes());
    for (k, v) in entries {
        hasher.update(&(k.len() as u64).to_be_bytes());
        hasher.update(k.as_bytes());
        hasher.update(&(v.len() as u64).to_be_bytes());
        hasher.update(v.as_bytes());
    }
    hasher.digest()
}

/// Rejects what upstream rejects, and what no rule could ever match.
fn validate(request: &RateLimitRequest) -> Result<(), EngineError> {
    let invalid = |message: String| Err(EngineError::InvalidArgument(message));
    if request.domain.is_empty() {
        return invalid("rate limit domain must not be empty".to_owned());
    }
    if request.descriptors.is_empty() {
        return invalid("rate limit descriptor list must not be empty".to_owned());
    }
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.entries.is_empty() {
            return invalid(format!("descriptors[{i}].entries must not be empty"));
        }
        if let Some(j) = descriptor.entries.iter().position(|(k, _)| k.is_empty()) {
            return invalid(format!(
                "descriptors[{i}].entries[{j}].key must not be empty"
            ));
        }
    }
    Ok(())
}
