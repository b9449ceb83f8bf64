//! The decision engine: RLS v3 requests in, one status per descriptor out.
//!
//! It decides on the protocol crate's plain-Rust RLS model
//! ([`tollgate_protocol::rls::model`]), so the gRPC and HTTP layers only map
//! their wire types onto it. [`Engine::should_rate_limit`] answers with
//! envoyproxy/ratelimit's semantics:
//!
//! * An unknown domain or an unmatched descriptor is OK with no limit and
//!   `limit_remaining` 0; an `unlimited` rule is OK with `limit_remaining`
//!   `u32::MAX` and touches no counter. `replaces` is resolved across the
//!   whole request ([`RuleSet::resolve`]).
//! * Hits: the descriptor's `hits_addend` when present (0 checks without
//!   consuming), else the request's `hits_addend`, where 0 means 1.
//!   `is_negative_hits` gives the hits back instead of consuming them, and is
//!   always OK.
//! * A descriptor `limit` override counts in a fixed window of
//!   `requests_per_unit` per `unit × unit_multiplier` (only in a known
//!   domain, as upstream), with no name and no shadow mode.
//! * Every limit of the matched rule is checked; the descriptor is
//!   OVER_LIMIT when any of them denies. The status reports the most
//!   restrictive limit: a denying one (one that can never pass first, then
//!   the longest `retry_after`), else the one with the least remaining
//!   (the first on ties).
//! * When one limit denies, what the other limits of the same descriptor
//!   consumed in this call is given back, so a denied request costs nothing
//!   against them. Fixed-window limits are the exception: like upstream they
//!   count denied requests, so they keep the hits (and a fixed window that
//!   denies keeps them too). Between the check and the give-back another
//!   call may see the hits as consumed; it errs on the strict side.
//! * A `shadow_mode` rule that is over the limit reports OK (remaining stays
//!   0, `current_limit` kept, no `retry_after`); global shadow mode makes the
//!   overall code OK and leaves the statuses as they are. The overall code
//!   is OVER_LIMIT when any status is, and never UNKNOWN.
//!
//! A request is first *planned*: every counter it touches (key, algorithm,
//! hits, and its descriptor as the all-or-nothing group). The counters then
//! go to the store behind the [`CounterStore`](tollgate_store::CounterStore)
//! interface in one batch, and the decisions become statuses.
//!
//! * In memory ([`Engine::new`]), the batch is [`MemoryCounters`]: one
//!   `MemoryStore` per distinct algorithm, built when the engine is, so the
//!   hot path takes no lock; [`Engine::with_rules`] keeps the stores of
//!   algorithms that still exist, so counters survive a reload, and keeps
//!   the stores of algorithms that went away for a while in case they come
//!   back (a rule missing from a half-written file). A limit whose rate
//!   alone changed (same algorithm and window) is another algorithm with
//!   its own store, and its counters are copied into it, re-encoded, so the
//!   count carries on as upstream's does (its keys ignore the limit); another
//!   window or algorithm starts from a fresh counter. Overrides create their
//!   stores on first use, under a read-mostly lock.
//! * In Redis ([`Engine::with_remote`], answered by [`Engine::decide`]), the
//!   batch is one script call; when it fails, each rule's `on_store_error`
//!   answers (see [`crate::store`]). A rule with a lease period (its
//!   `lease`, else `--lease-period`) is answered from this instance's quota
//!   leases when they cover the whole request, with no call at all.
//!   Descriptor `limit` overrides are always exact.

use std::collections::HashSet;
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tollgate_runtime::trace_context;
use tracing::Instrument;

use tollgate_core::duration::ceil_seconds;
use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, Clock, Decision, FixedWindow, Outcome, Timestamp, Unit,
};
use tollgate_protocol::rls::model::{
    Code, CurrentLimit, DescriptorStatus, LimitOverride, RateLimitRequest, RateLimitResponse,
};
use tollgate_rules::{Applied, Limit, Rule, RuleSet, StoreErrorPolicy, WindowLength};
use tollgate_store::{
    AsCounter, Counter, CountersUsage, DEFAULT_MAX_RETIRED_STORES, MemoryCounters, StoreConfig,
};

use crate::store::RemoteStore;

mod limit_history;
mod overrides;
mod plan;
mod status;

use limit_history::LimitHistory;
use overrides::*;
use plan::*;
use status::*;

/// Why a request cannot be answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// The request is malformed; the message says which field and why.
    InvalidArgument(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::InvalidArgument(message) => f.write_str(message),
        }
    }
}

impl Error for EngineError {}

/// How an [`Engine`] runs: shadow mode and store sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// Answer OK overall whatever the statuses say (upstream's `SHADOW_MODE`).
    pub global_shadow_mode: bool,
    /// Treat every descriptor as `quota_mode` (upstream's `QUOTA_MODE`).
    pub global_quota_mode: bool,
    /// When a descriptor of a request is over its limit, give back what the
    /// request's other descriptors consumed, so a rejected request spends no
    /// other quota (upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub stop_increment_when_over_limit: bool,
    /// The size of each rule store (one per distinct algorithm).
    pub store_config: StoreConfig,
    /// The size of each store created for descriptor `limit` overrides.
    pub override_store_config: StoreConfig,
    /// The most override stores kept (one per distinct override limit).
    /// When one more is needed, the store used longest ago is dropped only
    /// if every key in it is fresh; otherwise the new limit's requests are
    /// denied until one is. This bounds memory against callers sending many
    /// distinct limits, and no counter in use ever starts again.
    pub max_override_stores: usize,
    /// The most stores kept after a reload left their algorithm without a
    /// rule, so a rule that drops out (a half-written file) and comes back
    /// keeps its counts; each is dropped once all its keys are fresh. Each
    /// holds at most `store_config.max_keys` keys.
    pub max_retired_stores: usize,
}

impl Default for EngineOptions {
    /// No shadow or quota mode, every descriptor counted, default-sized rule stores, 100 000-key override stores, at most 1024 of them,
    /// and up to [`DEFAULT_MAX_RETIRED_STORES`] retired stores.
    fn default() -> Self {
        EngineOptions {
            global_shadow_mode: false,
            global_quota_mode: false,
            stop_increment_when_over_limit: false,
            store_config: StoreConfig::default(),
            override_store_config: StoreConfig::with_max_keys(100_000),
            max_override_stores: 1024,
            max_retired_stores: DEFAULT_MAX_RETIRED_STORES,
        }
    }
}

/// Answers RLS requests from a rule set, counters (in memory or Redis) and a clock.
pub struct Engine<C: Clock> {
    rules: Arc<RuleSet>,
    domains: HashSet<String>,
    memory: MemoryCounters,
    /// The algorithms each limit was counted under, shared by every engine a reload makes from this one.
    history: Arc<parking_lot::Mutex<LimitHistory>>,
    remote: Option<Arc<RemoteStore>>,
    /// The shared store's rule generation this engine plans in (see
    /// [`RemoteStore::check_batch`]); 0 in memory.
    lease_generation: u64,
    options: EngineOptions,
    clock: C,
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

/// With tracing on, the rule match as an event of the check's span: how
/// many counters the matched rules put to the store (no descriptor values).
fn trace_matched(plan: &Plan<'_>) {
    if trace_context::enabled() {
        tracing::info!(
            target: trace_context::TARGET,
            descriptors = plan.work.len(),
            counters = plan.counters.len(),
            "rules matched"
        );
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
        let domains: HashSet<String> = rules.domains().map(str::to_owned).collect();
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
    /// it was counted under recently (see [`LimitHistory`]), even when a
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

    /// Decides one request with in-memory counters: one status per descriptor, and the overall code.
    ///
    /// On an engine with a shared store, use [`Engine::decide`]; this
    /// method then decides with the `on_store_error` of each rule as if the
    /// store had failed.
    pub fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, EngineError> {
        let now = self.clock.now();
        let plan = self.plan(request)?;
        trace_matched(&plan);
        if self.remote.is_some() {
            return Ok(self.fall_back(plan, now));
        }
        let mut decisions = Vec::with_capacity(plan.counters.len());
        self.memory.check_now(&plan.counters, now, &mut decisions);
        let refunds = self.stopped_increments(&plan, &decisions);
        if !refunds.is_empty() {
            let mut refunded = Vec::with_capacity(refunds.len());
            self.memory.check_now(&refunds, now, &mut refunded);
            apply_refunds(&plan, &mut decisions, &refunds, &refunded);
        }
        Ok(self.finish(plan, &decisions))
    }

    /// With [`EngineOptions::stop_increment_when_over_limit`], the give-backs
    /// of what the descriptors that passed consumed, when another descriptor
    /// of the request is over its limit (their group index says which
    /// counter each undoes); empty otherwise.
    fn stopped_increments(&self, plan: &Plan<'_>, decisions: &[Decision]) -> Vec<PlannedCounter> {
        if !self.options.stop_increment_when_over_limit {
            return Vec::new();
        }
        let denied_groups: Vec<u32> = plan
            .counters
            .iter()
            .zip(decisions)
            .filter(|(c, d)| !c.give_back && !d.is_allowed())
            .map(|(c, _)| c.group)
            .collect();
        if denied_groups.is_empty() {
            return Vec::new();
        }
        plan.counters
            .iter()
            .zip(decisions)
            .enumerate()
            .filter(|(_, (c, d))| {
                d.is_allowed() && !c.give_back && c.hits > 0 && !denied_groups.contains(&c.group)
            })
            .map(|(i, (c, _))| PlannedCounter {
                group: u32::try_from(i).unwrap_or(u32::MAX),
                give_back: true,
                key: c.key.clone(),
                ..*c
            })
            .collect()
    }

    /// Decides one request through whichever store holds the counters.
    ///
    /// In memory this is [`Engine::should_rate_limit`] (the future is ready
    /// at once); on Redis all the request's counters go in one script call,
    /// and a store error is answered per rule by its `on_store_error`.
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, EngineError> {
        Ok(match self.decide_in_store_or_plan(request).await? {
            Ok(response) => response,
            Err(plan) => self.fall_back(plan, self.clock.now()),
        })
    }

    /// [`Engine::decide`], but `None` where the store failed instead of each
    /// rule's `on_store_error` answer: for a caller that must know the store
    /// counted (the quota service paying for shares).
    pub async fn decide_in_store(
        &self,
        request: &RateLimitRequest,
    ) -> Result<Option<RateLimitResponse>, EngineError> {
        Ok(self.decide_in_store_or_plan(request).await?.ok())
    }

    /// The store's answer to `request`, or, where the store failed, the
    /// request's plan for the caller to answer without it.
    async fn decide_in_store_or_plan<'a>(
        &'a self,
        request: &'a RateLimitRequest,
    ) -> Result<Result<RateLimitResponse, Plan<'a>>, EngineError> {
        let Some(remote) = &self.remote else {
            return self.should_rate_limit(request).map(Ok);
        };
        let plan = self.plan(request)?;
        trace_matched(&plan);
        if plan.counters.is_empty() {
            return Ok(Ok(self.finish(plan, &[])));
        }
        let counters: Vec<Counter<'_>> = plan
            .counters
            .iter()
            .map(PlannedCounter::as_counter)
            .collect();
        let periods: Vec<Duration> = plan.counters.iter().map(|c| c.lease).collect();
        let mut decisions = Vec::with_capacity(counters.len());
        // With tracing on, the store call is a child span of the check; a
        // fallback shows as the `on_store_error` event inside it.
        let store_span = if trace_context::enabled() {
            tracing::info_span!(
                target: trace_context::TARGET,
                "store",
                store = "redis",
                counters = counters.len()
            )
        } else {
            tracing::Span::none()
        };
        let checked = remote
            .check_batch(
                &self.clock,
                &counters,
                &periods,
                self.lease_generation,
                &mut decisions,
            )
            .instrument(store_span.clone())
            .await;
        if let Err(error) = &checked {
            store_span.in_scope(|| {
                tracing::info!(target: trace_context::TARGET, %error, "on_store_error");
            });
        }
        match checked {
            Ok(()) => {
                let refunds = self.stopped_increments(&plan, &decisions);
                if !refunds.is_empty() {
                    let refund_counters: Vec<Counter<'_>> =
                        refunds.iter().map(PlannedCounter::as_counter).collect();
                    let mut refunded = Vec::with_capacity(refunds.len());
                    // A failed give-back leaves the hits spent: the strict side.
                    let no_leases = vec![Duration::ZERO; refund_counters.len()];
                    if remote
                        .check_batch(
                            &self.clock,
                            &refund_counters,
                            &no_leases,
                            self.lease_generation,
                            &mut refunded,
                        )
                        .await
                        .is_ok()
                    {
                        apply_refunds(&plan, &mut decisions, &refunds, &refunded);
                    }
                }
                Ok(Ok(self.finish(plan, &decisions)))
            }
            Err(_) => Ok(Err(plan)),
        }
    }

    /// The response from the decisions of every planned counter.
    fn finish(&self, plan: Plan<'_>, decisions: &[Decision]) -> RateLimitResponse {
        let quota = self.quota_classes(&plan);
        let statuses: Vec<DescriptorStatus> = plan
            .work
            .into_iter()
            .map(|work| match work {
                Work::Done(status) => status,
                Work::Override { limit, first } => match decisions.get(first) {
                    Some(d) => status_of(d, Some(limit)),
                    None => DescriptorStatus::no_limit(),
                },
                Work::Rule { rule, first, count } => {
                    let counters = &plan.counters[first..first + count];
                    let decided = decisions.get(first..first + count).unwrap_or(&[]);
                    rule_status(rule, counters, decided)
                }
            })
            .collect();
        let mut response = self.respond(statuses, &quota);
        if response.overall == Code::Ok {
            // A shaper admitted it with a wait: the longest one holds the request.
            response.delay = decisions
                .iter()
                .filter(|d| d.is_allowed())
                .map(Decision::delay)
                .max()
                .unwrap_or_default();
        }
        response
    }

    /// How each descriptor counts towards the overall code (upstream's quota mode).
    fn quota_classes(&self, plan: &Plan<'_>) -> Vec<QuotaClass> {
        let global = self.options.global_quota_mode;
        plan.work
            .iter()
            .map(|work| match work {
                Work::Done(status) if *status == DescriptorStatus::unlimited() => {
                    QuotaClass::Uncounted
                }
                Work::Rule { rule, .. } if rule.quota_mode => QuotaClass::Quota,
                _ if global => QuotaClass::Quota,
                _ => QuotaClass::Limit,
            })
            .collect()
    }

    /// The response when the shared store failed: each rule's `on_store_error`.
    fn fall_back(&self, plan: Plan<'_>, now: Timestamp) -> RateLimitResponse {
        let quota = self.quota_classes(&plan);
        let remote = self.remote.as_ref();
        let mut statuses = Vec::with_capacity(plan.work.len());
        for work in plan.work {
            let status = match work {
                Work::Done(status) => status,
                Work::Override { limit, .. } => {
                    count_fallback(remote, StoreErrorPolicy::Allow, now);
                    allowed_without_store(Some(limit))
                }
                Work::Rule { rule, first, count } => {
                    let counters = &plan.counters[first..first + count];
                    count_fallback(remote, rule.on_store_error, now);
                    match rule.on_store_error {
                        StoreErrorPolicy::Allow => allowed_without_store(
                            counters
                                .first()
                                .and_then(|c| rule.limits.get(c.limit_index))
                                .and_then(current_limit),
                        ),
                        StoreErrorPolicy::Deny => denied_without_store(rule, counters),
                        StoreErrorPolicy::Local => self.decide_locally(rule, counters, now),
                    }
                }
            };
            statuses.push(status);
        }
        self.respond(statuses, &quota)
    }

    /// Decides a rule's counters in this process with this instance's share of each limit.
    fn decide_locally(
        &self,
        rule: &Rule,
        counters: &[PlannedCounter],
        now: Timestamp,
    ) -> DescriptorStatus {
        let Some(remote) = &self.remote else {
            return allowed_without_store(None);
        };
        let instances = remote.expected_instances();
        let shares: Vec<PlannedCounter> = counters
            .iter()
            .filter_map(|c| {
                let share = rule.limits.get(c.limit_index)?.share(instances)?;
                Some(PlannedCounter {
                    algorithm: share,
                    key: c.key.clone(),
                    ..*c
                })
            })
            .collect();
        let mut decisions = Vec::with_capacity(shares.len());
        remote.fallback().check_now(&shares, now, &mut decisions);
        rule_status(rule, &shares, &decisions)
    }

    /// The overall code from the statuses: OVER_LIMIT when an ordinary
    /// descriptor is, or when there are quota descriptors and all of them are.
    fn respond(&self, statuses: Vec<DescriptorStatus>, quota: &[QuotaClass]) -> RateLimitResponse {
        let class = |i: usize| quota.get(i).copied().unwrap_or(QuotaClass::Limit);
        let over_of = |wanted: QuotaClass| {
            statuses
                .iter()
                .enumerate()
                .filter(move |(i, _)| class(*i) == wanted)
                .map(|(_, s)| s.code == Code::OverLimit)
        };
        let quotas = over_of(QuotaClass::Quota).count();
        let over = over_of(QuotaClass::Limit).any(|over| over)
            || (quotas > 0 && over_of(QuotaClass::Quota).all(|over| over));
        let overall = if over && !self.options.global_shadow_mode {
            Code::OverLimit
        } else {
            Code::Ok
        };
        RateLimitResponse {
            overall,
            statuses,
            delay: Duration::ZERO,
        }
    }
}

/// How a descriptor's status counts towards the overall code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuotaClass {
    /// Over the limit makes the request over the limit.
    Limit,
    /// Over the limit counts only when every quota descriptor is over.
    Quota,
    /// `unlimited`: never over, and not a quota descriptor either.
    Uncounted,
}

/// Replaces the decision of each counter a give-back undid with the
/// give-back's own (the count as it stands without this request).
fn apply_refunds(
    plan: &Plan<'_>,
    decisions: &mut [Decision],
    refunds: &[PlannedCounter],
    refunded: &[Decision],
) {
    for (refund, decision) in refunds.iter().zip(refunded) {
        let index = refund.group as usize;
        if index < plan.counters.len()
            && let Some(slot) = decisions.get_mut(index)
        {
            *slot = *decision;
        }
    }
}

/// The retry-after of a request denied because the store is down.
pub const STORE_DOWN_RETRY_AFTER: Duration = Duration::from_secs(1);

fn count_fallback(remote: Option<&Arc<RemoteStore>>, policy: StoreErrorPolicy, now: Timestamp) {
    if let Some(remote) = remote {
        remote.record_fallback(policy, now);
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
