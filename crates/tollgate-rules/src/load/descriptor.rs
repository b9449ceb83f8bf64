//! Loading one descriptor: its key and value, its options, its limits, and the descriptors below it.

use std::path::Path;

use super::sections::DESCRIPTOR_SECTION;
use super::{Context, Loader};
use crate::model::{
    DescriptorNode, DomainRules, Level, LevelOptions, Limit, Rule, StoreErrorPolicy,
    WildcardPattern, dotted_path,
};
use crate::tree::{Node, NodeValue, Position};

/// What a descriptor's mapping says, before its limits are built.
#[derive(Default)]
struct DescriptorFields<'n> {
    key: Option<String>,
    /// `key` is a list or a mapping (already reported).
    key_has_wrong_type: bool,
    value: Option<String>,
    /// The `rate_limit` block and the `rate_limits` entries, in file order.
    limits: Vec<&'n Node>,
    children: Option<&'n Node>,
    shadow_mode: bool,
    on_store_error: StoreErrorPolicy,
    lease: Option<std::time::Duration>,
    /// `shares: true`, with where it was written.
    shares: Option<Position>,
    /// `stagger: true`, with where it was written.
    stagger: Option<Position>,
    detailed_metric: bool,
    quota_mode: bool,
    /// `value_to_metric` and `share_threshold` (with where it was written).
    value_to_metric: bool,
    share_threshold: Option<Position>,
}

impl Loader {
    /// Loads a `descriptors` list into `level`.
    pub(super) fn load_level(
        &mut self,
        context: &Context<'_>,
        rules: &mut DomainRules,
        level: &mut Level,
        path: &[(String, Option<String>)],
        options: &[LevelOptions],
        list: &Node,
    ) {
        let items = match &list.value {
            NodeValue::List(items) => items.as_slice(),
            NodeValue::Null => &[],
            other => {
                self.diagnostics.error(
                    context.file,
                    list.position,
                    format!("`descriptors` must be a list, found {}", other.kind_name()),
                );
                return;
            }
        };
        for item in items {
            self.load_descriptor(context, rules, level, (path, options), item);
        }
    }

    /// Loads one descriptor, its limits and its children into `level`.
    pub(super) fn load_descriptor(
        &mut self,
        context: &Context<'_>,
        rules: &mut DomainRules,
        level: &mut Level,
        (path, options): (&[(String, Option<String>)], &[LevelOptions]),
        item: &Node,
    ) {
        let file = context.file;
        let NodeValue::Map(entries) = &item.value else {
            self.diagnostics.error(
                file,
                item.position,
                format!(
                    "a descriptor must be a mapping with `key`, found {}",
                    item.value.kind_name()
                ),
            );
            return;
        };
        let fields = self.descriptor_fields(file, entries);
        let Some(key) = fields.key.clone().filter(|k| !k.is_empty()) else {
            if !fields.key_has_wrong_type {
                self.diagnostics.error(
                    file,
                    item.position,
                    "descriptor has an empty or missing `key`",
                );
            }
            return;
        };
        let mut own_path = path.to_vec();
        own_path.push((key.clone(), fields.value.clone()));
        let mut own_options = options.to_vec();
        own_options.push(LevelOptions {
            value_to_metric: fields.value_to_metric,
            share_threshold: fields.share_threshold.is_some(),
        });
        if let Some(position) = fields.share_threshold
            && !fields.value.as_deref().is_some_and(|v| v.contains('*'))
        {
            // Upstream's message, with the composite key it names.
            let composite = match &fields.value {
                Some(value) => format!("{key}_{value}"),
                None => key.clone(),
            };
            self.diagnostics.error(
                file,
                position,
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{composite}'"
                ),
            );
        }
        if let Some(first) = defined_before(rules, level, &key, fields.value.as_deref()) {
            let dotted = dotted_path(context.domain, &own_path);
            self.diagnostics.error(
                file,
                item.position,
                format!("duplicate descriptor `{dotted}`: already defined at {first}"),
            );
            return;
        }
        let limits: Vec<Limit> = fields
            .limits
            .iter()
            .filter_map(|block| self.load_limit(context, block))
            .collect();
        if let Some(position) = fields.stagger {
            self.check_stagger(file, position, &limits);
        }
        if let Some(position) = fields.shares {
            self.check_shares(file, position, &limits, fields.lease);
        }
        let mut children = Level::default();
        if let Some(list) = fields.children {
            self.load_level(context, rules, &mut children, &own_path, &own_options, list);
        }
        let rule = (!limits.is_empty()).then(|| Rule {
            path: own_path,
            limits,
            shadow_mode: fields.shadow_mode,
            on_store_error: fields.on_store_error,
            lease: fields.lease,
            shares: fields.shares.is_some(),
            stagger: fields.stagger.is_some(),
            detailed_metric: fields.detailed_metric,
            quota_mode: fields.quota_mode,
            levels: own_options,
            file: file.to_path_buf(),
            position: item.position,
        });
        let node = DescriptorNode {
            rule,
            children,
            file: file.to_path_buf(),
            position: item.position,
        };
        insert_descriptor(rules, level, key, fields.value, node);
    }

    /// Reads a descriptor's keys, reporting the values of the wrong kind.
    fn descriptor_fields<'n>(
        &mut self,
        file: &Path,
        entries: &'n [(Node, Node)],
    ) -> DescriptorFields<'n> {
        let mut fields = DescriptorFields::default();
        for (name, node) in self.checked_entries(file, entries, DESCRIPTOR_SECTION) {
            match name {
                "key" => {
                    fields.key = self.text_value(file, node, "key");
                    fields.key_has_wrong_type = !matches!(
                        node.value,
                        NodeValue::Null
                            | NodeValue::Text(_)
                            | NodeValue::Integer(_)
                            | NodeValue::Bool(_)
                    );
                }
                "value" => {
                    fields.value = self
                        .text_value(file, node, "value")
                        .filter(|v| !v.is_empty())
                }
                "rate_limit" | "rate_limits" if matches!(node.value, NodeValue::Null) => {
                    // Upstream reads an empty block as no limit at all: a
                    // descriptor someone meant to limit would pass everything.
                    self.diagnostics.error(
                        file,
                        node.position,
                        format!(
                            "`{name}` is empty, so this descriptor would have no limit; give it `unit` and `requests_per_unit` (or `unlimited: true`), or remove the key"
                        ),
                    );
                }
                "rate_limit" => fields.limits.push(node),
                "rate_limits" => self.rate_limit_list(file, node, &mut fields.limits),
                "descriptors" => fields.children = Some(node),
                "shadow_mode" => fields.shadow_mode = self.bool_value(file, node, "shadow_mode"),
                "on_store_error" => {
                    if let Some(policy) = self.store_error_policy(file, node) {
                        fields.on_store_error = policy;
                    }
                }
                "lease" if matches!(node.value, NodeValue::Integer(0)) => {
                    fields.lease = Some(std::time::Duration::ZERO);
                }
                "lease" => {
                    let expected = "a duration such as `1s` (0 keeps the rule exact)";
                    fields.lease = self.parsed_text(file, node, "lease", expected, |text| {
                        tollgate_core::duration::parse_duration(text)
                            .map_err(|e| format!("`lease` {e}"))
                    });
                }
                "shares" => {
                    fields.shares = self
                        .bool_value(file, node, "shares")
                        .then_some(node.position)
                }
                "stagger" => {
                    fields.stagger = self
                        .bool_value(file, node, "stagger")
                        .then_some(node.position)
                }
                "detailed_metric" => {
                    fields.detailed_metric = self.bool_value(file, node, "detailed_metric")
                }
                "value_to_metric" => {
                    fields.value_to_metric = self.bool_value(file, node, "value_to_metric")
                }
                "quota_mode" => fields.quota_mode = self.bool_value(file, node, "quota_mode"),
                "share_threshold" => {
                    fields.share_threshold = self
                        .bool_value(file, node, "share_threshold")
                        .then_some(node.position)
                }
                _ => {}
            }
        }
        fields
    }

    /// Reports a `shares: true` (at `position`) the mode cannot keep: on a
    /// descriptor without a limit, beside a limit that is neither a token
    /// bucket nor GCRA, or with a `lease` (a rule is shared one way).
    fn check_shares(
        &mut self,
        file: &Path,
        position: Position,
        limits: &[Limit],
        lease: Option<std::time::Duration>,
    ) {
        use crate::algorithm::AlgorithmKind;
        if limits.is_empty() {
            self.diagnostics.error(
                file,
                position,
                "`shares` needs a `rate_limit` on the same descriptor: it splits that limit between the instances",
            );
            return;
        }
        if let Some(other) = limits.iter().find(|l| {
            !l.is_unlimited()
                && !matches!(
                    l.algorithm_kind,
                    AlgorithmKind::TokenBucket | AlgorithmKind::Gcra
                )
        }) {
            self.diagnostics.error(
                file,
                position,
                format!(
                    "`shares` splits token buckets and GCRA only, and this descriptor's limit on line {} uses {}; remove `shares` or use `algorithm: token_bucket` or `algorithm: gcra`",
                    other.position.line, other.algorithm_kind
                ),
            );
        }
        if lease.is_some_and(|l| !l.is_zero()) {
            self.diagnostics.error(
                file,
                position,
                "`shares` and `lease` both share a limit between instances, in different ways: keep one",
            );
        }
    }

    /// Reports a `stagger: true` (at `position`) that would shift nothing:
    /// on a descriptor without a limit, or beside a limit that is not a
    /// fixed window (only fixed windows have edges to stagger).
    fn check_stagger(&mut self, file: &Path, position: Position, limits: &[Limit]) {
        if limits.is_empty() {
            self.diagnostics.error(
                file,
                position,
                "`stagger` needs a `rate_limit` on the same descriptor: it shifts that limit's fixed windows",
            );
            return;
        }
        if let Some(other) = limits.iter().find(|l| {
            !l.is_unlimited() && l.algorithm_kind != crate::algorithm::AlgorithmKind::FixedWindow
        }) {
            self.diagnostics.error(
                file,
                position,
                format!(
                    "`stagger` shifts fixed windows only, and this descriptor's limit on line {} uses {}; remove `stagger` or use `algorithm: fixed_window`",
                    other.position.line,
                    other.algorithm_kind
                ),
            );
        }
    }

    /// Adds the blocks of a `rate_limits` list to `blocks`, or reports that it is not a list.
    fn rate_limit_list<'n>(&mut self, file: &Path, node: &'n Node, blocks: &mut Vec<&'n Node>) {
        match &node.value {
            NodeValue::List(items) => blocks.extend(items.iter()),
            other => self.diagnostics.error(
                file,
                node.position,
                format!(
                    "`rate_limits` must be a list of rate_limit blocks, found {}",
                    other.kind_name()
                ),
            ),
        }
    }

    /// The policy `on_store_error` names, or `None` after reporting a bad one.
    fn store_error_policy(&mut self, file: &Path, node: &Node) -> Option<StoreErrorPolicy> {
        let message = match &node.value {
            NodeValue::Text(text) => match text.parse() {
                Ok(policy) => return Some(policy),
                Err(message) => message,
            },
            other => format!(
                "`on_store_error` must be one of allow, deny, local, found {}",
                other.kind_name()
            ),
        };
        self.diagnostics.error(file, node.position, message);
        None
    }
}

/// Where the descriptor `key`/`value` was defined before in `level`, as `file:line:column`.
fn defined_before(
    rules: &DomainRules,
    level: &Level,
    key: &str,
    value: Option<&str>,
) -> Option<String> {
    let entry = level.keys.get(key)?;
    let existing = match value {
        Some(v) => entry.exact.get(v).copied(),
        None => entry.key_only,
    }?;
    Some(
        rules
            .nodes
            .get(existing)
            .map(|n| format!("{}:{}", n.file.display(), n.position))
            .unwrap_or_default(),
    )
}

/// Adds a descriptor to its domain and to `level`, by value (wildcards also as patterns) or as key-only.
fn insert_descriptor(
    rules: &mut DomainRules,
    level: &mut Level,
    key: String,
    value: Option<String>,
    node: DescriptorNode,
) {
    let id = rules.nodes.len();
    rules.nodes.push(node);
    let entry = level.keys.entry(key).or_default();
    match value {
        Some(v) => {
            if v.contains('*') {
                entry.wildcards.push((WildcardPattern::new(&v), id));
            }
            entry.exact.insert(v, id);
        }
        None => entry.key_only = Some(id),
    }
}
