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
//! * a value that is not a whole number from 0 to 1 000 000 000 written in
//!   ASCII digits alone (no sign, no spaces or tabs) is a 400 naming the
//!   header, and nothing is charged (Envoy drops the descriptor);
//! * a header sent more than once is a 400 too, unless the entry says
//!   `repeated_header: last`: then the last value counts, the one the nearest
//!   hop appended. Taking the first would let a client's own header beat the
//!   one a trusted hop appends after it;
//! * 0 checks without consuming, as on the rate limit service (Envoy's local
//!   filter denies it).

use std::fmt;

use http::request::Parts;

use crate::config::envoy::{HitsAddendConfig, RepeatedCostHeader};
use crate::config::{ConfigPath, FieldError};
use crate::request_header::RequestHeader;

/// The largest cost Envoy accepts.
pub const MAX_HITS_ADDEND: u64 = 1_000_000_000;

/// A compiled `hits_addend`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HitsAddend {
    /// The same cost for every request.
    Number(u64),
    /// The cost a request header names, and what a repeated header costs.
    Header(RequestHeader, RepeatedCostHeader),
}

/// A request whose cost header does not hold one cost: 400, nothing charged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidHitsAddend {
    /// The header read.
    pub header: String,
    /// What is wrong with it.
    pub problem: CostProblem,
}

/// Why a cost header holds no cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CostProblem {
    /// The value is not ASCII digits naming 0 to [`MAX_HITS_ADDEND`].
    NotACost(String),
    /// The header came this many times (and the entry refuses repeats).
    Repeated(usize),
}

impl fmt::Display for InvalidHitsAddend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            CostProblem::NotACost(value) => write!(
                f,
                "the `{}` header's `{}` is not a whole number of hits from 0 to {MAX_HITS_ADDEND} in digits alone",
                self.header,
                value.escape_debug()
            ),
            CostProblem::Repeated(count) => write!(
                f,
                "the `{}` header came {count} times: a cost header must come once",
                self.header
            ),
        }
    }
}

/// The cost `text` names: ASCII digits alone (no sign, space or tab), at most [`MAX_HITS_ADDEND`].
pub fn parse_cost(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Digits alone, so the only failure left is overflow.
    text.parse::<u64>().ok().filter(|n| *n <= MAX_HITS_ADDEND)
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
                Ok(HitsAddend::Header(
                    RequestHeader::parse(name, &at.key("format"))?,
                    config.repeated_header,
                ))
            }
            _ => Err(at.error("set exactly one of number and format")),
        }
    }

    /// The cost of this request: `None` when the header is absent (the default cost, 1).
    pub fn cost(&self, parts: &Parts) -> Result<Option<u64>, InvalidHitsAddend> {
        let (header, repeated) = match self {
            HitsAddend::Number(n) => return Ok(Some(*n)),
            HitsAddend::Header(header, repeated) => (header, *repeated),
        };
        let invalid = |problem| InvalidHitsAddend {
            header: header.to_string(),
            problem,
        };
        let mut values = header.values(parts);
        if values.len() > 1 && repeated == RepeatedCostHeader::Refuse {
            return Err(invalid(CostProblem::Repeated(values.len())));
        }
        let Some(value) = values.pop() else {
            return Ok(None);
        };
        match parse_cost(&value) {
            Some(cost) => Ok(Some(cost)),
            None => Err(invalid(CostProblem::NotACost(value))),
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
        for bad in [
            "abc",
            "-1",
            "2.5",
            "1000000001",
            "",
            "+1",
            " 2 ",
            "1\t",
            "\t1",
            "1 000",
            "0x10",
            "١",
            "18446744073709551616",
            "99999999999999999999999999",
        ] {
            let error = header.cost(&parts(&[("x-cost", bad)])).unwrap_err();
            assert_eq!(error.problem, CostProblem::NotACost(bad.to_owned()));
            assert!(error.to_string().contains("`x-cost` header"), "{error}");
        }
        assert_eq!(parse_cost("1000000000"), Some(MAX_HITS_ADDEND));
        assert_eq!(parse_cost("007"), Some(7));
    }

    #[test]
    fn a_repeated_header_is_refused_unless_the_entry_takes_the_last() {
        let twice = parts(&[("x-cost", "0"), ("x-cost", "5")]);
        let refuse = compile("format: '%REQ(x-cost)%'").unwrap();
        let error = refuse.cost(&twice).unwrap_err();
        assert_eq!(error.problem, CostProblem::Repeated(2));
        assert_eq!(
            error.to_string(),
            "the `x-cost` header came 2 times: a cost header must come once"
        );
        let last = compile("{format: '%REQ(x-cost)%', repeated_header: last}").unwrap();
        assert_eq!(last.cost(&twice), Ok(Some(5)), "the last value counts");
        assert_eq!(last.cost(&parts(&[("x-cost", "3")])), Ok(Some(3)));
        let bad_last = parts(&[("x-cost", "5"), ("x-cost", "+0")]);
        assert_eq!(
            last.cost(&bad_last).unwrap_err().problem,
            CostProblem::NotACost("+0".to_owned()),
            "the last value is held to the same digits"
        );
        assert!(
            serde_saphyr::from_str::<HitsAddendConfig>(
                "{format: '%REQ(x-cost)%', repeated_header: first}"
            )
            .is_err(),
            "only refuse and last are offered"
        );
    }
}
