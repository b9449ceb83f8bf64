//! The decision engine: RLS v3 requests in, one status per descriptor out.
//!
//! The types here mirror `envoy.service.ratelimit.v3` field for field, as
//! plain Rust, so the gRPC and HTTP layers only map their wire types onto
//! them. [`Engine::should_rate_limit`] answers with envoyproxy/ratelimit's
//! semantics:
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
//! Counters live in one [`MemoryStore`] per distinct algorithm, built when
//! the engine is, so the hot path takes no lock; [`Engine::with_rules`]
//! keeps the stores of algorithms that still exist, so counters survive a
//! reload. A changed limit (another rate, window or algorithm) is another
//! algorithm and starts from a fresh counter (upstream would carry the count
//! over, since its keys ignore the limit). Overrides create their stores on
//! first use, under a read-mostly lock.

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, Clock, Decision, FixedWindow, Outcome, Timestamp, Unit,
};
use tollgate_rules::{Applied, Limit, Rule, RuleSet, WindowLength};
use tollgate_store::{MemoryStore, StoreConfig};

/// One call to the service: a domain and the descriptors to check in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimitRequest {
    /// The domain whose rules apply; must not be empty.
    pub domain: String,
    /// The descriptors, each answered by one status in the same order; at least one.
    pub descriptors: Vec<Descriptor>,
    /// Hits for every descriptor without its own `hits_addend`; 0 means 1.
    pub hits_addend: u32,
}

/// One descriptor of a request: ordered entries and its optional overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// The `(key, value)` entries; at least one, and no key is empty.
    pub entries: Vec<(String, String)>,
    /// A limit that replaces whatever the rules say for this descriptor.
    pub limit: Option<LimitOverride>,
    /// Hits for this descriptor, overriding the request's (0 checks only).
    pub hits_addend: Option<u64>,
    /// Give the hits back instead of consuming them.
    pub is_negative_hits: bool,
}

impl Descriptor {
    /// A descriptor with these entries and no overrides.
    pub fn new<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Descriptor {
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..Descriptor::default()
        }
    }
}

/// A limit sent with a descriptor (RLS `RateLimitOverride`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LimitOverride {
    /// Requests per window; 0 means every request is over.
    pub requests_per_unit: u32,
    /// The window's unit; `None` stands for the wire's `UNKNOWN` and is rejected.
    pub unit: Option<Unit>,
    /// Units per window; absent or 0 means 1.
    pub unit_multiplier: Option<u32>,
}

/// The answer for the whole request or one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// Let the request through.
    Ok,
    /// Over the limit: reject the request.
    OverLimit,
}

/// The limit a status reports (RLS `RateLimit`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The limit's `name`, empty when it has none.
    pub name: String,
    /// Requests per window.
    pub requests_per_unit: u32,
    /// The window's unit (for a `window:` duration, the largest unit that divides it).
    pub unit: Unit,
    /// Units per window.
    pub unit_multiplier: u32,
    /// The window's exact length.
    pub window: Duration,
}

/// The answer for one descriptor (RLS `DescriptorStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// OK or OVER_LIMIT.
    pub code: Code,
    /// The limit reported, `None` when nothing limits the descriptor.
    pub current_limit: Option<CurrentLimit>,
    /// Units left after this call, clamped to `u32`.
    pub limit_remaining: u32,
    /// Time until the reported limit is back to its fresh state.
    pub duration_until_reset: Option<Duration>,
    /// For OVER_LIMIT, the earliest time the same call could pass; `None` otherwise.
    pub retry_after: Option<Duration>,
    /// Over the limit, but reported OK because the rule is in `shadow_mode`.
    pub shadowed: bool,
}

impl DescriptorStatus {
    /// OK with no limit, for unknown domains and unmatched descriptors.
    fn no_limit() -> Self {
        DescriptorStatus {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: 0,
            duration_until_reset: None,
            retry_after: None,
            shadowed: false,
        }
    }

    /// OK with nothing counted, for `unlimited` rules.
    fn unlimited() -> Self {
        DescriptorStatus {
            limit_remaining: u32::MAX,
            ..DescriptorStatus::no_limit()
        }
    }

    /// The status for one decision of `limit`.
    fn from_decision(decision: &Decision, limit: Option<CurrentLimit>) -> Self {
        let code = if decision.is_allowed() {
            Code::Ok
        } else {
            Code::OverLimit
        };
        DescriptorStatus {
            code,
            current_limit: limit,
            limit_remaining: u32::try_from(decision.remaining()).unwrap_or(u32::MAX),
            duration_until_reset: Some(decision.reset_after()),
            retry_after: decision.retry_after(),
            shadowed: false,
        }
    }
}

/// The answer to one call (RLS `RateLimitResponse`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitResponse {
    /// OVER_LIMIT when any status is (OK under global shadow mode).
    pub overall: Code,
    /// One status per request descriptor, in request order.
    pub statuses: Vec<DescriptorStatus>,
}

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
    /// The size of each rule store (one per distinct algorithm).
    pub store_config: StoreConfig,
    /// The size of each store created for descriptor `limit` overrides.
    pub override_store_config: StoreConfig,
    /// The most override stores kept (one per distinct override limit);
    /// when one more is needed, the store used longest ago is dropped and
    /// its counters start again. This bounds memory against callers sending
    /// many distinct limits while overrides in steady use keep counting.
    pub max_override_stores: usize,
}

impl Default for EngineOptions {
    /// No shadow mode, default-sized rule stores, 100 000-key override stores, at most 1024 of them.
    fn default() -> Self {
        EngineOptions {
            global_shadow_mode: false,
            store_config: StoreConfig::default(),
            override_store_config: StoreConfig::with_max_keys(100_000),
            max_override_stores: 1024,
        }
    }
}

/// Stores created on first use, by algorithm.
type LazyStores = RwLock<HashMap<AnyAlgorithm, LazyStore>>;

/// A store created on first use, and when a request last used it.
#[derive(Debug)]
struct LazyStore {
    store: Arc<MemoryStore>,
    /// The `now` of the latest request that used it, in nanoseconds.
    last_used: AtomicU64,
}

/// Answers RLS requests from a rule set, in-memory stores and a clock.
pub struct Engine<C: Clock> {
    rules: Arc<RuleSet>,
    domains: HashSet<String>,
    stores: HashMap<AnyAlgorithm, Arc<MemoryStore>>,
    lazy_stores: Arc<LazyStores>,
    options: EngineOptions,
    clock: C,
}

impl<C: Clock> fmt::Debug for Engine<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("domains", &self.domains.len())
            .field("stores", &self.stores.len())
            .field("lazy_stores", &self.lazy_stores.read().len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// One limit's decision within a descriptor, and how to undo it.
struct Checked {
    limit_index: usize,
    algorithm: AnyAlgorithm,
    decision: Decision,
    key: Vec<u8>,
}

impl<C: Clock> Engine<C> {
    /// An engine for `rules`, with a fresh store for each algorithm they use.
    pub fn new(rules: Arc<RuleSet>, options: EngineOptions, clock: C) -> Self {
        Engine::build(
            rules,
            options,
            clock,
            &HashMap::new(),
            Arc::new(RwLock::new(HashMap::new())),
        )
    }

    fn build(
        rules: Arc<RuleSet>,
        options: EngineOptions,
        clock: C,
        previous: &HashMap<AnyAlgorithm, Arc<MemoryStore>>,
        lazy_stores: Arc<LazyStores>,
    ) -> Self {
        let domains: HashSet<String> = rules.domains().map(str::to_owned).collect();
        let mut stores = HashMap::new();
        for domain in &domains {
            for rule in rules.rules(domain) {
                for algorithm in rule.limits.iter().filter_map(|l| l.algorithm) {
                    stores.entry(algorithm).or_insert_with(|| {
                        previous.get(&algorithm).cloned().unwrap_or_else(|| {
                            Arc::new(MemoryStore::new(algorithm, options.store_config))
                        })
                    });
                }
            }
        }
        Engine {
            rules,
            domains,
            stores,
            lazy_stores,
            options,
            clock,
        }
    }

    /// An engine for `rules` that keeps this one's stores for every algorithm
    /// both use (and its override stores), so unchanged limits keep counting.
    pub fn with_rules(&self, rules: Arc<RuleSet>) -> Self
    where
        C: Clone,
    {
        Engine::build(
            rules,
            self.options,
            self.clock.clone(),
            &self.stores,
            Arc::clone(&self.lazy_stores),
        )
    }

    /// The rules this engine answers from.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// The options it was built with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// How many rule stores it holds (one per distinct algorithm).
    pub fn store_count(&self) -> usize {
        self.stores.len()
    }

    /// Decides one request: one status per descriptor, and the overall code.
    pub fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, EngineError> {
        validate(request)?;
        let overrides = request
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| d.limit.map(|o| override_limit(i, &o)).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let now = self.clock.now();
        let domain = request.domain.as_str();
        let known_domain = self.domains.contains(domain);
        let applied = if known_domain {
            // Descriptors with an override skip matching, so their rules neither apply nor replace.
            let entries: Vec<&[(String, String)]> = request
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
        let mut statuses = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let hits = descriptor.hits_addend.unwrap_or(default_hits);
            let status = if !known_domain {
                DescriptorStatus::no_limit()
            } else if let Some(Some((algorithm, limit))) = overrides.get(i) {
                self.apply_override(domain, descriptor, *algorithm, limit, hits, now)
            } else {
                match applied.get(i) {
                    Some(Applied::Limited {
                        rule,
                        limit_indices,
                    }) => self.apply_rule(domain, descriptor, rule, limit_indices, hits, now),
                    Some(Applied::Unlimited(_)) => DescriptorStatus::unlimited(),
                    Some(Applied::NoLimit) | None => DescriptorStatus::no_limit(),
                }
            };
            statuses.push(status);
        }
        let over = statuses.iter().any(|s| s.code == Code::OverLimit);
        let overall = if over && !self.options.global_shadow_mode {
            Code::OverLimit
        } else {
            Code::Ok
        };
        Ok(RateLimitResponse { overall, statuses })
    }

    /// Checks (or refunds) every applying limit of `rule` for one descriptor.
    fn apply_rule(
        &self,
        domain: &str,
        descriptor: &Descriptor,
        rule: &Rule,
        limit_indices: &[usize],
        hits: u64,
        now: Timestamp,
    ) -> DescriptorStatus {
        let negative = descriptor.is_negative_hits;
        let mut checked: Vec<Checked> = Vec::with_capacity(limit_indices.len());
        for &limit_index in limit_indices {
            let Some(algorithm) = rule.limits.get(limit_index).and_then(|l| l.algorithm) else {
                continue;
            };
            let key = rule.counter_key(domain, &descriptor.entries, limit_index);
            let decision = self.with_rule_store(algorithm, |store| {
                if negative {
                    store.refund(key.as_slice(), now, hits)
                } else {
                    store.check(key.as_slice(), now, hits)
                }
            });
            checked.push(Checked {
                limit_index,
                algorithm,
                decision,
                key,
            });
        }
        let denied = checked.iter().any(|c| !c.decision.is_allowed());
        if denied && hits > 0 {
            for c in checked.iter().filter(|c| c.decision.is_allowed()) {
                if !is_fixed_window(&c.algorithm) {
                    self.with_rule_store(c.algorithm, |store| {
                        store.refund(c.key.as_slice(), now, hits)
                    });
                }
            }
        }
        let Some(reported) = most_restrictive(&checked) else {
            return DescriptorStatus::no_limit();
        };
        let limit = rule
            .limits
            .get(reported.limit_index)
            .and_then(current_limit);
        let mut status = DescriptorStatus::from_decision(&reported.decision, limit);
        if rule.shadow_mode && status.code == Code::OverLimit {
            status.code = Code::Ok;
            status.retry_after = None;
            status.shadowed = true;
        }
        status
    }

    /// Checks (or refunds) a descriptor's own `limit`.
    fn apply_override(
        &self,
        domain: &str,
        descriptor: &Descriptor,
        algorithm: AnyAlgorithm,
        limit: &CurrentLimit,
        hits: u64,
        now: Timestamp,
    ) -> DescriptorStatus {
        let key = override_key(domain, &descriptor.entries, limit);
        let store = self.lazy_store(algorithm, now);
        let decision = if descriptor.is_negative_hits {
            store.refund(key.as_slice(), now, hits)
        } else {
            store.check(key.as_slice(), now, hits)
        };
        DescriptorStatus::from_decision(&decision, Some(limit.clone()))
    }

    /// Runs `f` on the rule store for `algorithm`, creating one lazily if the
    /// rule set somehow named an algorithm the engine did not build a store for.
    fn with_rule_store<R>(&self, algorithm: AnyAlgorithm, f: impl FnOnce(&MemoryStore) -> R) -> R {
        match self.stores.get(&algorithm) {
            Some(store) => f(store),
            None => f(&self.lazy_store(algorithm, self.clock.now())),
        }
    }

    /// The lazily created store for `algorithm` (override limits), marked used at `now`.
    fn lazy_store(&self, algorithm: AnyAlgorithm, now: Timestamp) -> Arc<MemoryStore> {
        if let Some(lazy) = self.lazy_stores.read().get(&algorithm) {
            lazy.last_used.fetch_max(now.as_nanos(), Ordering::Relaxed);
            return Arc::clone(&lazy.store);
        }
        let mut stores = self.lazy_stores.write();
        if let Some(lazy) = stores.get(&algorithm) {
            lazy.last_used.fetch_max(now.as_nanos(), Ordering::Relaxed);
            return Arc::clone(&lazy.store);
        }
        if stores.len() >= self.options.max_override_stores.max(1) {
            let least_recent = stores
                .iter()
                .min_by_key(|(_, lazy)| lazy.last_used.load(Ordering::Relaxed))
                .map(|(algorithm, _)| *algorithm);
            if let Some(algorithm) = least_recent {
                stores.remove(&algorithm);
            }
        }
        let store = Arc::new(MemoryStore::new(
            algorithm,
            self.options.override_store_config,
        ));
        stores.insert(
            algorithm,
            LazyStore {
                store: Arc::clone(&store),
                last_used: AtomicU64::new(now.as_nanos()),
            },
        );
        store
    }

    /// How many override stores it holds.
    pub fn override_store_count(&self) -> usize {
        self.lazy_stores.read().len()
    }
}

/// An engine is shared between threads.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Engine<tollgate_core::ManualClock>>();
    shareable::<Engine<tollgate_core::CoarseClock>>();
};

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

/// The fixed window and reported limit of descriptor `index`'s override.
fn override_limit(
    index: usize,
    limit: &LimitOverride,
) -> Result<(AnyAlgorithm, CurrentLimit), EngineError> {
    let Some(unit) = limit.unit else {
        return Err(EngineError::InvalidArgument(format!(
            "descriptors[{index}].limit.unit must be one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR, not UNKNOWN"
        )));
    };
    let multiplier = limit.unit_multiplier.unwrap_or(1).max(1);
    let window = unit
        .duration()
        .checked_mul(multiplier)
        .unwrap_or(Duration::MAX);
    let algorithm = FixedWindow::new(u64::from(limit.requests_per_unit), window)
        .map_err(|e| EngineError::InvalidArgument(format!("descriptors[{index}].limit: {e}")))?;
    Ok((
        algorithm.into(),
        CurrentLimit {
            name: String::new(),
            requests_per_unit: limit.requests_per_unit,
            unit,
            unit_multiplier: multiplier,
            window,
        },
    ))
}

/// The counter key of an override: a marker no rule key starts with, the
/// domain, the entries and the override's rate and window, all length-prefixed.
fn override_key(domain: &str, entries: &[(String, String)], limit: &CurrentLimit) -> Vec<u8> {
    let mut key = Vec::with_capacity(64);
    key.extend_from_slice(b"tgo");
    push_part(&mut key, domain.as_bytes());
    key.extend_from_slice(&(entries.len() as u64).to_be_bytes());
    for (k, v) in entries {
        push_part(&mut key, k.as_bytes());
        push_part(&mut key, v.as_bytes());
    }
    key.extend_from_slice(&u64::from(limit.requests_per_unit).to_be_bytes());
    let window = u64::try_from(limit.window.as_nanos()).unwrap_or(u64::MAX);
    key.extend_from_slice(&window.to_be_bytes());
    key
}

/// Appends one length-prefixed part to a key.
fn push_part(key: &mut Vec<u8>, part: &[u8]) {
    key.extend_from_slice(&(part.len() as u64).to_be_bytes());
    key.extend_from_slice(part);
}

/// Whether `algorithm` is the fixed window, which counts denied requests.
fn is_fixed_window(algorithm: &AnyAlgorithm) -> bool {
    matches!(
        algorithm,
        AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_))
    )
}

/// The decision to report: a denial if any (one that can never pass first,
/// then the longest wait), else the least remaining (the first on ties).
fn most_restrictive(checked: &[Checked]) -> Option<&Checked> {
    let mut best: Option<&Checked> = None;
    for c in checked {
        let replace = match best {
            None => true,
            Some(b) => more_restrictive(&c.decision, &b.decision),
        };
        if replace {
            best = Some(c);
        }
    }
    best
}

/// Whether `a` is strictly more restrictive than `b`.
fn more_restrictive(a: &Decision, b: &Decision) -> bool {
    fn rank(d: &Decision) -> u8 {
        match d.outcome() {
            Outcome::Exceeds => 2,
            Outcome::Denied => 1,
            Outcome::Allowed => 0,
        }
    }
    match rank(a).cmp(&rank(b)) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => match a.outcome() {
            Outcome::Allowed => a.remaining() < b.remaining(),
            Outcome::Denied => a.retry_after_nanos() > b.retry_after_nanos(),
            Outcome::Exceeds => false,
        },
    }
}

/// The reported form of a rule's limit; `None` for an unlimited one.
fn current_limit(limit: &Limit) -> Option<CurrentLimit> {
    let window = limit.window?;
    let (unit, unit_multiplier) = match window {
        WindowLength::Unit { unit, multiplier } => (unit, multiplier.max(1)),
        WindowLength::Duration(d) => unit_of(d),
    };
    Some(CurrentLimit {
        name: limit.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit,
        unit_multiplier,
        window: window.duration(),
    })
}

/// The largest unit that divides `d` a whole number of times, and how many
/// times; a window that is not whole seconds is reported in seconds, rounded up.
fn unit_of(d: Duration) -> (Unit, u32) {
    let secs = d.as_secs();
    if d.subsec_nanos() == 0 && secs > 0 {
        for unit in Unit::ALL.iter().rev() {
            if secs.is_multiple_of(unit.seconds())
                && let Ok(n) = u32::try_from(secs / unit.seconds())
            {
                return (*unit, n);
            }
        }
    }
    let rounded_up = secs.saturating_add(u64::from(d.subsec_nanos() > 0)).max(1);
    (Unit::Second, u32::try_from(rounded_up).unwrap_or(u32::MAX))
}
