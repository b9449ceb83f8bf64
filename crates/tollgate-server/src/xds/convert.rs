//! An xDS update's `RateLimitConfig` resources turned into limits documents and loaded by the limits file loader, so an update gets a file's checks and diagnostics.
//!
//! Each resource becomes one document named `xds:<config name>` (pretty
//! JSON, which is YAML, so a diagnostic's line and column point into it);
//! together they are loaded as one configuration, as upstream loads the set
//! of configs of one response: a domain named by two configs is an error
//! unless domains merge (`MERGE_DOMAIN_CONFIG`). Fields left at their
//! protobuf default are left out (an empty `value` is no value, unit
//! `UNKNOWN` is no unit).

use std::path::PathBuf;

use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Any, Struct, Value};
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;
use serde_json::{Map, Value as Json};
use tollgate_rules::{Diagnostics, LoadOptions, Loaded, Position, Severity, load_sources};
use xxhash_rust::xxh3::Xxh3;

/// The type URL of the resources Tollgate subscribes to.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// How the rules from an xDS server name their file (`xds:<config name>`); `/rlconfig` says `source=xds` for them.
pub const XDS_SOURCE_PREFIX: &str = "xds:";

/// Line 1, column 1: where a problem with a whole resource is reported.
const FIRST: Position = Position { line: 1, column: 1 };

/// One update's configuration, loaded, with the hash of the documents it was read from.
#[derive(Debug)]
pub struct LoadedUpdate {
    /// The rules and every diagnostic.
    pub loaded: Loaded,
    /// The xxh3 hash of every document's name and text, in order.
    pub hash: u64,
}

/// Loads the `RateLimitConfig` resources of one update (the full set) as one configuration.
///
/// A resource of another type or that does not decode is an error naming
/// its place in the update. Unless [`LoadOptions::allow_empty`] is set, a
/// set that defines no rate limit at all is an error, as a reload to no
/// rule is.
pub fn load_update(resources: &[Any], options: LoadOptions) -> LoadedUpdate {
    let mut documents = Vec::with_capacity(resources.len());
    let mut problems = Diagnostics::new();
    for (index, resource) in resources.iter().enumerate() {
        let place = PathBuf::from(format!("{XDS_SOURCE_PREFIX}#{index}"));
        if resource.type_url != RATE_LIMIT_CONFIG_TYPE {
            problems.error(
                &place,
                FIRST,
                format!(
                    "resource {index} is a `{}`, not a `{RATE_LIMIT_CONFIG_TYPE}`",
                    resource.type_url
                ),
            );
            continue;
        }
        match RateLimitConfig::decode(resource.value.as_slice()) {
            Ok(config) => {
                let name = if config.name.is_empty() {
                    place
                } else {
                    PathBuf::from(format!("{XDS_SOURCE_PREFIX}{}", config.name))
                };
                documents.push((name, document(&config)));
            }
            Err(error) => problems.error(
                &place,
                FIRST,
                format!("resource {index} is not a RateLimitConfig: {error}"),
            ),
        }
    }
    let mut hasher = Xxh3::new();
    for (name, text) in &documents {
        let name = name.to_string_lossy();
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(&(text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    let mut loaded = load_sources(
        documents.iter().map(|(n, t)| (n.as_path(), t.as_str())),
        options,
    );
    loaded.diagnostics = quoting_documents(&loaded.diagnostics, &documents);
    for problem in problems.all() {
        loaded
            .diagnostics
            .error(&problem.file, problem.position, problem.message.clone());
    }
    if !options.allow_empty && !loaded.diagnostics.has_errors() && loaded.rule_set.rule_count() == 0
    {
        loaded.diagnostics.error(
            &PathBuf::from(XDS_SOURCE_PREFIX),
            FIRST,
            format!(
                "the update defines no rate limit ({} config(s)): every request would be unlimited; pass --allow-empty-config if that is intended",
                resources.len()
            ),
        );
    }
    loaded.diagnostics.sort();
    LoadedUpdate {
        loaded,
        hash: hasher.digest(),
    }
}

/// `diagnostics` with each message that points into one of `documents`
/// followed by what is there: the descriptor it is in and the line itself.
/// The documents are made here, not written by the operator, so a line and
/// column alone would point into text nobody has seen.
fn quoting_documents(diagnostics: &Diagnostics, documents: &[(PathBuf, String)]) -> Diagnostics {
    let mut quoted = Diagnostics::new();
    for diagnostic in diagnostics.all() {
        let message = documents
            .iter()
            .find(|(name, _)| *name == diagnostic.file)
            .and_then(|(_, text)| quote(text, diagnostic.position.line))
            .map_or_else(
                || diagnostic.message.clone(),
                |quote| format!("{} ({quote})", diagnostic.message),
            );
        match diagnostic.severity {
            Severity::Error => quoted.error(&diagnostic.file, diagnostic.position, message),
            Severity::Warning => quoted.warning(&diagnostic.file, diagnostic.position, message),
        }
    }
    quoted
}

/// What line `line` (1-based) of a generated document holds: the innermost
/// descriptor's `key` (and `value`) at or above it, and the line's text.
fn quote(text: &str, line: u64) -> Option<String> {
    let line = usize::try_from(line).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.get(line.checked_sub(1)?)?.trim();
    let field = |name: &str| {
        let prefix = format!("\"{name}\": ");
        lines[..line]
            .iter()
            .rev()
            .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
            .map(|v| v.trim_end_matches(','))
    };
    Some(match (field("key"), field("value")) {
        (Some(key), Some(value)) => format!("descriptor key {key} value {value}, at `{at}`"),
        (Some(key), None) => format!("descriptor key {key}, at `{at}`"),
        _ => format!("at `{at}`"),
    })
}

/// The limits document of `config`, as pretty JSON.
pub fn document(config: &RateLimitConfig) -> String {
    let mut root = Map::new();
    root.insert("domain".into(), Json::String(config.domain.clone()));
    if !config.descriptors.is_empty() {
        root.insert("descriptors".into(), descriptors(&config.descriptors));
    }
    serde_json::to_string_pretty(&Json::Object(root)).unwrap_or_default()
}

fn descriptors(list: &[RateLimitDescriptor]) -> Json {
    Json::Array(list.iter().map(descriptor).collect())
}

fn descriptor(d: &RateLimitDescriptor) -> Json {
    let mut out = Map::new();
    out.insert("key".into(), Json::String(d.key.clone()));
    if !d.value.is_empty() {
        out.insert("value".into(), Json::String(d.value.clone()));
    }
    if let Some(policy) = &d.rate_limit {
        out.insert("rate_limit".into(), rate_limit(policy));
    }
    if !d.descriptors.is_empty() {
        out.insert("descriptors".into(), descriptors(&d.descriptors));
    }
    for (name, on) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if on {
            out.insert(name.into(), Json::Bool(true));
        }
    }
    if let Some(metadata) = d.metadata.as_ref().filter(|m| !m.fields.is_empty()) {
        out.insert("metadata".into(), object(metadata));
    }
    Json::Object(out)
}

fn rate_limit(policy: &RateLimitPolicy) -> Json {
    let mut out = Map::new();
    match RateLimitUnit::try_from(policy.unit) {
        Ok(RateLimitUnit::Unknown) => {}
        Ok(unit) => {
            out.insert(
                "unit".into(),
                Json::String(unit.as_str_name().to_ascii_lowercase()),
            );
        }
        // Not a unit: the loader names it.
        Err(_) => {
            out.insert("unit".into(), Json::String(policy.unit.to_string()));
        }
    }
    if !(policy.unlimited && policy.requests_per_unit == 0) {
        out.insert(
            "requests_per_unit".into(),
            Json::from(policy.requests_per_unit),
        );
    }
    if policy.unlimited {
        out.insert("unlimited".into(), Json::Bool(true));
    }
    if !policy.name.is_empty() {
        out.insert("name".into(), Json::String(policy.name.clone()));
    }
    if !policy.replaces.is_empty() {
        let replaces = policy
            .replaces
            .iter()
            .map(|r| {
                let mut one = Map::new();
                one.insert("name".into(), Json::String(r.name.clone()));
                Json::Object(one)
            })
            .collect();
        out.insert("replaces".into(), Json::Array(replaces));
    }
    Json::Object(out)
}

/// A `google.protobuf.Struct` as a JSON object, keys sorted.
fn object(value: &Struct) -> Json {
    let mut keys: Vec<&String> = value.fields.keys().collect();
    keys.sort_unstable();
    Json::Object(
        keys.into_iter()
            .map(|k| (k.clone(), json(&value.fields[k])))
            .collect(),
    )
}

fn json(value: &Value) -> Json {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number)
        }
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::StructValue(s)) => object(s),
        Some(Kind::ListValue(list)) => Json::Array(list.values.iter().map(json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;

    use super::*;

    fn any(config: &RateLimitConfig) -> Any {
        Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: config.encode_to_vec(),
        }
    }

    fn limit(unit: RateLimitUnit, requests_per_unit: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit,
            ..RateLimitPolicy::default()
        })
    }

    fn config(name: &str, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
        RateLimitConfig {
            name: name.to_owned(),
            domain: domain.to_owned(),
            descriptors,
        }
    }

    #[test]
    fn nested_descriptors_names_replaces_and_shadow_mode_load_as_a_file_would() {
        let update = [any(&config(
            "api",
            "gateway",
            vec![RateLimitDescriptor {
                key: "tenant".to_owned(),
                value: "acme".to_owned(),
                rate_limit: Some(RateLimitPolicy {
                    name: "per-tenant".to_owned(),
                    ..limit(RateLimitUnit::Minute, 5).unwrap()
                }),
                descriptors: vec![RateLimitDescriptor {
                    key: "path".to_owned(),
                    rate_limit: Some(RateLimitPolicy {
                        replaces: vec![RateLimitReplace {
                            name: "per-tenant".to_owned(),
                        }],
                        ..limit(RateLimitUnit::Second, 2).unwrap()
                    }),
                    shadow_mode: true,
                    ..RateLimitDescriptor::default()
                }],
                ..RateLimitDescriptor::default()
            }],
        ))];
        let loaded = load_update(&update, LoadOptions::default());
        let (rules, _) = loaded.loaded.into_result().expect("valid");
        assert_eq!(rules.rule_count(), 2);
        let found: Vec<_> = rules.rules("gateway").collect();
        assert!(found.iter().all(|r| r.file.to_string_lossy() == "xds:api"));
        assert!(found.iter().any(|r| r.shadow_mode));
    }

    #[test]
    fn a_bad_config_is_an_error_naming_the_config_and_the_problem() {
        let update = [
            any(&config(
                "good",
                "a",
                vec![RateLimitDescriptor {
                    key: "k".to_owned(),
                    rate_limit: limit(RateLimitUnit::Hour, 1),
                    ..RateLimitDescriptor::default()
                }],
            )),
            any(&config(
                "bad",
                "b",
                vec![RateLimitDescriptor {
                    key: "k".to_owned(),
                    // No unit, and not unlimited.
                    rate_limit: limit(RateLimitUnit::Unknown, 1),
                    ..RateLimitDescriptor::default()
                }],
            )),
        ];
        let errors = load_update(&update, LoadOptions::default())
            .loaded
            .into_result()
            .expect_err("refused");
        let text = errors.to_string();
        assert!(text.contains("xds:bad:"), "{text}");
        assert!(!text.contains("xds:good"), "{text}");
        // The document is generated, so the message says where in the config it is.
        assert!(text.contains("descriptor key \"k\""), "{text}");
    }

    #[test]
    fn two_configs_of_one_domain_are_refused_unless_domains_merge() {
        let one = |name: &str, key: &str| {
            any(&config(
                name,
                "d",
                vec![RateLimitDescriptor {
                    key: key.to_owned(),
                    rate_limit: limit(RateLimitUnit::Day, 3),
                    ..RateLimitDescriptor::default()
                }],
            ))
        };
        let update = [one("x", "a"), one("y", "b")];
        assert!(
            load_update(&update, LoadOptions::default())
                .loaded
                .diagnostics
                .has_errors()
        );
        let merged = LoadOptions {
            merge_domains: true,
            ..LoadOptions::default()
        };
        let (rules, _) = load_update(&update, merged)
            .loaded
            .into_result()
            .expect("merged");
        assert_eq!(rules.rule_count(), 2);
    }

    #[test]
    fn an_empty_set_or_a_foreign_resource_is_refused() {
        let empty = load_update(&[], LoadOptions::default());
        assert!(
            empty
                .loaded
                .diagnostics
                .to_string()
                .contains("defines no rate limit"),
            "{}",
            empty.loaded.diagnostics
        );
        let allowed = LoadOptions {
            allow_empty: true,
            ..LoadOptions::default()
        };
        assert!(!load_update(&[], allowed).loaded.diagnostics.has_errors());
        let foreign = Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned(),
            value: Vec::new(),
        };
        let text = load_update(&[foreign], allowed)
            .loaded
            .diagnostics
            .to_string();
        assert!(text.contains("xds:#0:1:1: error: resource 0 is a `type.googleapis.com/envoy.config.cluster.v3.Cluster`"), "{text}");
        let garbage = Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: vec![0xff, 0xff, 0xff],
        };
        let text = load_update(&[garbage], allowed)
            .loaded
            .diagnostics
            .to_string();
        assert!(text.contains("is not a RateLimitConfig"), "{text}");
    }

    #[test]
    fn unlimited_without_a_unit_loads() {
        let update = [any(&config(
            "u",
            "d",
            vec![RateLimitDescriptor {
                key: "k".to_owned(),
                rate_limit: Some(RateLimitPolicy {
                    unlimited: true,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            }],
        ))];
        let (rules, _) = load_update(&update, LoadOptions::default())
            .loaded
            .into_result()
            .expect("valid");
        assert_eq!(rules.rule_count(), 1);
    }
}
