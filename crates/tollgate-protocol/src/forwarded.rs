//! The trusted client address behind proxies: Envoy's `xff_num_trusted_hops` reading of `X-Forwarded-For`.
//!
//! Shared by `tollgate proxy` and the app middleware of
//! `tollgate-middleware`, so both key a client the same way, and a client
//! that sends its own `X-Forwarded-For` cannot buy a fresh bucket.

use std::net::IpAddr;

use http::HeaderMap;

/// The trusted client address: the peer, or with `trusted_hops` proxies in
/// front, the address `trusted_hops` entries from the right of
/// `X-Forwarded-For` (every `X-Forwarded-For` line in order, comma-separated
/// entries), falling back to the peer when the header is shorter or that
/// entry is not an address.
pub fn trusted_client_address(peer: IpAddr, headers: &HeaderMap, trusted_hops: u32) -> IpAddr {
    if trusted_hops == 0 {
        return peer;
    }
    let hops = trusted_hops as usize;
    headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.rsplit(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .nth(hops - 1)
        .and_then(|entry| entry.parse().ok())
        .unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spoofed_forwarded_for_does_not_change_the_client_address() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "203.0.113.7".parse().unwrap());
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(trusted_client_address(peer, &h, 0), peer);
        h.insert("x-forwarded-for", "203.0.113.7, 10.1.1.1".parse().unwrap());
        assert_eq!(
            trusted_client_address(peer, &h, 1),
            "10.1.1.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            trusted_client_address(peer, &h, 2),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(trusted_client_address(peer, &h, 3), peer);
        // Several lines are one list, in order.
        h.append("x-forwarded-for", "192.0.2.9".parse().unwrap());
        assert_eq!(
            trusted_client_address(peer, &h, 1),
            "192.0.2.9".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            trusted_client_address(peer, &h, 3),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
    }
}
