//! The proxy's configuration: its own YAML, Istio `EnvoyFilter` files and bare `LocalRateLimit` configs.
//!
//! [`load_proxy_file`] reads the proxy YAML ([`ProxyConfig`]); a
//! `local_ratelimit_file` in it (or `--local-ratelimit` on the command line)
//! names a file read by [`load_local_ratelimit_file`], which accepts either
//! an Istio `EnvoyFilter` that inserts `envoy.filters.http.local_ratelimit`
//! or a bare `LocalRateLimit` (typed directly or as a `TypedStruct`).
//! Syntax and shape errors name `file:line:column`; semantic errors name the
//! file and the field ([`ConfigError`], [`ConfigPath`]).
//!
//! * [`proxy`]: [`ProxyConfig`], its listeners and admin listener;
//! * [`cluster`], [`route`], [`global`]: the clusters, the routes and the
//!   global rate limit of the proxy's YAML;
//! * [`envoy`]: Envoy's and Istio's shapes (`LocalRateLimit`, `EnvoyFilter`,
//!   rate limit actions);
//! * [`listener`]: a listener's connection limits, checked;
//! * [`load`]: reading and unwrapping the files;
//! * [`error`], [`path`]: what a problem says and where.
pub mod cluster;
pub mod envoy;
pub mod error;
pub mod global;
pub mod listener;
pub mod load;
pub mod path;
pub mod proxy;
pub mod route;

pub use self::cluster::{ClusterConfig, EndpointConfig, UpstreamTlsConfig};
pub use self::error::ConfigError;
pub use self::global::{GlobalRateLimitConfig, RateLimitServiceConfig};
pub use self::listener::{LimitSettings, ListenerLimits};
pub use self::load::{
    LocalRateLimitFile, load_local_ratelimit_file, load_proxy_file, unwrap_typed,
};
pub use self::path::{ConfigPath, FieldError};
pub use self::proxy::{AdminConfig, ListenerConfig, ListenerTlsConfig, ProxyConfig};
pub use self::route::{
    ConcurrencyLimitConfig, LimitReqConfig, ResponseContractConfig, RouteConfig,
};
