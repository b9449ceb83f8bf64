//! Which keys belong in which part of a limits file, and what to say about one that does not.

use std::path::Path;

use super::Loader;
use crate::tree::{Node, NodeValue};

/// Upstream's one list of accepted keys, at any level.
const UPSTREAM_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// The keys of a file's top level.
const FILE_KEYS: &[&str] = &["domain", "descriptors"];

/// The keys of a descriptor.
const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "rate_limits",
    "shadow_mode",
    "on_store_error",
    "lease",
    "shares",
    "stagger",
    "detailed_metric",
    "quota_mode",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// The keys of a `rate_limit` block.
const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "delay",
    "unit_multiplier",
    "window",
];

/// The keys of a `replaces` entry.
const REPLACES_KEYS: &[&str] = &["name"];

/// One mapping level of the file, for checking its keys.
#[derive(Clone, Copy)]
pub(super) struct Section {
    /// How a message names it ("a descriptor").
    pub(super) name: &'static str,
    /// The keys it accepts.
    pub(super) keys: &'static [&'static str],
}

/// The top level of a file.
pub(super) const FILE_SECTION: Section = Section {
    name: "the top level of a file",
    keys: FILE_KEYS,
};
/// A descriptor.
pub(super) const DESCRIPTOR_SECTION: Section = Section {
    name: "a descriptor",
    keys: DESCRIPTOR_KEYS,
};
/// A `rate_limit` block (or an entry of `rate_limits`).
pub(super) const RATE_LIMIT_SECTION: Section = Section {
    name: "`rate_limit`",
    keys: RATE_LIMIT_KEYS,
};
/// An entry of `replaces`.
pub(super) const REPLACES_SECTION: Section = Section {
    name: "a `replaces` entry",
    keys: REPLACES_KEYS,
};
/// Every section, to say where a misplaced key belongs.
const SECTIONS: [Section; 4] = [
    FILE_SECTION,
    DESCRIPTOR_SECTION,
    RATE_LIMIT_SECTION,
    REPLACES_SECTION,
];

impl Loader {
    /// The entries of a mapping with string keys that are valid in `section`;
    /// reports the others (unknown keys as errors, upstream keys in the wrong place as warnings).
    pub(super) fn checked_entries<'n>(
        &mut self,
        file: &Path,
        entries: &'n [(Node, Node)],
        section: Section,
    ) -> Vec<(&'n str, &'n Node)> {
        let mut kept = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let NodeValue::Text(name) = &key.value else {
                self.diagnostics.error(
                    file,
                    key.position,
                    format!(
                        "keys must be strings, found {} in {}",
                        key.value.kind_name(),
                        section.name
                    ),
                );
                continue;
            };
            if section.keys.contains(&name.as_str()) {
                kept.push((name.as_str(), value));
                continue;
            }
            let home = SECTIONS.iter().find(|s| s.keys.contains(&name.as_str()));
            if UPSTREAM_KEYS.contains(&name.as_str()) {
                let hint = home
                    .map(|s| format!("; it belongs in {}", s.name))
                    .unwrap_or_default();
                self.diagnostics.warning(
                    file,
                    key.position,
                    format!("`{name}` has no effect in {} and is ignored (upstream ignores it too){hint}", section.name),
                );
            } else if let Some(home) = home {
                self.diagnostics.error(
                    file,
                    key.position,
                    format!(
                        "`{name}` is not valid in {}; it belongs in {}",
                        section.name, home.name
                    ),
                );
            } else {
                let suggestion = nearest(name, section.keys)
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_else(|| format!("; expected one of {}", quoted_list(section.keys)));
                self.diagnostics.error(
                    file,
                    key.position,
                    format!("unknown key `{name}` in {}{suggestion}", section.name),
                );
            }
        }
        kept
    }
}

/// The valid key closest to `name`, if it is close enough to be a typo.
fn nearest(name: &str, candidates: &[&'static str]) -> Option<&'static str> {
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(name, c), *c))
        .filter(|(distance, c)| *distance <= 3.max(c.len() / 3) && *distance < c.len())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// Formats keys as `` `a`, `b` ``.
fn quoted_list(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
