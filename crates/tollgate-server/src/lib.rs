//! `tollgate serve`: Envoy RLS v3 over gRPC, an HTTP JSON API, metrics and health (not built yet).
//!
//! It will sit on `tollgate-rules` and `tollgate-store` and know nothing of
//! the proxy.
