//! The crypto provider every configuration is built with: rustls's `ring` provider.
//!
//! `ring` is the provider already in the dependency tree (the Redis client's
//! rustls uses it) and builds without a C toolchain for aws-lc; naming it
//! per configuration means no process-wide default has to be installed.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The `ring` crypto provider, shared by every configuration.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
