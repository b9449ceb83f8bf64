//! The headers a proxy rewrites on each hop: hop-by-hop headers removed, the client's address appended to `x-forwarded-for`.

use std::net::IpAddr;

use http::HeaderMap;
use http::header::{self, HeaderName, HeaderValue};

/// Headers that describe one hop, never forwarded (`Connection` first).
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

/// The place of `name` in [`HOP_BY_HOP`], if it is one (a match on the
/// name's text: a few comparisons, no hashing).
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    match name.as_str() {
        "connection" => Some(0),
        "keep-alive" => Some(1),
        "proxy-connection" => Some(2),
        "transfer-encoding" => Some(3),
        "te" => Some(4),
        "upgrade" => Some(5),
        "proxy-authenticate" => Some(6),
        _ => None,
    }
}

/// Removes hop-by-hop headers, including those the `Connection` header names.
///
/// One pass over the names finds which are there, and only those are
/// removed: a lookup by name hashes it, and most messages carry none of
/// the seven or only `Connection`, so the seven lookups (twice a proxied
/// request) were most of the work. The names `Connection` lists are
/// looked up as they are written (no `HeaderName` made for each).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut present = [false; HOP_BY_HOP.len()];
    for name in headers.keys() {
        if let Some(index) = hop_by_hop_index(name) {
            present[index] = true;
        }
    }
    if present[0] {
        // Each `Connection` value in turn (a clone shares its bytes), the
        // header itself left in place until all of them are read.
        let mut next = 0;
        while let Some(value) = headers
            .get_all(header::CONNECTION)
            .iter()
            .nth(next)
            .cloned()
        {
            next += 1;
            for token in value.to_str().unwrap_or_default().split(',') {
                let token = token.trim();
                // The seven (`keep-alive` is the usual one) go below, `Connection` last.
                if !HOP_BY_HOP
                    .iter()
                    .any(|hop| hop.as_str().eq_ignore_ascii_case(token))
                {
                    // Not a header name (or absent): nothing is removed.
                    headers.remove(token);
                }
            }
        }
    }
    for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, there)| *there) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(headers: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn every_hop_by_hop_header_and_every_name_connection_lists_is_removed_the_rest_kept() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Hop-One"),
            ("connection", "x-hop-two ,, not a name, connection"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("proxy-authenticate", "Basic"),
            ("x-hop-one", "1"),
            ("x-hop-two", "2"),
            ("x-kept", "3"),
            ("host", "example.com"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        strip_hop_by_hop(&mut headers);
        assert_eq!(names(&headers), ["host", "x-kept"]);
        assert_eq!(headers["x-kept"], "3");
    }

    #[test]
    fn the_name_match_agrees_with_the_list() {
        for (index, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name), Some(index), "{name}");
        }
        assert_eq!(hop_by_hop_index(&header::HOST), None);
    }

    #[test]
    fn a_message_without_hop_by_hop_headers_is_left_as_it_is() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("example.com"));
        headers.append("x-many", HeaderValue::from_static("1"));
        headers.append("x-many", HeaderValue::from_static("2"));
        let before = headers.clone();
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers, before);
    }

    #[test]
    fn a_name_listed_in_connection_is_removed_with_all_its_values() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, HeaderValue::from_static("X-Trace"));
        headers.append("x-trace", HeaderValue::from_static("a"));
        headers.append("x-trace", HeaderValue::from_static("b"));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(names(&headers), ["content-length"]);
    }
}
