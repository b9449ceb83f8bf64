//! `tollgate serve`: answers Envoy's rate limit service (RLS v3) over gRPC from a limits file or directory.
//!
//! [`args`] holds the flags, [`combine`] combines them with
//! envoyproxy/ratelimit's environment variables, [`run()`] loads the
//! limits, builds the engine and the store, and [`listen`] serves gRPC and
//! HTTP until a signal; [`overrides_args`] holds the overrides API's flags
//! and [`xds_args`] those of limits from an xDS management server.

mod args;
mod combine;
mod listen;
mod overrides_args;
mod run;
mod store_connect;
#[cfg(test)]
mod tests;
mod xds_args;

pub use args::ServeArgs;
pub use run::run;
pub use xds_args::is_known_config_type;
