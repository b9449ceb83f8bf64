//! [`LocalRateLimitService`]: decides each request on the local buckets before the inner service sees it.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Request, Response};
use tower::Service;

use super::error::{LocalRateLimitError, LocalRateLimited};
use super::future::ResponseFuture;
use super::headers::x_ratelimit_headers;
use super::limiter::{LocalLimiter, SharedClock};
use crate::context::RequestContext;
use crate::descriptors::{self, DescriptorRule, RequestFacts};

/// What every clone of the service shares.
pub struct LocalRateLimitShared {
    /// The buckets shared by all connections (several routes share the
    /// listener-level ones); per-connection limiting makes fresh ones per connection.
    pub limiter: Arc<LocalLimiter>,
    /// The descriptor rules the filter reads.
    pub rules: Vec<DescriptorRule>,
    /// The clock for per-connection limiters.
    pub clock: SharedClock,
}

impl std::fmt::Debug for LocalRateLimitShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRateLimitShared")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

/// The local rate limit in front of `S`.
///
/// * Not enabled (`filter_enabled`): the request passes untouched, no headers.
/// * Enabled: descriptors are built (only when the config has descriptors),
///   the buckets decide; with `enable_x_ratelimit_headers` the response gets
///   `x-ratelimit-limit/remaining/reset` whatever the outcome.
/// * Denied and enforced: [`LocalRateLimited`], in the inner service's error.
/// * Denied, not enforced: `request_headers_to_add_when_not_enforced` go upstream.
#[derive(Clone, Debug)]
pub struct LocalRateLimitService<S> {
    inner: S,
    shared: Arc<LocalRateLimitShared>,
}

impl<S> LocalRateLimitService<S> {
    /// `inner` behind the limit in `shared`.
    pub fn new(inner: S, shared: Arc<LocalRateLimitShared>) -> Self {
        LocalRateLimitService { inner, shared }
    }
}

impl<S, B, RB> Service<Request<B>> for LocalRateLimitService<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: From<LocalRateLimitError>,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = &self.shared;
        let policy = shared.limiter.policy();
        if !policy.enabled.sample() {
            return ResponseFuture::inner(self.inner.call(request), Vec::new());
        }
        let (mut parts, body) = request.into_parts();
        let context = match RequestContext::of(&parts.extensions) {
            Ok(context) => context,
            Err(missing) => return ResponseFuture::denied(missing.into()),
        };
        let request_descriptors = if policy.descriptors.is_empty() {
            Vec::new()
        } else {
            let facts = RequestFacts {
                parts: &parts,
                client: context.client,
                destination_cluster: &context.cluster,
                source_cluster: &context.source_cluster,
            };
            match descriptors::build(&shared.rules, &facts) {
                Ok(d) => d,
                Err(e) => return ResponseFuture::denied(LocalRateLimitError::InvalidCost(e)),
            }
        };
        let per_connection;
        let limiter = if policy.per_connection {
            per_connection = context.connection.get_or_insert_with(&shared.limiter, || {
                LocalLimiter::new(Arc::clone(policy), Arc::clone(&shared.clock))
            });
            &per_connection
        } else {
            &shared.limiter
        };
        let verdict = limiter.check(&request_descriptors);
        let rate_headers = match (&verdict.report, policy.x_ratelimit_headers) {
            (Some(report), true) => x_ratelimit_headers(report),
            _ => Vec::new(),
        };
        if !verdict.allowed {
            if policy.enforced.sample() {
                let mut headers = HeaderMap::new();
                for header in &policy.response_headers_to_add {
                    header.apply(&mut headers);
                }
                for (name, value) in rate_headers {
                    headers.insert(name, value);
                }
                return ResponseFuture::denied(LocalRateLimitError::Limited(LocalRateLimited {
                    status: policy.status,
                    grpc_status: policy.grpc_status,
                    headers,
                    report: verdict.report,
                    retry_after: policy.retry_after,
                }));
            }
            for header in &policy.request_headers_when_not_enforced {
                header.apply(&mut parts.headers);
            }
        }
        let request = Request::from_parts(parts, body);
        ResponseFuture::inner(self.inner.call(request), rate_headers)
    }
}
