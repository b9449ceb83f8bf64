//! One TLS configuration for every Tollgate listener and client, on rustls with the `ring` provider.
//!
//! Must not know (the README's layout table): limits, gRPC services, HTTP routes, the proxy's config;
//! callers say which files and which ALPN protocols.
//!
//! * [`ServerTlsFiles`] names a listener's certificate, key and, for mutual
//!   TLS, the CA bundle client certificates must chain to and an optional
//!   allow-list of the names they must carry ([`SanAllowList`]).
//! * [`TlsAcceptor`] holds the running server configuration, swaps in a new
//!   one on [`TlsAcceptor::reload`] (a bad new file keeps the running one)
//!   and bounds each handshake in time; [`ServerStream`] is what an accept
//!   loop hands to hyper, plain or TLS, handshaking lazily on first use.
//! * [`ClientTlsFiles`] names the CA, optional client certificate and server
//!   name a client uses; [`TlsConnector`] connects with it.

#![forbid(unsafe_code)]

mod acceptor;
mod client;
mod error;
mod pem;
mod provider;
mod san;
mod server;
mod stream;

pub use acceptor::{DEFAULT_HANDSHAKE_TIMEOUT, TlsAcceptor};
pub use client::{ClientTlsFiles, ClientTlsStream, TlsConnector};
pub use error::TlsError;
pub use san::SanAllowList;
pub use server::ServerTlsFiles;
pub use stream::{PeerNames, ServerStream};

/// The ALPN protocol id of HTTP/2 (gRPC's only protocol).
pub const ALPN_H2: &[u8] = b"h2";
/// The ALPN protocol id of HTTP/1.1.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";
