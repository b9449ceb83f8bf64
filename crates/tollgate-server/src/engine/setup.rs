//! [`Engine`]: the rules, the counters (in memory, or a shared store) and the clock it answers from; how it is built, rebuilt on a reload so counts carry on, and what it reports about itself.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use tollgate_core::{AnyAlgorithm, Clock, Timestamp};
use tollgate_rules::RuleSet;
use tollgate_store::{CountersUsage, MemoryCounters};

use super::limit_history::LimitHistory;
use super::options::EngineOptions;
use crate::store::RemoteStore;

/// Answers RLS requests from a rule set, counters (in memory or Redis) and a clock.
pub struct Engine<C: Clock> {
    pub(super) rules: Arc<RuleSet>,
    pub(super) domains: HashSet<String, foldhash::fast::RandomState>,
    pub(super) memory: MemoryCounters,
    /// The algorithms each limit was counted under, shared by every engine a reload makes from this one.
    history: Arc<parking_lot::Mutex<LimitHistory>>,
    pub(super) remote: Option<Arc<RemoteStore>>,
    /// The shared store's rule generation this engine plans in (see
    /// [`RemoteStore::check_batch`]); 0 in memory.
    pub(super) lease_generation: u64,
    pub(super) options: EngineOptions,
    pub(super) clock: C,
}

impl<C: Clock> fmt::Debug for Engine<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("domains", &self.domains.len())
            .field("stores", &self.memory.store_count())
            .field("lazy_stores", &self.memory.lazy_store_count())
            .field("remote", &self.remote.is_some())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Engine<C> {
    /// An engine for `rules` with in-memory counters, a fresh store for each algorithm they use.
    pub fn new(rules: Arc<RuleSet>, options: EngineOptions, clock: C) -> Self {
        let memory = MemoryCounters::new(
            rule_algorithms(&rules),
            options.store_config,
            options.override_store_config,
            options.max_override_stores,
        )
        .with_max_retired_stores(options.max_retired_stores);
        let history = Arc::new(parking_lot::Mutex::new(LimitHistory::new(&rules)));
        Engine::build(rules, options, clock, memory, history, None)
    }

    /// An engine for `rules` whose counters live in a shared store (Redis).
    pub fn with_remote(
        rules: Arc<RuleSet>,
        options: EngineOptions,
        clock: C,
        remote: Arc<RemoteStore>,
    ) -> Self {
        let memory = MemoryCounters::new([], options.store_config, options.store_config, 1);
        let history = Arc::default();
        let generation = remote.lease_generation();
        Engine::build(rules, options, clock, memory, history, Some(remote))
            .in_generation(generation)
    }

    /// The same engine planning in the shared store's rule `generation`.
    fn in_generation(mut self, generation: u64) -> Self {
        self.lease_generation = generation;
        self
    }

    fn build(
        rules: Arc<RuleSet>,
        options: EngineOptions,
        clock: C,
        memory: MemoryCounters,
        history: Arc<parking_lot::Mutex<LimitHistory>>,
        remote: Option<Arc<RemoteStore>>,
    ) -> Self {
        let domains: HashSet<String, _> = rules.domains().map(str::to_owned).collect();
        Engine {
            rules,
            domains,
            memory,
            history,
            remote,
            lease_generation: 0,
            options,
            clock,
        }
    }

    /// An engine for `rules` that keeps this one's stores for every algorithm
    /// both use (and its override stores, and its shared store), so unchanged
    /// limits keep counting.
    ///
    /// The stores of algorithms `rules` no longer use are retired (up to
    /// [`EngineOptions::max_retired_stores`], each until its keys are all
    /// fresh) and taken back when a later reload brings the algorithm back,
    /// so a rule missing from one load does not start again from zero. A
    /// limit whose figures changed carries its counts from every algorithm
    /// it was counted under recently (see `LimitHistory`), even when a
    /// load in between lacked it, the most used count winning.
    ///
    /// With a shared store, the quick-deny cache is emptied, the
    /// outstanding leases end at once and are given back, and the new
    /// engine plans in the next rule generation: no lease taken before is
    /// spent after this call, by this engine's requests in flight either.
    pub fn with_rules(&self, rules: Arc<RuleSet>) -> Self
    where
        C: Clone,
    {
        let memory = if self.remote.is_some() {
            MemoryCounters::new([], self.options.store_config, self.options.store_config, 1)
        } else {
            let mut history = self.history.lock();
            let memory = self.memory.with_algorithms_carrying(
                rule_algorithms(&rules),
                &history.carries(&rules),
                self.options.store_config,
                self.clock.now(),
            );
            history.forget_unless(|algorithm| memory.holds_store(algorithm));
            memory
        };
        let generation = self
            .remote
            .as_ref()
            .map_or(0, |remote| remote.after_reload(self.clock.now()));
        Engine::build(
            rules,
            self.options,
            self.clock.clone(),
            memory,
            Arc::clone(&self.history),
            self.remote.clone(),
        )
        .in_generation(generation)
    }

    /// The rules this engine answers from.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// The options it was built with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// How many in-memory rule stores it holds (one per distinct algorithm; 0 on Redis).
    pub fn store_count(&self) -> usize {
        self.memory.store_count()
    }

    /// How many override stores it holds.
    pub fn override_store_count(&self) -> usize {
        self.memory.lazy_store_count()
    }

    /// What the in-memory stores hold now (rule, override and retired stores), for gauges.
    pub fn memory_usage(&self) -> CountersUsage {
        self.memory.usage()
    }

    /// The time on the engine's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The shared store, when counters live in Redis.
    pub fn remote(&self) -> Option<&Arc<RemoteStore>> {
        self.remote.as_ref()
    }
}

/// Every algorithm the rules use.
fn rule_algorithms(rules: &RuleSet) -> Vec<AnyAlgorithm> {
    let mut algorithms = Vec::new();
    for domain in rules.domains() {
        for rule in rules.rules(domain) {
            for algorithm in rule.limits.iter().filter_map(|l| l.algorithm) {
                if !algorithms.contains(&algorithm) {
                    algorithms.push(algorithm);
                }
            }
        }
    }
    algorithms
}

/// An engine is shared between threads.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Engine<tollgate_core::ManualClock>>();
    shareable::<Engine<tollgate_core::CoarseClock>>();
};
