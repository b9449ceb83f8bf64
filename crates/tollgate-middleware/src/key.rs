//! [`KeyExtractor`]: which caller a request counts against, from a built-in source or the app's own [`KeySource`].

use std::fmt;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;
use smallvec::SmallVec;
use tollgate_protocol::forwarded::trusted_client_address;

/// The key of a request that has no header or API key for a header-based
/// extractor (or whose [`KeySource`] returns `None`): all such requests share it.
///
/// A missing client address is never this key: it is an error
/// ([`NoClientAddress`]), since every request would then share one bucket.
pub const ANONYMOUS: &str = "anonymous";

/// The app's own key for a request: a JWT claim, a tenant from the path, an
/// API key looked up in a map. Any `Fn(&Parts) -> Option<String>` closure is one.
///
/// `None` means the request has no key; it then counts against the shared
/// key [`ANONYMOUS`]. Return an error key of your own instead
/// (`Some("unauthenticated".into())`) to keep such requests apart.
///
/// ```
/// use tollgate_middleware::KeyExtractor;
///
/// // The tenant is the first path segment: /acme/orders counts against "acme".
/// let by_tenant = KeyExtractor::custom(|parts: &http::request::Parts| {
///     parts.uri.path().split('/').nth(1).map(str::to_owned)
/// });
/// let request = http::Request::get("/acme/orders").body(()).unwrap();
/// let (parts, ()) = request.into_parts();
/// assert_eq!(by_tenant.extract(&parts).unwrap(), "acme");
/// ```
pub trait KeySource: Send + Sync + 'static {
    /// The key of the request whose head is `parts`.
    fn key(&self, parts: &Parts) -> Option<String>;
}

impl<F> KeySource for F
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn key(&self, parts: &Parts) -> Option<String> {
        self(parts)
    }
}

/// Where a request's key comes from.
#[derive(Clone)]
#[non_exhaustive]
pub enum KeyExtractor {
    /// The client address: the connection's peer (a `SocketAddr` request
    /// extension, axum's `ConnectInfo<SocketAddr>` with the `axum` feature,
    /// tonic's `TcpConnectInfo` with the `tonic` feature), or with `trusted_hops` proxies in
    /// front, the entry that many from the right of `X-Forwarded-For`
    /// (`tollgate_protocol::forwarded`, as `tollgate proxy` reads it).
    /// A request without a peer address is an error ([`NoClientAddress`]):
    /// the layer answers 500, it never counts it against a shared key.
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
    /// The app's own [`KeySource`] (see [`KeyExtractor::custom`]).
    Custom(Arc<dyn KeySource>),
}

/// A [`KeyExtractor::ClientAddress`] found no peer address on a request:
/// the app was served without connection info (axum: turn on the `axum`
/// feature and serve `into_make_service_with_connect_info::<SocketAddr>()`;
/// hyper: insert the peer `SocketAddr` into each request's extensions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoClientAddress;

impl fmt::Display for NoClientAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the rate limit is keyed by client address, but the request carries no peer address: \
             serve the app with connection info (axum: the `axum` feature and `into_make_service_with_connect_info::<SocketAddr>()`; \
             hyper: insert the peer `SocketAddr` into the request's extensions)",
        )
    }
}

impl std::error::Error for NoClientAddress {}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyExtractor::ClientAddress { trusted_hops } => f
                .debug_struct("ClientAddress")
                .field("trusted_hops", trusted_hops)
                .finish(),
            KeyExtractor::Header(name) => f.debug_tuple("Header").field(name).finish(),
            KeyExtractor::ApiKey { header } => {
                f.debug_struct("ApiKey").field("header", header).finish()
            }
            KeyExtractor::RouteAnd(inner) => f.debug_tuple("RouteAnd").field(inner).finish(),
            KeyExtractor::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl KeyExtractor {
    /// The client address with no trusted proxies.
    pub fn client_address() -> Self {
        KeyExtractor::ClientAddress { trusted_hops: 0 }
    }

    /// The app's own key: a closure over the request's head, or any [`KeySource`].
    pub fn custom(source: impl KeySource) -> Self {
        KeyExtractor::Custom(Arc::new(source))
    }

    /// The key of the request whose head is `parts` ([`ANONYMOUS`] when a
    /// header, API key or custom source finds none).
    ///
    /// # Errors
    ///
    /// [`NoClientAddress`] when the key is the client address and the
    /// request carries no peer address.
    pub fn extract(&self, parts: &Parts) -> Result<String, NoClientAddress> {
        let mut key = KeyBytes::new();
        self.write_key(parts, &mut key)?;
        Ok(String::from_utf8_lossy(&key).into_owned())
    }

    /// Appends the key of the request whose head is `parts` to `out`, as
    /// UTF-8: [`extract`](Self::extract) without allocating, unless a custom
    /// source's key or a key longer than `out`'s inline room.
    pub(crate) fn write_key(
        &self,
        parts: &Parts,
        out: &mut KeyBytes,
    ) -> Result<(), NoClientAddress> {
        let headers = &parts.headers;
        let found = match self {
            KeyExtractor::ClientAddress { trusted_hops } => {
                let peer = peer_address(parts).ok_or(NoClientAddress)?;
                write_address(
                    out,
                    trusted_client_address(peer.ip(), headers, *trusted_hops),
                );
                return Ok(());
            }
            KeyExtractor::Header(name) => header_text(parts, name),
            KeyExtractor::ApiKey { header } => headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .or_else(|| header_text(parts, header)),
            KeyExtractor::RouteAnd(inner) => {
                out.extend_from_slice(route(parts).as_bytes());
                out.push(b' ');
                return inner.write_key(parts, out);
            }
            KeyExtractor::Custom(source) => {
                let key = source.key(parts);
                out.extend_from_slice(key.as_deref().unwrap_or(ANONYMOUS).as_bytes());
                return Ok(());
            }
        };
        out.extend_from_slice(found.unwrap_or(ANONYMOUS).as_bytes());
        Ok(())
    }
}

/// A request's key as bytes, on the stack when it fits (an IPv6 address
/// does); the layer writes it into its counter keys, after a limit's prefix.
pub(crate) type KeyBytes = SmallVec<[u8; 128]>;

/// Appends `address` as its `Display` writes it; an IPv4 address without the formatter.
fn write_address(out: &mut KeyBytes, address: IpAddr) {
    match address {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if octet >= 100 {
                    out.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    out.push(b'0' + octet / 10 % 10);
                }
                out.push(b'0' + octet % 10);
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

fn header_text<'a>(parts: &'a Parts, name: &HeaderName) -> Option<&'a str> {
    let value = parts.headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then_some(value)
}

/// The peer: a `SocketAddr` extension (hyper apps insert it), else axum's
/// `ConnectInfo<SocketAddr>`, else tonic's `TcpConnectInfo`.
fn peer_address(parts: &Parts) -> Option<SocketAddr> {
    let extensions = &parts.extensions;
    let plain = extensions.get::<SocketAddr>().copied();
    #[cfg(feature = "axum")]
    let plain = plain.or_else(|| {
        extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|info| info.0)
    });
    #[cfg(feature = "tonic")]
    let plain = plain.or_else(|| {
        extensions
            .get::<tonic::transport::server::TcpConnectInfo>()
            .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
    });
    plain
}

/// The route: axum's `MatchedPath` when the router matched one, else the path.
fn route(parts: &Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(matched) = parts.extensions.get::<axum::extract::MatchedPath>() {
        return matched.as_str();
    }
    parts.uri.path()
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{KeyBytes, write_address};

    #[test]
    fn an_address_is_written_as_its_display_writes_it() {
        let mut addresses: Vec<IpAddr> = [
            "0.0.0.0",
            "9.10.99.100",
            "255.255.255.255",
            "10.0.0.1",
            "::",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:10.0.0.1",
            "fe80::1:2:3:4",
        ]
        .iter()
        .map(|a| a.parse().expect("an address"))
        .collect();
        addresses.extend((0..=255).map(|o| IpAddr::from([o, 255 - o, o / 3, 7])));
        for address in addresses {
            let mut out = KeyBytes::new();
            write_address(&mut out, address);
            assert_eq!(out.as_slice(), address.to_string().as_bytes());
        }
    }
}
