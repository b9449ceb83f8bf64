//! Which `:authority` values hyper's HTTP/2 server (h2) accepts, and the percent-encoding that makes any other value acceptable.
//!
//! h2 parses `:authority` with [`http::uri::Authority`] and resets the
//! stream when that fails. Envoy's gRPC clients send the cluster name as
//! `:authority`, and Istio names clusters like
//! `outbound|8081||ratelimit.default.svc.cluster.local`, which fails.
//!
//! The mapping: a value that parses is left exactly as it is. In any other
//! value, every byte except ASCII letters, digits and `-._~` (RFC 3986's
//! unreserved characters) becomes `_`, so
//! `outbound|8081||ratelimit.default.svc.cluster.local` becomes
//! `outbound_8081__ratelimit.default.svc.cluster.local`: same length, same
//! positions, and a registered name with no `:`, `@`, `%` or brackets, so
//! it always parses. (Percent-encoding would not do: `http` refuses `%`
//! outside the userinfo.) The mapping is lossy on purpose and the original
//! is not kept: nothing in Tollgate reads `:authority`; a feature that ever
//! needs the client's value must take it from the decoded list in
//! `rewriter.rs` before this mapping. An empty value (which no mapping can
//! make valid) is dropped, as if the client had sent no `:authority`,
//! which h2 accepts.

use http::uri::Authority;

/// The pseudo-header this module is about.
pub const AUTHORITY: &[u8] = b":authority";

/// What every byte of an unacceptable value that is not unreserved becomes.
const REPLACEMENT: u8 = b'_';

/// Whether `byte` is one of RFC 3986's unreserved characters, kept as it is in a rewritten value.
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// Whether h2 accepts `value` as `:authority` (it parses as an [`Authority`]).
#[must_use]
pub fn is_acceptable(value: &[u8]) -> bool {
    Authority::try_from(value).is_ok()
}

/// The value to send on in place of an `:authority` of `value`: `value` itself when acceptable, every byte that is not unreserved replaced by `_` otherwise, `None` (drop the field) when empty.
#[must_use]
pub fn acceptable_authority(value: &[u8]) -> Option<Vec<u8>> {
    if value.is_empty() {
        None
    } else if is_acceptable(value) {
        Some(value.to_vec())
    } else {
        Some(
            value
                .iter()
                .map(|&byte| {
                    if is_unreserved(byte) {
                        byte
                    } else {
                        REPLACEMENT
                    }
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn istio_cluster_names_get_underscores_and_host_names_are_kept() {
        let istio = b"outbound|8081||ratelimit.default.svc.cluster.local";
        assert!(!is_acceptable(istio));
        assert_eq!(
            acceptable_authority(istio).as_deref(),
            Some(&b"outbound_8081__ratelimit.default.svc.cluster.local"[..])
        );
        for kept in [
            &b"ratelimit:8081"[..],
            b"tollgate",
            b"[::1]:8081",
            b"10.0.0.1",
        ] {
            assert!(is_acceptable(kept), "{kept:?}");
            assert_eq!(acceptable_authority(kept).as_deref(), Some(kept));
        }
        assert_eq!(acceptable_authority(b""), None);
        assert_eq!(acceptable_authority(b"a:b%").as_deref(), Some(&b"a_b_"[..]));
    }

    proptest! {
        #[test]
        fn every_rewritten_value_parses_and_keeps_its_length(value in proptest::collection::vec(any::<u8>(), 1..200)) {
            let rewritten = acceptable_authority(&value).expect("not empty");
            prop_assert!(is_acceptable(&rewritten));
            prop_assert_eq!(rewritten.len(), value.len());
            for (&before, &after) in value.iter().zip(&rewritten) {
                prop_assert!(after == before || after == REPLACEMENT);
            }
        }
    }
}
