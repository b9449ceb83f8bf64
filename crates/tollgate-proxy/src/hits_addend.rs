//! A descriptor's cost: Envoy's `hits_addend` on a `RateLimit` entry, a fixed number or a request header's value.
//!
//! `hits_addend: {number: 5}` makes every descriptor of the entry cost 5;
//! `hits_addend: {format: "%REQ(x-cost)%"}` reads the cost from a request
//! header (a GraphQL gateway or an auth layer in front sets it). The cost
//! charges the descriptor's local bucket and rides to the rate limit service
//! as the descriptor's `hits_addend`; the default bucket is charged 1, as
//! Envoy does.
//!
//! Where Tollgate parts from Envoy 1.40, it is to stay a limit:
//! * a request without the header costs 1 (Envoy drops the whole descriptor,
//!   so a client that leaves the header out skips the limit);
//! * a value that is not a whole number from 0 to 1 000 000 000 (after
//!   trimming spaces) is a 400 naming the header, and nothing is charged
//!   (Envoy drops the descriptor);
//! * 0 checks without consuming, as on the rate limit service (Envoy's local
//!   filter denies it).

use std::fmt;

use http::request::Parts;

use crate::config::envoy::HitsAddendConfig;
use crate::config::{ConfigPath, FieldError};
use crate::descriptors::RequestHeader;

/// The largest cost Envoy accepts.
pub const MAX_HITS_ADDEND: u64 = 1_000_000_000;

/// A compiled `hits_addend`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HitsAddend {
    /// The same cost for every request.
    Number(u64),
    /// The cost a request header names.
    Header(RequestHeader),
}

/// A request whose cost header does not hold a cost: 400, nothing charged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidHitsAddend {
    /// The header read.
    pub header: String,
    /// What it held.
    pub value: String,
}

impl fmt::Display for InvalidHitsAddend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the `{}` header's `{}` is not a whole number of hits from 0 to {MAX_HITS_ADDEND}",
            self.header,
            self.value.escape_debug()
        )
    }
}

impl std::error::Error for InvalidHitsAddend {}

impl HitsAddend {
    /// Compiles the `hits_addend` found at `at`.
    pub fn compile(config: &HitsAddendConfig, at: &ConfigPath) -> Result<Self, FieldError> {
        if config.is_negative_hits {
            return Err(at
                .key("is_negative_hits")
                .error("refunds are not supported by the proxy"));
        }
        match (config.number, &config.format) {
            (Some(number), None) if number <= MAX_HITS_ADDEND => Ok(HitsAddend::Number(number)),
            (Some(number), None) => Err(at
                .key("number")
                .error(format!("{number} is above {MAX_HITS_ADDEND}"))),
            (None, Some(format)) => {
                let name = format
                    .strip_prefix("%REQ(")
                    .and_then(|rest| rest.strip_suffix(")%"))
                    .filter(|name| !name.is_empty())
                    .ok_or_else(|| {
                        at.key("format").error(format!(
                            "`{format}` is not `%REQ(header)%`, the one substitution the proxy reads"
                        ))
                    })?;
                Ok(HitsAddend::Header(RequestHeader::parse(
                    name,
                    &at.key("format"),
                )?))
            }
            _ => Err(at.error("set exactly one of number and format")),
        }
    }

    /// The cost of this request: `None` when the header is absent (the default cost, 1).
    pub fn cost(&self, parts: &Parts) -> Result<Option<u64>, InvalidHitsAddend> {
        match self {
            HitsAddend::Number(n) => Ok(Some(*n)),
            HitsAddend::Header(header) => {
                let Some(value) = header.value(parts) else {
                    return Ok(None);
                };
                value
                    .trim_matches([' ', '\t'])
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= MAX_HITS_ADDEND)
                    .map(Some)
                    .ok_or_else(|| InvalidHitsAddend {
                        header: header.to_string(),
                        value,
                    })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(yaml: &str) -> Result<HitsAddend, String> {
        let config: HitsAddendConfig = serde_saphyr::from_str(yaml).unwrap();
        HitsAddend::compile(&config, &ConfigPath::from("hits_addend")).map_err(|e| e.to_string())
    }

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().uri("/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_number_or_a_request_header_compiles() {
        assert_eq!(compile("number: 5"), Ok(HitsAddend::Number(5)));
        let header = compile("format: '%REQ(x-cost)%'").unwrap();
        assert_eq!(header.cost(&parts(&[("x-cost", "7")])), Ok(Some(7)));
        assert_eq!(header.cost(&parts(&[("x-cost", " 2 ")])), Ok(Some(2)));
        assert_eq!(header.cost(&parts(&[])), Ok(None));
    }

    #[test]
    fn what_the_proxy_cannot_honour_is_an_error_naming_the_field() {
        assert_eq!(
            compile("number: 1000000001").unwrap_err(),
            "hits_addend.number: 1000000001 is above 1000000000"
        );
        assert_eq!(
            compile("format: '%BYTES_RECEIVED%'").unwrap_err(),
            "hits_addend.format: `%BYTES_RECEIVED%` is not `%REQ(header)%`, the one substitution the proxy reads"
        );
        assert!(
            compile("{number: 1, format: '%REQ(x)%'}")
                .unwrap_err()
                .contains("exactly one")
        );
        assert!(
            compile("{number: 1, is_negative_hits: true}")
                .unwrap_err()
                .contains("hits_addend.is_negative_hits")
        );
    }

    #[test]
    fn a_header_that_is_not_a_cost_is_refused() {
        let header = compile("format: '%REQ(x-cost)%'").unwrap();
        for bad in ["abc", "-1", "2.5", "1000000001", ""] {
            let error = header.cost(&parts(&[("x-cost", bad)])).unwrap_err();
            assert_eq!(error.value, bad);
            assert!(error.to_string().contains("`x-cost` header"), "{error}");
        }
    }
}
