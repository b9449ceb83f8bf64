//! [`GlobalRateLimit`]: the compiled `ratelimit` filter config and its RLS client.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use tollgate_protocol::rls::RlsClient;
use tollgate_protocol::rls::model::{self, RateLimitRequest};
use tollgate_protocol::rls::wire;

use tollgate_tls::ALPN_H2;

use crate::config::{ConfigPath, FieldError, GlobalRateLimitConfig, RateLimitServiceConfig, envoy};
use crate::descriptors::{self, Descriptor, DescriptorRule};
use crate::local_ratelimit::HeaderToAdd;

/// Envoy's default RLS deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(20);

/// A compiled global rate limit filter and its RLS client.
#[derive(Debug)]
pub struct GlobalRateLimit {
    /// The RLS domain.
    pub domain: String,
    /// The RLS address (None: the service runs in this process).
    pub address: Option<SocketAddr>,
    client: RlsClient,
    /// Deny when the call fails.
    pub failure_mode_deny: bool,
    /// The status then.
    pub status_on_error: StatusCode,
    /// The limited reply's status.
    pub rate_limited_status: StatusCode,
    /// gRPC status of the limited reply.
    pub grpc_status: u8,
    /// X-RateLimit headers from the statuses.
    pub x_ratelimit_headers: bool,
    /// `x-envoy-ratelimited: true` on the limited reply.
    pub x_envoy_ratelimited: bool,
    /// The filter's headers on the limited reply.
    pub response_headers_to_add: Vec<HeaderToAdd>,
    /// `Retry-After` on the limited reply.
    pub retry_after: bool,
    /// Filter-level rules.
    pub rate_limits: Option<Vec<DescriptorRule>>,
    /// The stage.
    pub stage: u32,
}

impl GlobalRateLimit {
    /// Compiles the filter config; the channel connects lazily (needs a
    /// Tokio runtime). `in_process` is the service of `rate_limit_service:
    /// {in_process: true}`, if this proxy runs one.
    pub fn compile(
        config: &GlobalRateLimitConfig,
        in_process: Option<&RlsClient>,
        at: &ConfigPath,
    ) -> Result<Self, FieldError> {
        if config.domain.is_empty() {
            return Err(at.key("domain").error("must not be empty"));
        }
        let timeout = match config.timeout {
            None => Some(DEFAULT_TIMEOUT),
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
        };
        let x_ratelimit_headers = envoy::x_ratelimit_headers(
            config.enable_x_ratelimit_headers.as_deref(),
            &at.key("enable_x_ratelimit_headers"),
        )?;
        let stage = envoy::stage(config.stage, &at.key("stage"))?;
        let client = rls_client(
            &config.rate_limit_service,
            in_process,
            &at.key("rate_limit_service"),
        )?;
        // A decision in this process is bounded by the store's own timeout
        // (`--store-timeout`), not by a timer per request.
        let client = if client.is_in_process() {
            client.with_timeout(None)
        } else {
            client.with_timeout(timeout)
        };
        Ok(GlobalRateLimit {
            domain: config.domain.clone(),
            address: config.rate_limit_service.address,
            client,
            failure_mode_deny: config.failure_mode_deny,
            status_on_error: match config.status_on_error.as_ref().map(|s| s.code) {
                None => StatusCode::INTERNAL_SERVER_ERROR,
                Some(c) => StatusCode::from_u16(c)
                    .ok()
                    .filter(|s| s.as_u16() >= 200)
                    .ok_or_else(|| {
                        at.key("status_on_error")
                            .key("code")
                            .error(format!("{c} is not an HTTP status"))
                    })?,
            },
            rate_limited_status: envoy::limited_status(
                config.rate_limited_status.as_ref(),
                &at.key("rate_limited_status"),
            )?,
            grpc_status: if config.rate_limited_as_resource_exhausted {
                8
            } else {
                14
            },
            x_ratelimit_headers,
            x_envoy_ratelimited: !config.disable_x_envoy_ratelimited_header,
            response_headers_to_add: HeaderToAdd::compile(
                &config.response_headers_to_add,
                at.key("response_headers_to_add"),
            )?,
            retry_after: config.enable_retry_after_header,
            rate_limits: descriptors::compile_filter_rules(
                &config.rate_limits,
                at.key("rate_limits"),
            )?,
            stage,
        })
    }

    /// The call's deadline (None: no deadline).
    pub fn timeout(&self) -> Option<Duration> {
        self.client.timeout()
    }

    /// One `ShouldRateLimit` call for `descriptors`, bounded by the timeout; what went wrong otherwise.
    pub async fn ask(&self, descriptors: &[Descriptor]) -> Result<wire::RateLimitResponse, String> {
        let request = RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: rls_descriptors(descriptors),
            hits_addend: 0,
        };
        // With tracing on, the service continues the request's trace.
        let mut metadata = http::HeaderMap::new();
        if tollgate_runtime::trace_context::enabled() {
            tollgate_runtime::trace_context::pass_on(&tracing::Span::current(), &mut metadata);
        }
        self.client
            .should_rate_limit_model(request, metadata)
            .await
            .map_err(|status| format!("{}: {}", status.code(), status.message()))
    }
}

/// The RLS model's descriptors for the proxy's: the same entries and costs (`hits_addend`).
pub fn rls_descriptors(descriptors: &[Descriptor]) -> Vec<model::Descriptor> {
    descriptors.to_vec()
}

/// The client of the service `config` names: plain HTTP/2, or TLS (with a
/// client certificate when given) when it has a `tls` block, or the
/// service in this process. A file that cannot be read or used is an error
/// at the `tls` field; `in_process` without a service here names the flag.
fn rls_client(
    config: &RateLimitServiceConfig,
    in_process: Option<&RlsClient>,
    at: &ConfigPath,
) -> Result<RlsClient, FieldError> {
    if config.in_process {
        if config.address.is_some() || config.tls.is_some() {
            return Err(at
                .key("in_process")
                .error("excludes `address` and `tls`: the service runs in this process"));
        }
        return in_process.cloned().ok_or_else(|| {
            at.key("in_process").error(
                "this proxy decides no limits itself: start it with --limits FILE (and --redis-url for a limit shared by several proxies)",
            )
        });
    }
    let Some(address) = config.address else {
        return Err(at
            .key("address")
            .error("is missing: give the service's `ip:port`, or `in_process: true`"));
    };
    let client = match &config.tls {
        None => RlsClient::connect_lazy(format!("http://{address}")),
        Some(tls) => {
            let connector = tls
                .files()
                .connector(&[ALPN_H2])
                .map_err(|e| at.key("tls").error(e.to_string()))?;
            RlsClient::connect_lazy_tls(format!("https://{address}"), connector)
        }
    };
    client.map_err(|e| at.key("address").error(e.to_string()))
}
