//! What the layer decides with: its limits, store, clock and renderer, and the decision itself.

use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Response};
use smallvec::SmallVec;
use tollgate_core::{Clock, Decision, Outcome, Unit};
use tollgate_protocol::rls::headers::{Rendered, ResponseHeaders, overall_retry_after};
use tollgate_protocol::rls::model::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, RateLimitResponse,
};
use tollgate_store::{Counter, CounterStore, StoreError};

use super::error::{Rejection, SharedHandler, append_headers, header_map};
use super::pass_headers::{PassHeaders, PassValues, clamp};
use crate::key::{KeyBytes, KeyExtractor, NoClientAddress};
use crate::limit::Limit;
use crate::metrics::{DecisionCounter as PromCounter, Metrics};

/// What to do with a request when the counter store fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnStoreError {
    /// Answer 503 with `Retry-After: 1` (the default: a limit no one can check holds).
    #[default]
    Deny,
    /// Let the request through unlimited.
    Allow,
}

/// One limit with its counters.
pub(super) struct LimitEntry {
    pub(super) limit: Limit,
    /// The counter key's prefix: the name's length and the name, so no two limits share a key.
    prefix: Vec<u8>,
    allowed: PromCounter,
    denied: PromCounter,
    shadow_denied: PromCounter,
    store_error: PromCounter,
}

impl LimitEntry {
    pub(super) fn new(limit: Limit, metrics: &Metrics) -> Self {
        let mut prefix = u32::try_from(limit.name.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes()
            .to_vec();
        prefix.extend_from_slice(limit.name.as_bytes());
        let name = limit.name.as_str();
        LimitEntry {
            allowed: metrics.counter(name, "allowed"),
            denied: metrics.counter(name, "denied"),
            shadow_denied: metrics.counter(name, "shadow_denied"),
            store_error: metrics.counter(name, "store_error"),
            prefix,
            limit,
        }
    }
}

/// Everything a request is decided with, shared by all clones of the layer.
pub(super) struct Policy<St> {
    pub(super) key: KeyExtractor,
    pub(super) limits: Vec<LimitEntry>,
    pub(super) store: Arc<St>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) headers: ResponseHeaders,
    /// The admitted request's headers, pre-rendered where they do not change ([`PassHeaders::new`]).
    pub(super) pass_headers: Option<PassHeaders>,
    pub(super) shadow: bool,
    /// Whether an admitted request's answer gets the headers ([`RateLimitBuilder::admitted_headers`](super::RateLimitBuilder::admitted_headers)).
    pub(super) admitted_headers: bool,
    pub(super) on_store_error: OnStoreError,
    pub(super) on_rejection: SharedHandler,
    /// Whether a request without a client address was logged at error level yet.
    pub(super) reported_no_address: AtomicBool,
}

/// The verdict on one request.
pub(super) enum Verdict {
    /// Let it through, adding these headers to the app's answer.
    Pass(Passed),
    /// Answer it with the rejection handler.
    Reject(Rejection),
}

/// The headers an admitted request's answer gets.
pub(super) enum Passed {
    /// None (shadow mode, a store error let through, or the headers of admitted answers off).
    Nothing,
    /// The layer's [`PassHeaders`] values for the request's decisions.
    Values(PassValues),
    /// Rendered by the shared renderer (a layer with an unnamed limit).
    Rendered(Vec<(String, String)>),
}

impl Passed {
    /// Adds the headers to the app's answer's `map`.
    pub(super) fn add_to(self, map: &mut HeaderMap) {
        match self {
            Passed::Nothing => {}
            Passed::Values(values) => values.append(map),
            Passed::Rendered(headers) => append_headers(map, headers),
        }
    }
}

thread_local! {
    /// The decisions buffer of [`Policy::decide_now`], reused by every
    /// request decided on this thread (so none allocates one).
    static DECISIONS: Cell<Vec<Decision>> = const { Cell::new(Vec::new()) };
}

/// A request's counters, one per limit, on the stack when they fit.
type Counters<'k> = SmallVec<[Counter<'k>; 4]>;

impl<St> Policy<St> {
    /// The app's answer to `rejection`, in the app's body type.
    pub(super) fn respond<B: From<Bytes>>(&self, rejection: &Rejection) -> Response<B> {
        self.on_rejection.respond(rejection).map(B::from)
    }

    /// A request had no client address: an error log line the first time
    /// (the server is set up without connection info), debug after that.
    pub(super) fn report_no_address(&self, error: NoClientAddress) {
        if self.reported_no_address.swap(true, Ordering::Relaxed) {
            tracing::debug!("{error}");
        } else {
            tracing::error!("{error}; answering 500 to every such request");
        }
    }

    /// Writes the counter keys of the request whose head is `parts` into
    /// `keys`, one after the other, each a limit's prefix then the
    /// request's key, and returns where in `keys` the request's key is.
    ///
    /// The key is written once, straight after the first limit's prefix,
    /// and copied after each other limit's: a layer of one limit (the
    /// common case) copies nothing.
    ///
    /// # Errors
    ///
    /// [`NoClientAddress`] from the key extractor.
    pub(super) fn counter_keys(
        &self,
        parts: &Parts,
        keys: &mut KeyBytes,
    ) -> Result<Range<usize>, NoClientAddress> {
        let mut limits = self.limits.iter();
        if let Some(first) = limits.next() {
            keys.extend_from_slice(&first.prefix);
        }
        let start = keys.len();
        self.key.write_key(parts, keys)?;
        let key = start..keys.len();
        for entry in limits {
            keys.extend_from_slice(&entry.prefix);
            let at = keys.len();
            keys.resize(at + key.len(), 0);
            keys.copy_within(key.clone(), at);
        }
        Ok(key)
    }

    /// Appends the store's counters for the counter keys `keys` (each a
    /// limit's prefix and a key of `key_len` bytes) at `cost`, with `tag`, to
    /// `counters`, filled where the caller keeps them rather than returned (a
    /// move of the whole buffer).
    fn counters<'k>(
        &self,
        keys: &'k [u8],
        key_len: usize,
        tag: u64,
        cost: u64,
        counters: &mut Counters<'k>,
    ) {
        let mut rest = keys;
        // One push a limit: `extend` over a mapped iterator costs a request
        // of one limit about 50 instructions more (its reserve and length guard).
        for entry in &self.limits {
            let (key, next) = rest
                .split_at_checked(entry.prefix.len() + key_len)
                .unwrap_or((rest, &[]));
            rest = next;
            counters.push(Counter {
                group: 0,
                key,
                tag,
                algorithm: entry.limit.algorithm,
                hits: cost,
                give_back: false,
                phase_ns: 0,
            });
        }
    }
}

impl<St: CounterStore> Policy<St> {
    /// Decides a request whose counter keys are `keys` (its own key at
    /// `key` in them, [`counter_keys`](Self::counter_keys)) and whose cost
    /// is `cost` against every limit at once, when the store can (in
    /// memory); `None`, nothing counted, when it takes a call
    /// ([`decide`](Self::decide) then).
    ///
    /// The counters carry no tag (0): a store that decides at once keeps
    /// every counter in this process, so it has no node to pick by tag, and
    /// the key's hash is left to [`decide`](Self::decide).
    pub(super) fn decide_now(&self, keys: &[u8], key: Range<usize>, cost: u64) -> Option<Verdict> {
        let mut counters = Counters::new();
        self.counters(keys, key.len(), 0, cost, &mut counters);
        let mut decisions = DECISIONS.take();
        let verdict = self
            .store
            .check_batch_now(&counters, self.clock.now(), &mut decisions)
            .map(|checked| self.judge(keys.get(key).unwrap_or_default(), checked, &decisions));
        DECISIONS.set(decisions);
        verdict
    }

    /// Decides a request whose counter keys are `keys` (its own key at
    /// `key` in them) and whose cost is `cost` against every limit, tagged
    /// with the key's hash (a clustered store keeps a request's counters on
    /// one node by it).
    pub(super) async fn decide(&self, keys: &[u8], key: Range<usize>, cost: u64) -> Verdict {
        let key = keys.get(key).unwrap_or_default();
        let tag = xxhash_rust::xxh3::xxh3_64(key);
        let mut counters = Counters::new();
        self.counters(keys, key.len(), tag, cost, &mut counters);
        let mut decisions = Vec::with_capacity(counters.len());
        let checked = self
            .store
            .check_batch(&counters, self.clock.now(), &mut decisions)
            .await;
        self.judge(key, checked, &decisions)
    }

    /// The verdict on the store's `decisions` for `key` (or its failure), counted in the metrics.
    fn judge(
        &self,
        key: &[u8],
        checked: Result<(), StoreError>,
        decisions: &[Decision],
    ) -> Verdict {
        if let Err(error) = checked {
            self.limits.iter().for_each(|e| {
                e.store_error.inc();
            });
            return match self.on_store_error {
                OnStoreError::Allow => Verdict::Pass(Passed::Nothing),
                OnStoreError::Deny => Verdict::Reject(Rejection::StoreUnavailable(error)),
            };
        }
        let over = decisions.iter().any(|d| !d.is_allowed());
        for (entry, decision) in self.limits.iter().zip(decisions) {
            match (decision.is_allowed(), self.shadow) {
                (true, _) => entry.allowed.inc(),
                (false, false) => entry.denied.inc(),
                (false, true) => entry.shadow_denied.inc(),
            };
        }
        if self.shadow || (!over && !self.admitted_headers) {
            return Verdict::Pass(Passed::Nothing);
        }
        if !over && let Some(pass) = &self.pass_headers {
            return Verdict::Pass(
                pass.values(decisions)
                    .map_or(Passed::Nothing, Passed::Values),
            );
        }
        let key = String::from_utf8_lossy(key);
        let limits = self.limits.iter().map(|entry| &entry.limit);
        let rendered = render_shared(&self.headers, limits, &key, decisions);
        if over {
            let limits = self
                .limits
                .iter()
                .zip(decisions)
                .filter(|(_, decision)| !decision.is_allowed())
                .map(|(entry, _)| entry.limit.name.clone())
                .collect();
            let statuses: Vec<DescriptorStatus> = self
                .limits
                .iter()
                .zip(decisions)
                .map(|(entry, decision)| status(&entry.limit, decision))
                .collect();
            Verdict::Reject(Rejection::OverLimit {
                limits,
                headers: header_map(rendered.headers),
                retry_after: overall_retry_after(&statuses),
            })
        } else {
            Verdict::Pass(Passed::Rendered(rendered.headers))
        }
    }
}

/// The headers (and body) the shared renderer writes for `decisions`, one per limit of `limits`, for `key`.
pub(crate) fn render_shared<'a>(
    headers: &ResponseHeaders,
    limits: impl Iterator<Item = &'a Limit> + Clone,
    key: &str,
    decisions: &[Decision],
) -> Rendered {
    let descriptors: Vec<Descriptor> = limits
        .clone()
        .map(|limit| Descriptor::new([(limit.name.as_str(), key)]))
        .collect();
    let over = decisions.iter().any(|d| !d.is_allowed());
    let response = RateLimitResponse {
        overall: if over { Code::OverLimit } else { Code::Ok },
        statuses: limits
            .zip(decisions)
            .map(|(limit, decision)| status(limit, decision))
            .collect(),
        delay: std::time::Duration::ZERO,
        from_local_cache: false,
    };
    headers.render(&descriptors, &response)
}

/// A decision as the RLS status the renderers read.
fn status(limit: &Limit, decision: &Decision) -> DescriptorStatus {
    DescriptorStatus {
        code: if decision.is_allowed() {
            Code::Ok
        } else {
            Code::OverLimit
        },
        current_limit: Some(CurrentLimit {
            name: limit.name.clone(),
            requests_per_unit: clamp(limit.quota),
            unit: Unit::Second,
            unit_multiplier: clamp(limit.window.as_secs().max(1)),
            window: limit.window,
        }),
        limit_remaining: clamp(decision.remaining()),
        duration_until_reset: Some(decision.reset_after()),
        retry_after: match decision.outcome() {
            Outcome::Denied => decision.retry_after(),
            Outcome::Allowed | Outcome::Exceeds => None,
        },
        shadowed: false,
    }
}
