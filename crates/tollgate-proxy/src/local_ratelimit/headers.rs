//! Headers of the local rate limit: the configured ones to add ([`HeaderToAdd`]), and what a bucket reports ([`BucketReport`]) as `x-ratelimit-*`.

use std::borrow::Cow;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::Decision;
use tollgate_core::duration::ceil_seconds;

use super::bucket_spec::BucketSpec;
use crate::config::envoy::HeaderValueOptionConfig;
use crate::config::{ConfigPath, FieldError};

/// A header to add, with Envoy's append semantics.
#[derive(Clone, Debug)]
pub struct HeaderToAdd {
    /// The name.
    pub name: HeaderName,
    /// The value.
    pub value: HeaderValue,
    /// Append beside existing values (true) or replace them (false).
    pub append: bool,
    /// Only add when absent.
    pub if_absent: bool,
}

impl HeaderToAdd {
    /// Compiles the `HeaderValueOption`s found at `at`.
    pub fn compile(
        options: &[HeaderValueOptionConfig],
        at: impl Into<ConfigPath>,
    ) -> Result<Vec<Self>, FieldError> {
        let at = at.into();
        if options.len() > 10 {
            return Err(at.error("at most 10 headers"));
        }
        options
            .iter()
            .enumerate()
            .filter(|(_, o)| o.keep_empty_value || !o.header.value.is_empty())
            .map(|(i, o)| {
                let at = at.index(i);
                let name = HeaderName::from_bytes(o.header.key.as_bytes()).map_err(|_| {
                    at.key("header")
                        .key("key")
                        .error(format!("`{}` is not a header name", o.header.key))
                })?;
                let value = HeaderValue::from_str(&o.header.value).map_err(|_| {
                    at.key("header")
                        .key("value")
                        .error("not a valid header value")
                })?;
                let (append, if_absent) = match o.append_action.as_deref() {
                    None => (o.append.unwrap_or(true), false),
                    Some("APPEND_IF_EXISTS_OR_ADD") => (true, false),
                    Some("ADD_IF_ABSENT") => (false, true),
                    Some("OVERWRITE_IF_EXISTS_OR_ADD") | Some("OVERWRITE_IF_EXISTS") => {
                        (false, false)
                    }
                    Some(other) => {
                        return Err(at
                            .key("append_action")
                            .error(format!("`{other}` is not a known action")));
                    }
                };
                Ok(HeaderToAdd {
                    name,
                    value,
                    append,
                    if_absent,
                })
            })
            .collect()
    }

    /// Adds this header to `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        if self.if_absent && headers.contains_key(&self.name) {
            return;
        }
        if self.append {
            headers.append(self.name.clone(), self.value.clone());
        } else {
            headers.insert(self.name.clone(), self.value.clone());
        }
    }
}

/// What one bucket said about a request, for the headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketReport {
    /// The policy name: `default` or the descriptor's `key=value;…`.
    pub name: Cow<'static, str>,
    /// `max_tokens`.
    pub limit: u64,
    /// Whole tokens left after this request.
    pub remaining: u64,
    /// Time until the next whole token when none is left (zero otherwise).
    pub next_token: Duration,
    /// The time an empty bucket takes to fill (the IETF policy window).
    pub window: Duration,
}

impl BucketReport {
    /// The report of the bucket `spec` named `name` after it decided `decision`.
    pub fn new(name: Cow<'static, str>, spec: &BucketSpec, decision: &Decision) -> Self {
        let next_token = if decision.remaining() > 0 {
            Duration::ZERO
        } else if decision.is_allowed() {
            let interval = spec.bucket.token_interval();
            let refill = spec.bucket.refill_time();
            decision
                .reset_after()
                .saturating_sub(refill.saturating_sub(interval))
        } else {
            decision.retry_after().unwrap_or(Duration::ZERO)
        };
        BucketReport {
            name,
            limit: spec.bucket.max_tokens(),
            remaining: decision.remaining(),
            next_token,
            window: spec.bucket.refill_time(),
        }
    }

    /// The `x-ratelimit-reset` value: 0 while a token remains, else whole seconds to the next one, rounded up.
    pub fn reset_seconds(&self) -> u64 {
        ceil_seconds(self.next_token)
    }
}

/// The X-RateLimit trio (draft 03) for a bucket report.
pub fn x_ratelimit_headers(report: &BucketReport) -> Vec<(HeaderName, HeaderValue)> {
    vec![
        (
            HeaderName::from_static("x-ratelimit-limit"),
            HeaderValue::from(report.limit),
        ),
        (
            HeaderName::from_static("x-ratelimit-remaining"),
            HeaderValue::from(report.remaining),
        ),
        (
            HeaderName::from_static("x-ratelimit-reset"),
            HeaderValue::from(report.reset_seconds()),
        ),
    ]
}
