//! Envoy's own configuration messages, field for field as Envoy 1.40 reads them from YAML.
//!
//! `LocalRateLimit` (`envoy.extensions.filters.http.local_ratelimit.v3`), the
//! route `RateLimit` entries that produce descriptors, and the small common
//! messages they use (`TokenBucket`, `RuntimeFractionalPercent`,
//! `HeaderValueOption`, `HttpStatus`). Unknown fields are errors, as in
//! Envoy's strict validation. Fields Tollgate does not implement are
//! declared so that their use is a clear error instead of an unknown field.

use std::time::Duration;

use http::StatusCode;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::path::{ConfigPath, FieldError};

/// The type URL of `LocalRateLimit`.
pub const LOCAL_RATELIMIT_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
/// The type URL of `udpa.type.v1.TypedStruct` (and its `xds.type.v3` twin).
pub const TYPED_STRUCT_TYPES: [&str; 2] = [
    "type.googleapis.com/udpa.type.v1.TypedStruct",
    "type.googleapis.com/xds.type.v3.TypedStruct",
];
/// The filter name Istio EnvoyFilters insert.
pub const LOCAL_RATELIMIT_FILTER: &str = "envoy.filters.http.local_ratelimit";

/// Reads `enable_x_ratelimit_headers` (at `at`): `OFF` (default) or `DRAFT_VERSION_03`.
pub fn x_ratelimit_headers(value: Option<&str>, at: &ConfigPath) -> Result<bool, FieldError> {
    match value {
        None | Some("OFF") => Ok(false),
        Some("DRAFT_VERSION_03") => Ok(true),
        Some(other) => Err(at.error(format!("`{other}` is not OFF or DRAFT_VERSION_03"))),
    }
}

/// Reads a `stage` (at `at`): 0 (default) to 10.
pub fn stage(value: Option<u32>, at: &ConfigPath) -> Result<u32, FieldError> {
    match value.unwrap_or(0) {
        stage @ 0..=10 => Ok(stage),
        stage => Err(at.error(format!("{stage} is above 10"))),
    }
}

/// Reads a limited reply's status (at `at`): 429 by default, and for anything below 400, as Envoy does.
pub fn limited_status(
    status: Option<&HttpStatusConfig>,
    at: &ConfigPath,
) -> Result<StatusCode, FieldError> {
    match status.map(|s| s.code) {
        None => Ok(StatusCode::TOO_MANY_REQUESTS),
        Some(code) if code < 400 => Ok(StatusCode::TOO_MANY_REQUESTS),
        Some(code) => StatusCode::from_u16(code).map_err(|_| {
            at.key("code")
                .error(format!("{code} is not an HTTP status"))
        }),
    }
}

/// `envoy.type.v3.TokenBucket`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBucketConfig {
    /// Capacity and initial content.
    pub max_tokens: u32,
    /// Tokens added per `fill_interval` (default 1).
    pub tokens_per_fill: Option<u32>,
    /// The refill period; at least 50 ms for the local filter.
    #[serde(deserialize_with = "tollgate_core::duration::deserialize")]
    pub fill_interval: Duration,
}

/// `envoy.type.v3.FractionalPercent`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FractionalPercent {
    /// The numerator.
    #[serde(default)]
    pub numerator: u32,
    /// `HUNDRED` (default), `TEN_THOUSAND` or `MILLION`.
    pub denominator: Option<String>,
}

/// `envoy.config.core.v3.RuntimeFractionalPercent`; the runtime key is accepted and not read (no runtime layer).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeFractionalPercent {
    /// The fraction used.
    pub default_value: FractionalPercent,
    /// A runtime key (Tollgate has no runtime; the default value applies).
    pub runtime_key: Option<String>,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderValueConfig {
    /// The header name.
    pub key: String,
    /// Its value.
    #[serde(default)]
    pub value: String,
}

/// `envoy.config.core.v3.HeaderValueOption`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderValueOptionConfig {
    /// The header.
    pub header: HeaderValueConfig,
    /// Deprecated: append (true) or overwrite (false).
    pub append: Option<bool>,
    /// `APPEND_IF_EXISTS_OR_ADD` (default), `ADD_IF_ABSENT`, `OVERWRITE_IF_EXISTS_OR_ADD`, `OVERWRITE_IF_EXISTS`.
    pub append_action: Option<String>,
    /// Keep a header whose value is empty.
    #[serde(default)]
    pub keep_empty_value: bool,
}

/// `envoy.type.v3.HttpStatus`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpStatusConfig {
    /// The status code.
    pub code: u16,
}

/// One entry of a local descriptor (`RateLimitDescriptor.Entry`); an empty value is a wildcard.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorEntryConfig {
    /// The key.
    pub key: String,
    /// The value; empty = every value gets its own bucket.
    #[serde(default)]
    pub value: String,
}

/// `LocalRateLimitDescriptor`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalDescriptorConfig {
    /// The entries, matched exactly and in order.
    pub entries: Vec<DescriptorEntryConfig>,
    /// This descriptor's bucket.
    pub token_bucket: Option<TokenBucketConfig>,
    /// Consume and count but never deny.
    #[serde(default)]
    pub shadow_mode: bool,
}

/// `envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit`, possibly wrapped.
///
/// The same message also reads the two wrappers Istio writes around it: a
/// directly typed config (`"@type": …LocalRateLimit` beside the fields) and a
/// `udpa.type.v1.TypedStruct` (`"@type"`, `type_url`, `value`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalRateLimitConfig {
    /// The type URL of this message or of a TypedStruct.
    #[serde(rename = "@type")]
    pub type_url_at: Option<String>,
    /// The TypedStruct's payload type.
    pub type_url: Option<String>,
    /// The TypedStruct's payload.
    pub value: Option<Box<LocalRateLimitConfig>>,

    /// Stats prefix (required by Envoy).
    pub stat_prefix: Option<String>,
    /// The limited reply's status (< 400 becomes 429).
    pub status: Option<HttpStatusConfig>,
    /// The default bucket.
    pub token_bucket: Option<TokenBucketConfig>,
    /// Fraction of requests that consult the limiter (default 0 %).
    pub filter_enabled: Option<RuntimeFractionalPercent>,
    /// Fraction of consulted requests where a denial is enforced (default 0 %).
    pub filter_enforced: Option<RuntimeFractionalPercent>,
    /// Headers on the limited reply.
    #[serde(default)]
    pub response_headers_to_add: Vec<HeaderValueOptionConfig>,
    /// Headers on the upstream request when limited but not enforced.
    #[serde(default)]
    pub request_headers_to_add_when_not_enforced: Vec<HeaderValueOptionConfig>,
    /// Per-descriptor buckets.
    #[serde(default)]
    pub descriptors: Vec<LocalDescriptorConfig>,
    /// Only route `rate_limits` of this stage feed the filter.
    pub stage: Option<u32>,
    /// One limiter per downstream connection.
    #[serde(default)]
    pub local_rate_limit_per_downstream_connection: bool,
    /// `OFF` or `DRAFT_VERSION_03`.
    pub enable_x_ratelimit_headers: Option<String>,
    /// `OVERRIDE`, `INCLUDE` or `IGNORE` (virtual hosts: Tollgate has none, so all three read the route's).
    pub vh_rate_limits: Option<String>,
    /// Charge the default bucket even when a descriptor matched (default true).
    pub always_consume_default_token_bucket: Option<bool>,
    /// gRPC: grpc-status 8 instead of 14.
    #[serde(default)]
    pub rate_limited_as_resource_exhausted: bool,
    /// Not supported (needs a local cluster membership).
    pub local_cluster_rate_limit: Option<IgnoredAny>,
    /// Descriptor generation inside the filter.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitConfig>,
    /// LRU size per wildcard descriptor (default 20).
    pub max_dynamic_descriptors: Option<u32>,
    /// `Retry-After` on the enforced 429.
    #[serde(default)]
    pub enable_retry_after_header: bool,
}

/// A route `RateLimit` entry: its actions build one descriptor.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// The stage (0..10).
    pub stage: Option<u32>,
    /// Runtime key to disable the entry; Tollgate has no runtime, so the entry is always used
    /// by the global filter and skipped by the local one, as Envoy does.
    pub disable_key: Option<String>,
    /// The actions, each appending one entry.
    pub actions: Vec<ActionConfig>,
    /// Not supported.
    pub limit: Option<IgnoredAny>,
    /// What a request costs on this entry's descriptor (default 1).
    pub hits_addend: Option<HitsAddendConfig>,
    /// Not supported.
    pub apply_on_stream_done: Option<IgnoredAny>,
}

/// `RateLimit.HitsAddend`: a fixed cost, or one substitution that yields it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HitsAddendConfig {
    /// A fixed cost, 0 to 1 000 000 000.
    pub number: Option<u64>,
    /// A substitution format; the proxy reads `%REQ(header)%`.
    pub format: Option<String>,
    /// Refunds; not supported.
    #[serde(default)]
    pub is_negative_hits: bool,
    /// Tollgate's own: what a request carrying the cost header more than once costs.
    #[serde(default)]
    pub repeated_header: RepeatedCostHeader,
}

/// What a request with the `%REQ(header)%` cost header more than once costs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RepeatedCostHeader {
    /// A 400 naming the header: a client cannot race a trusted hop's value with its own.
    #[default]
    Refuse,
    /// The last value, the one the nearest hop appended (for a trusted hop that appends rather than replaces).
    Last,
}

/// An empty message (`remote_address: {}`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// One rate-limit action; exactly one field is set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionConfig {
    /// `("source_cluster", <service cluster>)`.
    pub source_cluster: Option<Empty>,
    /// `("destination_cluster", <routed cluster>)`.
    pub destination_cluster: Option<Empty>,
    /// `(descriptor_key, <header value>)`.
    pub request_headers: Option<RequestHeadersAction>,
    /// `("remote_address", <trusted client address>)`.
    pub remote_address: Option<Empty>,
    /// `(descriptor_key or "generic_key", descriptor_value)`.
    pub generic_key: Option<GenericKeyAction>,
    /// `(descriptor_key or "header_match", descriptor_value)` when the headers match.
    pub header_value_match: Option<HeaderValueMatchAction>,
    /// `("masked_remote_address", "<ip>/<len>")`.
    pub masked_remote_address: Option<MaskedRemoteAddressAction>,
    /// `(descriptor_key, <query parameter value>)`.
    pub query_parameters: Option<QueryParametersAction>,
    /// Not supported.
    pub metadata: Option<IgnoredAny>,
    /// Not supported.
    pub dynamic_metadata: Option<IgnoredAny>,
    /// Not supported.
    pub extension: Option<IgnoredAny>,
    /// Not supported.
    pub query_parameter_value_match: Option<IgnoredAny>,
    /// Not supported.
    pub remote_address_match: Option<IgnoredAny>,
}

/// `RateLimit.Action.RequestHeaders`; `:method`, `:path`, `:authority` and `:scheme` name the pseudo-headers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestHeadersAction {
    /// The header read.
    pub header_name: String,
    /// The entry's key.
    pub descriptor_key: String,
    /// Omit the entry (instead of dropping the descriptor) when the header is absent.
    #[serde(default)]
    pub skip_if_absent: bool,
}

/// `RateLimit.Action.GenericKey`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenericKeyAction {
    /// The entry's value.
    pub descriptor_value: String,
    /// The entry's key (default `generic_key`).
    pub descriptor_key: Option<String>,
    /// Not used (formatter substitution is off by default in Envoy).
    pub default_value: Option<String>,
}

/// `RateLimit.Action.HeaderValueMatch`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderValueMatchAction {
    /// The entry's value.
    pub descriptor_value: String,
    /// The entry's key (default `header_match`).
    pub descriptor_key: Option<String>,
    /// Append when the headers match (true, default) or when they do not (false).
    pub expect_match: Option<bool>,
    /// All must match.
    pub headers: Vec<HeaderMatcherConfig>,
    /// Not used.
    pub default_value: Option<String>,
}

/// `envoy.config.route.v3.HeaderMatcher`, the string forms.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatcherConfig {
    /// The header (pseudo-headers allowed).
    pub name: String,
    /// Deprecated exact match.
    pub exact_match: Option<String>,
    /// Deprecated prefix match.
    pub prefix_match: Option<String>,
    /// Deprecated suffix match.
    pub suffix_match: Option<String>,
    /// Deprecated contains match.
    pub contains_match: Option<String>,
    /// The header is present (true) or absent (false).
    pub present_match: Option<bool>,
    /// A string matcher.
    pub string_match: Option<StringMatcherConfig>,
    /// Invert the result.
    #[serde(default)]
    pub invert_match: bool,
    /// Not supported.
    pub safe_regex_match: Option<IgnoredAny>,
    /// Not supported.
    pub range_match: Option<IgnoredAny>,
}

/// `envoy.type.matcher.v3.StringMatcher`, without regular expressions.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StringMatcherConfig {
    /// Equal.
    pub exact: Option<String>,
    /// Starts with.
    pub prefix: Option<String>,
    /// Ends with.
    pub suffix: Option<String>,
    /// Contains.
    pub contains: Option<String>,
    /// Compare ASCII case-insensitively.
    #[serde(default)]
    pub ignore_case: bool,
    /// Not supported.
    pub safe_regex: Option<IgnoredAny>,
}

/// `RateLimit.Action.MaskedRemoteAddress`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskedRemoteAddressAction {
    /// IPv4 prefix length (default 32).
    pub v4_prefix_mask_len: Option<u8>,
    /// IPv6 prefix length (default 128).
    pub v6_prefix_mask_len: Option<u8>,
}

/// `RateLimit.Action.QueryParameters`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryParametersAction {
    /// The query parameter read.
    pub query_parameter_name: String,
    /// The entry's key.
    pub descriptor_key: String,
    /// Omit the entry when the parameter is absent.
    #[serde(default)]
    pub skip_if_absent: bool,
}

/// Istio's `EnvoyFilter` resource, only as far as local rate limits go.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvoyFilter {
    /// `networking.istio.io/v1alpha3` (or v1).
    pub api_version: Option<String>,
    /// `EnvoyFilter`.
    pub kind: String,
    /// Not read.
    pub metadata: Option<IgnoredAny>,
    /// The patches.
    pub spec: EnvoyFilterSpec,
}

/// `EnvoyFilter.spec`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvoyFilterSpec {
    /// Not read: the proxy applies the filter to itself.
    pub workload_selector: Option<IgnoredAny>,
    /// Not read.
    pub target_refs: Option<IgnoredAny>,
    /// Not read.
    pub priority: Option<IgnoredAny>,
    /// The patches, in order.
    #[serde(default)]
    pub config_patches: Vec<ConfigPatch>,
}

/// One `configPatches` item.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigPatch {
    /// `HTTP_FILTER`, `HTTP_ROUTE`, `VIRTUAL_HOST`, …
    pub apply_to: String,
    /// Not read (the context and listener are this proxy's).
    #[serde(rename = "match")]
    pub match_: Option<IgnoredAny>,
    /// The patch.
    pub patch: Patch,
}

/// `configPatches[].patch`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    /// `INSERT_BEFORE`, `INSERT_FIRST`, `ADD`, `MERGE`, …
    pub operation: Option<String>,
    /// Not read.
    pub filter_class: Option<IgnoredAny>,
    /// The value: a filter (`name` + `typed_config`) or a route merge (`typed_per_filter_config`).
    pub value: Option<serde_json::Value>,
}
