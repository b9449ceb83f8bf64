//! The headers a proxy rewrites on each hop: hop-by-hop headers removed, the client's address appended to `x-forwarded-for`.

use std::net::IpAddr;

use http::HeaderMap;
use http::header::{self, HeaderName, HeaderValue};

/// Headers that describe one hop, never forwarded.
static HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::TE,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
];

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Appends `peer` to `x-forwarded-for` (`rendered`: `peer` as a value already, when the header is absent) and sets `x-forwarded-proto`.
pub(super) fn append_forwarded_for(
    headers: &mut HeaderMap,
    peer: IpAddr,
    rendered: Option<&HeaderValue>,
) {
    let value = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(existing) if !existing.is_empty() => {
            HeaderValue::from_str(&format!("{existing}, {peer}")).ok()
        }
        _ => match rendered {
            Some(value) => Some(value.clone()),
            None => HeaderValue::from_str(&peer.to_string()).ok(),
        },
    };
    if let Some(value) = value {
        headers.insert(X_FORWARDED_FOR.clone(), value);
    }
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static("http"));
}
