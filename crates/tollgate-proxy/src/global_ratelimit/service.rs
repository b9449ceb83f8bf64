//! [`GlobalRateLimitService`]: asks the RLS before passing a request on.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tollgate_protocol::rls::wire;
use tower::Service;

use super::answer::{denial, header_pairs, x_ratelimit_headers};
use super::error::{GlobalRateLimitError, RateLimitServiceFailed};
use super::policy::GlobalRateLimit;
use crate::context::RequestContext;
use crate::descriptors::{self, DescriptorRule, RequestFacts};
use crate::response_future::ResponseFuture;

/// The global rate limit in front of `S`.
#[derive(Clone, Debug)]
pub struct GlobalRateLimitService<S> {
    inner: S,
    filter: Arc<GlobalRateLimit>,
    rules: Arc<Vec<DescriptorRule>>,
}

impl<S> GlobalRateLimitService<S> {
    /// `inner` behind `filter`, with the descriptor rules it reads.
    pub fn new(inner: S, filter: Arc<GlobalRateLimit>, rules: Arc<Vec<DescriptorRule>>) -> Self {
        GlobalRateLimitService {
            inner,
            filter,
            rules,
        }
    }
}

impl<S, B, RB> Service<Request<B>> for GlobalRateLimitService<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: From<GlobalRateLimitError> + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = ResponseFuture<RB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let context = match RequestContext::of(request.extensions()) {
            Ok(context) => context.clone(),
            Err(missing) => {
                return Box::pin(async move { Err(GlobalRateLimitError::from(missing).into()) });
            }
        };
        let (mut parts, body) = request.into_parts();
        let request_descriptors = {
            let facts = RequestFacts {
                parts: &parts,
                client: context.client,
                destination_cluster: &context.cluster,
                source_cluster: &context.source_cluster,
            };
            match descriptors::build(&self.rules, &facts) {
                Ok(d) => d,
                Err(e) => {
                    return Box::pin(
                        async move { Err(GlobalRateLimitError::InvalidCost(e).into()) },
                    );
                }
            }
        };
        if request_descriptors.is_empty() {
            return Box::pin(inner.call(Request::from_parts(parts, body)));
        }
        let filter = Arc::clone(&self.filter);
        Box::pin(async move {
            let answer = match filter.ask(&request_descriptors).await {
                Ok(answer) => answer,
                Err(reason) => {
                    tracing::debug!(%reason, "rate limit service call failed");
                    if filter.failure_mode_deny {
                        return Err(GlobalRateLimitError::ServiceFailed(RateLimitServiceFailed {
                            status: filter.status_on_error,
                            reason,
                        })
                        .into());
                    }
                    return inner.call(Request::from_parts(parts, body)).await;
                }
            };
            let rate_headers = if filter.x_ratelimit_headers {
                x_ratelimit_headers(&answer.statuses)
            } else {
                Vec::new()
            };
            if answer.overall_code == wire::CODE_OVER_LIMIT {
                return Err(GlobalRateLimitError::Limited(denial(
                    &filter,
                    &request_descriptors,
                    answer,
                    rate_headers,
                ))
                .into());
            }
            let rls_response_headers = header_pairs(&answer.response_headers_to_add);
            for (name, value) in header_pairs(&answer.request_headers_to_add) {
                parts.headers.append(name, value);
            }
            let mut response = inner.call(Request::from_parts(parts, body)).await?;
            for (name, value) in rls_response_headers {
                response.headers_mut().append(name, value);
            }
            for (name, value) in rate_headers {
                response.headers_mut().insert(name, value);
            }
            Ok(response)
        })
    }
}
