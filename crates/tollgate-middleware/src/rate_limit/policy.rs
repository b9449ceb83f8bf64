//! What the layer decides with: its limits, store, clock and renderer, and the decision itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::Response;
use prometheus_client::metrics::counter::Counter as PromCounter;
use tollgate_core::{Clock, Decision, Outcome, Unit};
use tollgate_protocol::rls::headers::ResponseHeaders;
use tollgate_protocol::rls::model::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, RateLimitResponse,
};
use tollgate_store::{Counter, CounterStore};

use super::error::{Rejection, SharedHandler, header_map};
use crate::key::{KeyExtractor, NoClientAddress};
use crate::limit::Limit;
use crate::metrics::Metrics;

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
    pub(super) shadow: bool,
    pub(super) on_store_error: OnStoreError,
    pub(super) on_rejection: SharedHandler,
    /// Whether a request without a client address was logged at error level yet.
    pub(super) reported_no_address: AtomicBool,
}

/// The verdict on one request.
pub(super) enum Verdict {
    /// Let it through, adding these headers to the app's answer.
    Pass(Vec<(String, String)>),
    /// Answer it with the rejection handler.
    Reject(Rejection),
}

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
}

impl<St: CounterStore> Policy<St> {
    /// Decides a request with `key` and `cost` against every limit.
    pub(super) async fn decide(&self, key: &str, cost: u64) -> Verdict {
        let keys: Vec<Vec<u8>> = self
            .limits
            .iter()
            .map(|entry| [entry.prefix.as_slice(), key.as_bytes()].concat())
            .collect();
        let tag = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
        let counters: Vec<Counter<'_>> = self
            .limits
            .iter()
            .zip(&keys)
            .map(|(entry, bytes)| Counter {
                group: 0,
                key: bytes,
                tag,
                algorithm: entry.limit.algorithm,
                hits: cost,
                give_back: false,
                phase_ns: 0,
            })
            .collect();
        let mut decisions = Vec::with_capacity(counters.len());
        let now = self.clock.now();
        if let Err(error) = self.store.check_batch(&counters, now, &mut decisions).await {
            self.limits.iter().for_each(|e| {
                e.store_error.inc();
            });
            return match self.on_store_error {
                OnStoreError::Allow => Verdict::Pass(Vec::new()),
                OnStoreError::Deny => Verdict::Reject(Rejection::StoreUnavailable(error)),
            };
        }
        let over = decisions.iter().any(|d| !d.is_allowed());
        for (entry, decision) in self.limits.iter().zip(&decisions) {
            match (decision.is_allowed(), self.shadow) {
                (true, _) => entry.allowed.inc(),
                (false, false) => entry.denied.inc(),
                (false, true) => entry.shadow_denied.inc(),
            };
        }
        if self.shadow {
            return Verdict::Pass(Vec::new());
        }
        let descriptors: Vec<Descriptor> = self
            .limits
            .iter()
            .map(|entry| Descriptor::new([(entry.limit.name.as_str(), key)]))
            .collect();
        let response = RateLimitResponse {
            overall: if over { Code::OverLimit } else { Code::Ok },
            statuses: self
                .limits
                .iter()
                .zip(&decisions)
                .map(|(entry, decision)| status(&entry.limit, decision))
                .collect(),
            delay: std::time::Duration::ZERO,
            from_local_cache: false,
        };
        let rendered = self.headers.render(&descriptors, &response);
        if over {
            let limits = self
                .limits
                .iter()
                .zip(&decisions)
                .filter(|(_, decision)| !decision.is_allowed())
                .map(|(entry, _)| entry.limit.name.clone())
                .collect();
            Verdict::Reject(Rejection::OverLimit {
                limits,
                headers: header_map(rendered.headers),
            })
        } else {
            Verdict::Pass(rendered.headers)
        }
    }
}

/// A decision as the RLS status the renderers read.
fn status(limit: &Limit, decision: &Decision) -> DescriptorStatus {
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
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
