//! [`ResponseHeaders`]: what [`HeaderOptions`] switches on, rendered for each answer.

use std::time::Duration;

use super::ietf::ietf_fields;
use super::jitter::Jitter;
use super::pick::pick_status;
use super::raw_body::raw_body;
use super::retry_after::{overall_retry_after, retry_after_seconds};
use super::trio::{LimitHeaderNames, limit_headers};
use crate::rls::model::{Code, Descriptor, RateLimitResponse};

/// The response header that says how long a shaper held a request, in
/// milliseconds: a route's `limit_req` in the proxy, or a leaky bucket with
/// `delay` in a limits file (the service's OK answer carries it).
pub const DELAY_HEADER: &str = "x-tollgate-delay-ms";

/// Which headers (and body) to add; everything off by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderOptions {
    /// The `RateLimit-Limit` / `-Remaining` / `-Reset` trio, on every answer with a limit.
    pub limit_headers: bool,
    /// The trio's names.
    pub limit_header_names: LimitHeaderNames,
    /// The IETF draft-10 `RateLimit-Policy` and `RateLimit` fields, on every answer with a limit.
    pub ietf_headers: bool,
    /// `Retry-After` on OVER_LIMIT.
    pub retry_after: bool,
    /// The most jitter added to `Retry-After` (uniform in `[0, retry_after_jitter]`); zero by default.
    pub retry_after_jitter: Duration,
    /// A JSON body for the OVER_LIMIT reply.
    pub raw_body: bool,
}

impl HeaderOptions {
    /// Whether nothing is switched on.
    pub fn is_off(&self) -> bool {
        !(self.limit_headers || self.ietf_headers || self.retry_after || self.raw_body)
    }
}

/// What is added to a reply: headers in order, and the body for an OVER_LIMIT reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    /// `(name, value)` pairs, for `response_headers_to_add`.
    pub headers: Vec<(String, String)>,
    /// The JSON body, for `raw_body`.
    pub raw_body: Option<Vec<u8>>,
}

/// Renders [`HeaderOptions`] for each answer; shared by all calls.
#[derive(Debug)]
pub struct ResponseHeaders {
    options: HeaderOptions,
    jitter: Jitter,
}

impl Default for ResponseHeaders {
    /// Everything off.
    fn default() -> Self {
        ResponseHeaders::new(HeaderOptions::default(), Jitter::random())
    }
}

impl ResponseHeaders {
    /// A renderer for `options`, drawing `Retry-After` jitter from `jitter`.
    pub fn new(options: HeaderOptions, jitter: Jitter) -> Self {
        ResponseHeaders { options, jitter }
    }

    /// The options it renders.
    pub fn options(&self) -> &HeaderOptions {
        &self.options
    }

    /// The headers and body for `response`, the answer to a request with `descriptors`.
    pub fn render(&self, descriptors: &[Descriptor], response: &RateLimitResponse) -> Rendered {
        let options = &self.options;
        let mut rendered = Rendered::default();
        if options.is_off() {
            return rendered;
        }
        let statuses = &response.statuses;
        if options.limit_headers
            && let Some(status) = pick_status(statuses).and_then(|i| statuses.get(i))
        {
            rendered
                .headers
                .extend(limit_headers(&options.limit_header_names, status));
        }
        if options.ietf_headers
            && let Some(fields) = ietf_fields(descriptors, statuses)
        {
            rendered
                .headers
                .push(("RateLimit-Policy".to_owned(), fields.policy));
            rendered
                .headers
                .push(("RateLimit".to_owned(), fields.limit));
        }
        if response.overall == Code::OverLimit && (options.retry_after || options.raw_body) {
            let retry = overall_retry_after(statuses).map(|wait| {
                retry_after_seconds(wait, self.jitter.sample(options.retry_after_jitter))
            });
            if options.retry_after
                && let Some(seconds) = retry
            {
                rendered
                    .headers
                    .push(("Retry-After".to_owned(), seconds.to_string()));
            }
            if options.raw_body {
                rendered.raw_body = Some(raw_body(descriptors, statuses, retry).into_bytes());
            }
        }
        rendered
    }
}
