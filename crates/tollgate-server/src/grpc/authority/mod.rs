//! A front for the gRPC listener's HTTP/2 connections that makes `:authority` values h2 refuses acceptable before hyper sees them.
//!
//! Why it exists: Envoy's gRPC clients (`envoy_grpc`) send the *cluster
//! name* as `:authority` unless the filter sets `authority`, and Istio names
//! the rate limit cluster like
//! `outbound|8081||ratelimit.default.svc.cluster.local`. h2, under hyper,
//! parses `:authority` as a URI authority and resets every such stream
//! (`|` is no URI character), so every check fails and Envoy, failing open
//! by default, enforces no limit at all. envoyproxy/ratelimit (gRPC-Go)
//! accepts those names, and h2 has no switch to relax the check.
//!
//! How: [`AuthorityFront`] wraps each accepted socket. It reads the client
//! preface and frames up to the end of the first header block, handing
//! every earlier frame on at once, and decodes that block with
//! `loona-hpack` (`rewriter.rs`). If every `:authority` in it parses (the
//! usual case), it hands the held bytes on unchanged and steps out: the
//! connection is hyper's alone from then on. Otherwise it rewrites the
//! connection for its lifetime: each header block is decoded against the
//! client's dynamic table and re-encoded against a table that mirrors
//! hyper's, with each byte of `:authority` that is no URI character made
//! `_` (`sanitize.rs` says exactly how), and every other frame is passed on byte for byte (`inbound.rs`).
//! Only the client-to-server direction is ever looked at; the decision is
//! taken on the first header block, as Envoy sends one `:authority` per
//! connection.
//!
//! Bounds: frames no longer than the server's `SETTINGS_MAX_FRAME_SIZE`,
//! header blocks and decoded header lists no longer than its
//! `SETTINGS_MAX_HEADER_LIST_SIZE`, HPACK tables at the 4 096 octets hyper
//! uses. While rewriting, anything malformed or over a bound closes the
//! connection with an error, as h2 would; nothing panics.

mod error;
mod frame;
mod front;
mod inbound;
mod rewriter;
mod sanitize;
#[cfg(test)]
mod tests;

pub use error::FrontError;
pub use front::AuthorityFront;
pub use inbound::{Inbound, InboundLimits, Mode};
