//! Rate-limit descriptors built from a request by Envoy's route `rate_limits` actions.
//!
//! Each [`DescriptorRule`] (one `RateLimit` entry) yields at most one
//! [`Descriptor`]: its actions run in order, each appending one
//! `(key, value)` entry; an action that cannot produce its entry drops the
//! whole descriptor unless it has `skip_if_absent`. The same descriptors
//! feed the local buckets and the global RLS call.
//!
//! The client address is the *trusted* one ([`trusted_client_address`]):
//! the connection's peer, unless `xff_num_trusted_hops` says how many
//! proxies in front of this one append to `X-Forwarded-For`. A client that
//! sends its own `X-Forwarded-For` cannot buy a fresh bucket.

use std::net::IpAddr;

use http::request::Parts;

use ipnet::IpNet;

use crate::config::envoy::{
    self, ActionConfig, HeaderMatcherConfig, RateLimitConfig, StringMatcherConfig,
};
use crate::config::{ConfigPath, FieldError};
use crate::hits_addend::{HitsAddend, InvalidHitsAddend};
use crate::request_header::RequestHeader;

/// One descriptor: ordered `(key, value)` entries (the protocol crate's; the
/// actions here never set its overrides).
pub use tollgate_protocol::rls::model::Descriptor;

/// What the actions read from one request.
#[derive(Clone, Copy, Debug)]
pub struct RequestFacts<'a> {
    /// The request line and headers.
    pub parts: &'a Parts,
    /// The trusted client address.
    pub client: IpAddr,
    /// The routed cluster's name.
    pub destination_cluster: &'a str,
    /// This proxy's service cluster name.
    pub source_cluster: &'a str,
}

/// One compiled action.
#[derive(Clone, Debug)]
enum Action {
    SourceCluster,
    DestinationCluster,
    RequestHeader {
        header: RequestHeader,
        key: String,
        skip_if_absent: bool,
    },
    RemoteAddress,
    GenericKey {
        key: String,
        value: String,
    },
    HeaderValueMatch {
        key: String,
        value: String,
        expect_match: bool,
        matchers: Vec<HeaderMatcher>,
    },
    MaskedRemoteAddress {
        v4: u8,
        v6: u8,
    },
    QueryParameter {
        name: String,
        key: String,
        skip_if_absent: bool,
    },
}

/// One header matcher of `header_value_match`.
#[derive(Clone, Debug)]
struct HeaderMatcher {
    name: RequestHeader,
    test: HeaderTest,
    invert: bool,
}

#[derive(Clone, Debug)]
enum HeaderTest {
    Present(bool),
    Exact(String, bool),
    Prefix(String, bool),
    Suffix(String, bool),
    Contains(String, bool),
}

/// A compiled `RateLimit` entry.
#[derive(Clone, Debug)]
pub struct DescriptorRule {
    actions: Vec<Action>,
    /// The entry's stage.
    pub stage: u32,
    /// Whether the entry carried a `disable_key`.
    pub has_disable_key: bool,
    /// What the entry's descriptor costs (absent: 1).
    pub hits_addend: Option<HitsAddend>,
}

/// Compiles the `RateLimit` entries found at `at`; the error names the entry and action.
pub fn compile(
    rules: &[RateLimitConfig],
    at: impl Into<ConfigPath>,
) -> Result<Vec<DescriptorRule>, FieldError> {
    let at = at.into();
    rules
        .iter()
        .enumerate()
        .map(|(i, rule)| compile_rule(rule, &at.index(i)))
        .collect()
}

/// Compiles a filter's own `rate_limits` (at `at`): `None` when it has none, so the route's apply.
pub fn compile_filter_rules(
    rules: &[RateLimitConfig],
    at: ConfigPath,
) -> Result<Option<Vec<DescriptorRule>>, FieldError> {
    if rules.is_empty() {
        Ok(None)
    } else {
        compile(rules, at).map(Some)
    }
}

fn compile_rule(rule: &RateLimitConfig, at: &ConfigPath) -> Result<DescriptorRule, FieldError> {
    if rule.limit.is_some() || rule.apply_on_stream_done.is_some() {
        return Err(at.error("limit and apply_on_stream_done are not supported"));
    }
    let hits_addend = rule
        .hits_addend
        .as_ref()
        .map(|h| HitsAddend::compile(h, &at.key("hits_addend")))
        .transpose()?;
    if rule.actions.is_empty() {
        return Err(at.key("actions").error("at least one action is needed"));
    }
    let stage = envoy::stage(rule.stage, &at.key("stage"))?;
    let actions = rule
        .actions
        .iter()
        .enumerate()
        .map(|(j, action)| compile_action(action, &at.key("actions").index(j)))
        .collect::<Result<_, _>>()?;
    Ok(DescriptorRule {
        actions,
        stage,
        has_disable_key: rule.disable_key.is_some(),
        hits_addend,
    })
}

fn compile_action(action: &ActionConfig, at: &ConfigPath) -> Result<Action, FieldError> {
    let mut found = Vec::new();
    if action.source_cluster.is_some() {
        found.push(Action::SourceCluster);
    }
    if action.destination_cluster.is_some() {
        found.push(Action::DestinationCluster);
    }
    if let Some(h) = &action.request_headers {
        let at = at.key("request_headers");
        if h.header_name.is_empty() || h.descriptor_key.is_empty() {
            return Err(at.error("header_name and descriptor_key must not be empty"));
        }
        found.push(Action::RequestHeader {
            header: RequestHeader::parse(&h.header_name, &at.key("header_name"))?,
            key: h.descriptor_key.clone(),
            skip_if_absent: h.skip_if_absent,
        });
    }
    if action.remote_address.is_some() {
        found.push(Action::RemoteAddress);
    }
    if let Some(g) = &action.generic_key {
        found.push(Action::GenericKey {
            key: g
                .descriptor_key
                .clone()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "generic_key".to_owned()),
            value: g.descriptor_value.clone(),
        });
    }
    if let Some(m) = &action.header_value_match {
        let matchers = m
            .headers
            .iter()
            .enumerate()
            .map(|(k, h)| compile_matcher(h, &at.key("header_value_match").key("headers").index(k)))
            .collect::<Result<_, _>>()?;
        found.push(Action::HeaderValueMatch {
            key: m
                .descriptor_key
                .clone()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "header_match".to_owned()),
            value: m.descriptor_value.clone(),
            expect_match: m.expect_match.unwrap_or(true),
            matchers,
        });
    }
    if let Some(m) = &action.masked_remote_address {
        let v4 = m.v4_prefix_mask_len.unwrap_or(32);
        let v6 = m.v6_prefix_mask_len.unwrap_or(128);
        if v4 > 32 || v6 > 128 {
            return Err(at
                .key("masked_remote_address")
                .error("prefix lengths are at most 32 (IPv4) and 128 (IPv6)"));
        }
        found.push(Action::MaskedRemoteAddress { v4, v6 });
    }
    if let Some(q) = &action.query_parameters {
        found.push(Action::QueryParameter {
            name: q.query_parameter_name.clone(),
            key: q.descriptor_key.clone(),
            skip_if_absent: q.skip_if_absent,
        });
    }
    for (set, name) in [
        (action.metadata.is_some(), "metadata"),
        (action.dynamic_metadata.is_some(), "dynamic_metadata"),
        (action.extension.is_some(), "extension"),
        (
            action.query_parameter_value_match.is_some(),
            "query_parameter_value_match",
        ),
        (
            action.remote_address_match.is_some(),
            "remote_address_match",
        ),
    ] {
        if set {
            return Err(at.error(format!("the {name} action is not supported")));
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(at.error(
            "an action needs one of source_cluster, destination_cluster, request_headers, remote_address, generic_key, header_value_match, masked_remote_address, query_parameters",
        )),
        _ => Err(at.error(format!(
            "an action sets exactly one kind; this one sets {}",
            found.len()
        ))),
    }
}

fn compile_matcher(h: &HeaderMatcherConfig, at: &ConfigPath) -> Result<HeaderMatcher, FieldError> {
    if h.safe_regex_match.is_some() || h.range_match.is_some() {
        return Err(at.error("safe_regex_match and range_match are not supported"));
    }
    let mut tests = Vec::new();
    if let Some(v) = &h.exact_match {
        tests.push(HeaderTest::Exact(v.clone(), false));
    }
    if let Some(v) = &h.prefix_match {
        tests.push(HeaderTest::Prefix(v.clone(), false));
    }
    if let Some(v) = &h.suffix_match {
        tests.push(HeaderTest::Suffix(v.clone(), false));
    }
    if let Some(v) = &h.contains_match {
        tests.push(HeaderTest::Contains(v.clone(), false));
    }
    if let Some(p) = h.present_match {
        tests.push(HeaderTest::Present(p));
    }
    if let Some(s) = &h.string_match {
        tests.push(string_test(s, at)?);
    }
    let test = match tests.len() {
        0 => HeaderTest::Present(true),
        1 => tests.remove(0),
        _ => return Err(at.error("a header matcher sets one kind of match")),
    };
    Ok(HeaderMatcher {
        name: RequestHeader::parse(&h.name, &at.key("name"))?,
        test,
        invert: h.invert_match,
    })
}

fn string_test(s: &StringMatcherConfig, at: &ConfigPath) -> Result<HeaderTest, FieldError> {
    let at = at.key("string_match");
    if s.safe_regex.is_some() {
        return Err(at.error("safe_regex is not supported"));
    }
    let ic = s.ignore_case;
    match (&s.exact, &s.prefix, &s.suffix, &s.contains) {
        (Some(v), None, None, None) => Ok(HeaderTest::Exact(v.clone(), ic)),
        (None, Some(v), None, None) => Ok(HeaderTest::Prefix(v.clone(), ic)),
        (None, None, Some(v), None) => Ok(HeaderTest::Suffix(v.clone(), ic)),
        (None, None, None, Some(v)) => Ok(HeaderTest::Contains(v.clone(), ic)),
        _ => Err(at.error("set exactly one of exact, prefix, suffix, contains")),
    }
}

/// The descriptors `rules` produce for a request, each with its cost; a cost header that holds no cost fails the request.
pub fn build(
    rules: &[DescriptorRule],
    facts: &RequestFacts<'_>,
) -> Result<Vec<Descriptor>, InvalidHitsAddend> {
    let mut descriptors = Vec::with_capacity(rules.len());
    for rule in rules {
        if let Some(mut descriptor) = build_one(rule, facts) {
            if let Some(hits) = &rule.hits_addend {
                descriptor.hits_addend = hits.cost(facts.parts)?;
            }
            descriptors.push(descriptor);
        }
    }
    Ok(descriptors)
}

fn build_one(rule: &DescriptorRule, facts: &RequestFacts<'_>) -> Option<Descriptor> {
    let mut entries = Vec::with_capacity(rule.actions.len());
    for action in &rule.actions {
        match action {
            Action::SourceCluster => {
                entries.push(("source_cluster".to_owned(), facts.source_cluster.to_owned()))
            }
            Action::DestinationCluster => entries.push((
                "destination_cluster".to_owned(),
                facts.destination_cluster.to_owned(),
            )),
            Action::RequestHeader {
                header,
                key,
                skip_if_absent,
            } => match header.value(facts.parts) {
                Some(v) => entries.push((key.clone(), v)),
                None if *skip_if_absent => {}
                None => return None,
            },
            Action::RemoteAddress => {
                entries.push(("remote_address".to_owned(), facts.client.to_string()))
            }
            Action::GenericKey { key, value } => entries.push((key.clone(), value.clone())),
            Action::HeaderValueMatch {
                key,
                value,
                expect_match,
                matchers,
            } => {
                let all = matchers.iter().all(|m| m.matches(facts.parts));
                if all == *expect_match {
                    entries.push((key.clone(), value.clone()));
                } else {
                    return None;
                }
            }
            Action::MaskedRemoteAddress { v4, v6 } => entries.push((
                "masked_remote_address".to_owned(),
                masked(facts.client, *v4, *v6),
            )),
            Action::QueryParameter {
                name,
                key,
                skip_if_absent,
            } => match query_parameter(facts.parts, name) {
                Some(v) => entries.push((key.clone(), v)),
                None if *skip_if_absent => {}
                None => return None,
            },
        }
    }
    (!entries.is_empty()).then(|| Descriptor {
        entries,
        ..Descriptor::default()
    })
}

impl HeaderMatcher {
    fn matches(&self, parts: &Parts) -> bool {
        let value = self.name.value(parts);
        let result = match (&self.test, value) {
            (HeaderTest::Present(want), v) => v.is_some() == *want,
            (_, None) => false,
            (HeaderTest::Exact(p, ic), Some(v)) => fold(&v, *ic) == fold(p, *ic),
            (HeaderTest::Prefix(p, ic), Some(v)) => fold(&v, *ic).starts_with(&fold(p, *ic)),
            (HeaderTest::Suffix(p, ic), Some(v)) => fold(&v, *ic).ends_with(&fold(p, *ic)),
            (HeaderTest::Contains(p, ic), Some(v)) => fold(&v, *ic).contains(&fold(p, *ic)),
        };
        result != self.invert
    }
}

fn fold(s: &str, ignore_case: bool) -> String {
    if ignore_case {
        s.to_ascii_lowercase()
    } else {
        s.to_owned()
    }
}

/// The first value of query parameter `name`, decoded as a form (`+` is a space, `%XX` a byte).
pub fn query_parameter(parts: &Parts, name: &str) -> Option<String> {
    let query = parts.uri.query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// `ip/len` with the host bits cleared (`len` is `v4` or `v6` by family, checked at compile time).
pub fn masked(ip: IpAddr, v4: u8, v6: u8) -> String {
    let len = if ip.is_ipv4() { v4 } else { v6 };
    match IpNet::new(ip, len) {
        Ok(net) => net.trunc().to_string(),
        Err(_) => format!("{ip}/{len}"),
    }
}

pub use tollgate_protocol::forwarded::trusted_client_address;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::envoy::ActionConfig;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().uri(uri).method("POST");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn rules(yaml: &str) -> Vec<DescriptorRule> {
        let cfg: Vec<RateLimitConfig> = serde_saphyr::from_str(yaml).unwrap();
        compile(&cfg, "rate_limits").unwrap()
    }

    fn facts<'a>(p: &'a Parts, client: &str) -> RequestFacts<'a> {
        RequestFacts {
            parts: p,
            client: client.parse().unwrap(),
            destination_cluster: "backend",
            source_cluster: "front",
        }
    }

    #[test]
    fn each_action_appends_its_entry_in_order() {
        let r = rules(
            "- actions:\n  - generic_key: {descriptor_value: api}\n  - request_headers: {header_name: x-user, descriptor_key: user}\n  - remote_address: {}\n  - request_headers: {header_name: ':method', descriptor_key: method}\n  - request_headers: {header_name: ':path', descriptor_key: path}\n  - query_parameters: {query_parameter_name: plan, descriptor_key: plan}\n  - masked_remote_address: {v4_prefix_mask_len: 24}\n  - destination_cluster: {}\n  - source_cluster: {}\n",
        );
        let p = parts("/v1/x?plan=gold%20tier&a=1", &[("x-user", "alice")]);
        let d = build(&r, &facts(&p, "192.168.1.77")).unwrap();
        assert_eq!(
            d,
            vec![Descriptor::new([
                ("generic_key", "api"),
                ("user", "alice"),
                ("remote_address", "192.168.1.77"),
                ("method", "POST"),
                ("path", "/v1/x?plan=gold%20tier&a=1"),
                ("plan", "gold tier"),
                ("masked_remote_address", "192.168.1.0/24"),
                ("destination_cluster", "backend"),
                ("source_cluster", "front"),
            ])]
        );
    }

    #[test]
    fn a_missing_header_drops_the_descriptor_unless_skip_if_absent() {
        let r = rules(
            "- actions:\n  - request_headers: {header_name: x-user, descriptor_key: user}\n- actions:\n  - generic_key: {descriptor_value: g}\n  - request_headers: {header_name: x-user, descriptor_key: user, skip_if_absent: true}\n",
        );
        let p = parts("/", &[]);
        assert_eq!(
            build(&r, &facts(&p, "10.0.0.1")).unwrap(),
            vec![Descriptor::new([("generic_key", "g")])]
        );
    }

    #[test]
    fn header_value_match_honours_expect_match() {
        let r = rules(
            "- actions:\n  - header_value_match: {descriptor_value: admin, headers: [{name: x-role, exact_match: admin}]}\n- actions:\n  - header_value_match: {descriptor_key: anon, descriptor_value: 'yes', expect_match: false, headers: [{name: authorization, present_match: true}]}\n",
        );
        let admin = parts("/", &[("x-role", "admin")]);
        assert_eq!(
            build(&r, &facts(&admin, "10.0.0.1")).unwrap(),
            vec![
                Descriptor::new([("header_match", "admin")]),
                Descriptor::new([("anon", "yes")])
            ]
        );
        let authed = parts("/", &[("x-role", "user"), ("authorization", "t")]);
        assert!(build(&r, &facts(&authed, "10.0.0.1")).unwrap().is_empty());
    }

    #[test]
    fn an_action_with_two_kinds_or_an_unsupported_kind_is_an_error() {
        let two: Vec<RateLimitConfig> = serde_saphyr::from_str(
            "- actions:\n  - {remote_address: {}, generic_key: {descriptor_value: x}}\n",
        )
        .unwrap();
        assert!(
            compile(&two, "r")
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        let meta: Vec<RateLimitConfig> =
            serde_saphyr::from_str("- actions:\n  - metadata: {descriptor_key: k}\n").unwrap();
        assert!(
            compile(&meta, "r")
                .unwrap_err()
                .to_string()
                .contains("metadata")
        );
        let _ = ActionConfig::default();
    }

    #[test]
    fn a_header_name_that_is_not_one_is_an_error_naming_the_field() {
        let bad: Vec<RateLimitConfig> = serde_saphyr::from_str(
            "- actions:\n  - request_headers: {header_name: 'x user', descriptor_key: user}\n",
        )
        .unwrap();
        assert_eq!(
            compile(&bad, "rate_limits").unwrap_err().to_string(),
            "rate_limits[0].actions[0].request_headers.header_name: `x user` is not a header name"
        );
        let matcher: Vec<RateLimitConfig> = serde_saphyr::from_str(
            "- actions:\n  - header_value_match: {descriptor_value: v, headers: [{name: 'x:y', exact_match: a}]}\n",
        )
        .unwrap();
        assert!(
            compile(&matcher, "r")
                .unwrap_err()
                .to_string()
                .contains("r[0].actions[0].header_value_match.headers[0].name")
        );
    }

    #[test]
    fn query_values_and_masked_addresses_decode_and_truncate() {
        let p = parts("/?a=1&plan=x%2By+z&plan=second&tail=%41", &[]);
        assert_eq!(query_parameter(&p, "plan").as_deref(), Some("x+y z"));
        assert_eq!(query_parameter(&p, "tail").as_deref(), Some("A"));
        assert_eq!(query_parameter(&p, "none"), None);
        assert_eq!(masked("10.1.2.3".parse().unwrap(), 0, 128), "0.0.0.0/0");
        assert_eq!(
            masked("2001:db8::1".parse().unwrap(), 32, 64),
            "2001:db8::/64"
        );
    }
}
