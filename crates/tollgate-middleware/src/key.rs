//! [`KeyExtractor`]: which caller a request counts against.

use std::net::SocketAddr;

use http::{HeaderName, Request};
use tollgate_protocol::forwarded::trusted_client_address;

/// The key of a request that has none (no address, header or API key): all such requests share it.
pub const ANONYMOUS: &str = "anonymous";

/// Where a request's key comes from.
#[derive(Clone, Debug)]
pub enum KeyExtractor {
    /// The client address: the connection's peer (a `SocketAddr` request
    /// extension, or axum's `ConnectInfo<SocketAddr>` with the `axum` feature), or with `trusted_hops` proxies in
    /// front, the entry that many from the right of `X-Forwarded-For`
    /// (`tollgate_protocol::forwarded`, as `tollgate proxy` reads it).
    ClientAddress {
        /// Proxies in front of the app that append to `X-Forwarded-For` (0: trust none).
        trusted_hops: u32,
    },
    /// The value of a header (`x-tenant`).
    Header(HeaderName),
    /// An API key: the `Authorization: Bearer` token, else the value of `header` (`x-api-key`).
    ApiKey {
        /// The header holding the key when there is no bearer token.
        header: HeaderName,
    },
    /// The route (axum's `MatchedPath` with the `axum` feature, else the request path) and another key: `/login alice`.
    RouteAnd(Box<KeyExtractor>),
}

impl KeyExtractor {
    /// The client address with no trusted proxies.
    pub fn client_address() -> Self {
        KeyExtractor::ClientAddress { trusted_hops: 0 }
    }

    /// The key of `request` ([`ANONYMOUS`] when it has none).
    pub fn extract<B>(&self, request: &Request<B>) -> String {
        self.find(request).unwrap_or_else(|| ANONYMOUS.to_owned())
    }

    fn find<B>(&self, request: &Request<B>) -> Option<String> {
        let headers = request.headers();
        match self {
            KeyExtractor::ClientAddress { trusted_hops } => {
                let peer = peer_address(request)?;
                Some(trusted_client_address(peer.ip(), headers, *trusted_hops).to_string())
            }
            KeyExtractor::Header(name) => header_text(request, name),
            KeyExtractor::ApiKey { header } => headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(|token| token.trim().to_owned())
                .or_else(|| header_text(request, header)),
            KeyExtractor::RouteAnd(inner) => {
                let route = route(request);
                Some(format!("{route} {}", inner.extract(request)))
            }
        }
    }
}

fn header_text<B>(request: &Request<B>, name: &HeaderName) -> Option<String> {
    let value = request.headers().get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// The peer: a `SocketAddr` extension (hyper apps insert it), else axum's `ConnectInfo<SocketAddr>`.
fn peer_address<B>(request: &Request<B>) -> Option<SocketAddr> {
    let extensions = request.extensions();
    let plain = extensions.get::<SocketAddr>().copied();
    #[cfg(feature = "axum")]
    let plain = plain.or_else(|| {
        extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|info| info.0)
    });
    plain
}

/// The route: axum's `MatchedPath` when the router matched one, else the path.
fn route<B>(request: &Request<B>) -> String {
    #[cfg(feature = "axum")]
    if let Some(matched) = request.extensions().get::<axum::extract::MatchedPath>() {
        return matched.as_str().to_owned();
    }
    request.uri().path().to_owned()
}
