//! The limits file: parsing, validation, descriptor matching and hot reload (not built yet).
//!
//! This crate will own everything about rules and nothing about how counters
//! are stored: it depends on `tollgate-core` for the algorithms and is used
//! by the server and the proxy. See the server issue for its scope.
