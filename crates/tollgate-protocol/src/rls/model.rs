//! The RLS v3 request and response as plain Rust, field for field with `envoy.service.ratelimit.v3`.
//!
//! Services decide on these types and front ends map their wire forms onto
//! them ([`super::convert`] for protobuf). Hits follow upstream: a
//! descriptor's `hits_addend` when present (0 checks without consuming),
//! else the request's `hits_addend`, where 0 means 1.

use std::time::Duration;

use tollgate_core::Unit;

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

impl Code {
    /// The protobuf enum name: `OK` or `OVER_LIMIT`.
    pub const fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::OverLimit => "OVER_LIMIT",
        }
    }
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
    pub fn no_limit() -> Self {
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
    pub fn unlimited() -> Self {
        DescriptorStatus {
            limit_remaining: u32::MAX,
            ..DescriptorStatus::no_limit()
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
    /// How long to hold an OK request before passing it on: the longest
    /// wait a leaky-bucket shaper (`delay`) gave it; zero otherwise. The
    /// RLS wire has no field for it: the service holds its answer this long.
    pub delay: std::time::Duration,
    /// The store answered every counted descriptor from the quick-deny
    /// cache, without a call (upstream's "over limit with local cache");
    /// for statistics only, the wire has no field for it.
    pub from_local_cache: bool,
}
