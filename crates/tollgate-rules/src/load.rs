//! Reading limits files into a [`RuleSet`], checking everything on the way.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket, Unit,
};

use crate::diagnostics::Diagnostics;
use crate::model::{
    AlgorithmKind, DescriptorNode, DomainRules, Level, Limit, Rule, RuleSet, StoreErrorPolicy,
    WildcardPattern, WindowLength,
};
use crate::tree::{Node, NodeValue, Position, parse_document};

/// Switches that change how files are combined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Merge files that name the same domain (upstream's `MERGE_DOMAIN_CONFIG`)
    /// instead of rejecting the second one; duplicate descriptors are still errors.
    pub merge_domains: bool,
}

/// The result of loading: the rules that loaded, and everything found wrong.
///
/// When `diagnostics` has errors, `rule_set` holds only what could be read
/// and must not replace a running configuration.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// The rules.
    pub rule_set: RuleSet,
    /// Errors and warnings, sorted by file and position.
    pub diagnostics: Diagnostics,
    /// How many files were read.
    pub file_count: usize,
}

impl Loaded {
    /// The rules and their warnings if there were no errors, else all diagnostics.
    pub fn into_result(self) -> Result<(RuleSet, Diagnostics), Diagnostics> {
        if self.diagnostics.has_errors() {
            Err(self.diagnostics)
        } else {
            Ok((self.rule_set, self.diagnostics))
        }
    }
}

/// The limits files at `path`: the file itself, or the `*.yaml` / `*.yml`
/// files directly in the directory, sorted by name.
///
/// Entries whose names start with a dot (`.hidden.yaml`, Kubernetes'
/// `..data`) are skipped; symbolic links are followed.
pub fn limits_files(path: &Path) -> io::Result<Vec<PathBuf>> {
    let metadata = fs::metadata(path)?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in fs::read_dir(path)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let file = entry.path();
        if fs::metadata(&file).is_ok_and(|m| m.is_file()) {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}

/// Loads the limits file or directory at `path`.
///
/// Fails only when `path` itself cannot be read; a file inside it that
/// cannot be read becomes an error in the diagnostics.
pub fn load_path(path: &Path, options: LoadOptions) -> io::Result<Loaded> {
    load_path_observed(path, options, |_, _| {})
}

/// [`load_path`], showing `observe` each file as it is read: its path and
/// its bytes, or the error reading it (so a caller can hash what was loaded).
pub fn load_path_observed(
    path: &Path,
    options: LoadOptions,
    mut observe: impl FnMut(&Path, Result<&[u8], &io::Error>),
) -> io::Result<Loaded> {
    let files = limits_files(path)?;
    let mut sources = Vec::with_capacity(files.len());
    let mut unreadable = Diagnostics::new();
    let first = Position { line: 1, column: 1 };
    for file in files {
        match fs::read(&file) {
            Ok(bytes) => {
                observe(&file, Ok(&bytes));
                match String::from_utf8(bytes) {
                    Ok(text) => sources.push((file, text)),
                    Err(_) => unreadable.error(&file, first, "the file is not UTF-8 text"),
                }
            }
            Err(error) => {
                observe(&file, Err(&error));
                unreadable.error(&file, first, format!("cannot read the file: {error}"));
            }
        }
    }
    let file_count = sources.len() + unreadable.error_count();
    let mut loaded = load_sources(
        sources.iter().map(|(f, t)| (f.as_path(), t.as_str())),
        options,
    );
    for diagnostic in unreadable.all() {
        loaded.diagnostics.error(
            &diagnostic.file,
            diagnostic.position,
            diagnostic.message.clone(),
        );
    }
    loaded.diagnostics.sort();
    loaded.file_count = file_count;
    Ok(loaded)
}

/// Loads limits files given as `(file name, text)` pairs, in order.
pub fn load_sources<'a>(
    sources: impl IntoIterator<Item = (&'a Path, &'a str)>,
    options: LoadOptions,
) -> Loaded {
    let mut loader = Loader {
        options,
        diagnostics: Diagnostics::new(),
        domains: HashMap::new(),
        replaces: Vec::new(),
    };
    let mut file_count = 0;
    for (file, text) in sources {
        file_count += 1;
        loader.load_file(file, text);
    }
    loader.check_replaces();
    let mut diagnostics = loader.diagnostics;
    diagnostics.sort();
    Loaded {
        rule_set: RuleSet {
            domains: loader
                .domains
                .into_iter()
                .map(|(name, d)| (name, d.rules))
                .collect(),
        },
        diagnostics,
        file_count,
    }
}

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
    "unit_multiplier",
    "window",
];

/// The keys of a `replaces` entry.
const REPLACES_KEYS: &[&str] = &["name"];

/// One mapping level of the file, for checking its keys.
#[derive(Clone, Copy)]
struct Section {
    /// How a message names it ("a descriptor").
    name: &'static str,
    keys: &'static [&'static str],
}

/// The top level of a file.
const FILE_SECTION: Section = Section {
    name: "the top level of a file",
    keys: FILE_KEYS,
};
/// A descriptor.
const DESCRIPTOR_SECTION: Section = Section {
    name: "a descriptor",
    keys: DESCRIPTOR_KEYS,
};
/// A `rate_limit` block (or an entry of `rate_limits`).
const RATE_LIMIT_SECTION: Section = Section {
    name: "`rate_limit`",
    keys: RATE_LIMIT_KEYS,
};
/// An entry of `replaces`.
const REPLACES_SECTION: Section = Section {
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

/// A domain being built, with where it was first named.
struct DomainUnderConstruction {
    rules: DomainRules,
    file: PathBuf,
    position: Position,
}

/// A `replaces` name waiting to be checked against every name in its domain.
struct PendingReplace {
    domain: String,
    file: PathBuf,
    position: Position,
    name: String,
}

/// The state of one load: options, findings, and the domains built so far.
struct Loader {
    options: LoadOptions,
    diagnostics: Diagnostics,
    domains: HashMap<String, DomainUnderConstruction>,
    replaces: Vec<PendingReplace>,
}

/// Where a descriptor sits, for messages and for the rule's path.
struct Context<'a> {
    file: &'a Path,
    domain: &'a str,
}

impl Loader {
    /// Loads one file's domain and descriptors.
    fn load_file(&mut self, file: &Path, text: &str) {
        let document = match parse_document(text) {
            Ok(document) => {
                for position in &document.ignored_documents {
                    self.diagnostics.warning(
                        file,
                        *position,
                        "only the first YAML document of a file is read (as upstream); this one is ignored",
                    );
                }
                document.root
            }
            Err(error) => {
                self.diagnostics.error(
                    file,
                    error.position,
                    format!("invalid YAML: {}", error.message),
                );
                return;
            }
        };
        let entries = match &document.value {
            NodeValue::Map(entries) => entries.as_slice(),
            NodeValue::Null => &[],
            other => {
                self.diagnostics.error(
                    file,
                    document.position,
                    format!(
                        "a limits file must be a mapping with `domain` and `descriptors`, found {}",
                        other.kind_name()
                    ),
                );
                return;
            }
        };
        let mut domain: Option<(String, Position)> = None;
        let mut descriptors: Option<&Node> = None;
        for (key, value) in self.checked_entries(file, entries, FILE_SECTION) {
            match key {
                "domain" => {
                    let is_text = matches!(value.value, NodeValue::Null | NodeValue::Text(_));
                    let name = self.text_value(file, value, "domain").unwrap_or_default();
                    if name.is_empty() && is_text {
                        self.diagnostics
                            .error(file, value.position, "`domain` must not be empty");
                    }
                    domain = Some((name, value.position));
                }
                "descriptors" => descriptors = Some(value),
                _ => {}
            }
        }
        let Some((name, position)) = domain else {
            self.diagnostics.error(
                file,
                document.position,
                "missing `domain`: every limits file names its domain",
            );
            self.check_descriptors_only(file, "", descriptors);
            return;
        };
        if name.is_empty() {
            self.check_descriptors_only(file, "", descriptors);
            return;
        }
        let mut target = match self.domains.remove(&name) {
            Some(existing) if self.options.merge_domains => existing,
            Some(existing) => {
                self.diagnostics.error(
                    file,
                    position,
                    format!(
                        "duplicate domain `{name}`: already defined at {}:{}; use one file per domain or merge_domains",
                        existing.file.display(),
                        existing.position
                    ),
                );
                self.domains.insert(name.clone(), existing);
                self.check_descriptors_only(file, &name, descriptors);
                return;
            }
            None => DomainUnderConstruction {
                rules: DomainRules::default(),
                file: file.to_path_buf(),
                position,
            },
        };
        if let Some(list) = descriptors {
            let context = Context {
                file,
                domain: &name,
            };
            let mut root = std::mem::take(&mut target.rules.root);
            self.load_level(&context, &mut target.rules, &mut root, &[], list);
            target.rules.root = root;
        }
        self.domains.insert(name, target);
    }

    /// Checks descriptors that will not be loaded (their file's domain is
    /// missing or taken), so that every error in them is still reported.
    fn check_descriptors_only(&mut self, file: &Path, domain: &str, descriptors: Option<&Node>) {
        let Some(list) = descriptors else { return };
        let pending = self.replaces.len();
        let context = Context { file, domain };
        let mut scratch = DomainRules::default();
        let mut root = Level::default();
        self.load_level(&context, &mut scratch, &mut root, &[], list);
        // Names in `replaces` cannot be checked against a domain that is not loaded.
        self.replaces.truncate(pending);
    }

    /// The entries of a mapping with string keys that are valid in `section`;
    /// reports the others (unknown keys as errors, upstream keys in the wrong place as warnings).
    fn checked_entries<'n>(
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

    /// A scalar as text (numbers and booleans as written), `None` for null; reports other kinds.
    fn text_value(&mut self, file: &Path, node: &Node, field: &str) -> Option<String> {
        match &node.value {
            NodeValue::Null => None,
            NodeValue::Text(s) => Some(s.clone()),
            NodeValue::Integer(i) => Some(node.written.clone().unwrap_or_else(|| i.to_string())),
            NodeValue::Bool(b) => Some(b.to_string()),
            NodeValue::Float(_) => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!("`{field}` is a float; upstream rejects floats, so quote it if it is meant as text"),
                );
                None
            }
            other => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!("`{field}` must be a string, found {}", other.kind_name()),
                );
                None
            }
        }
    }

    /// A string field turned into a value by `parse`; reports a non-string
    /// (saying what was expected, e.g. "a duration such as `5m`") or the
    /// parse error at the field's position.
    fn parsed_text<T>(
        &mut self,
        file: &Path,
        node: &Node,
        field: &str,
        expected: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let parsed = match &node.value {
            NodeValue::Text(text) => parse(text),
            other => Err(format!(
                "`{field}` must be {expected}, found {}",
                other.kind_name()
            )),
        };
        parsed
            .map_err(|message| self.diagnostics.error(file, node.position, message))
            .ok()
    }

    /// A boolean, with YAML 1.1 spellings accepted as upstream does; reports other kinds.
    fn bool_value(&mut self, file: &Path, node: &Node, field: &str) -> bool {
        match &node.value {
            NodeValue::Bool(b) => *b,
            NodeValue::Null => false,
            NodeValue::Text(text) if yaml11_bool(text).is_some() => {
                let value = yaml11_bool(text).unwrap_or(false);
                self.diagnostics.warning(
                    file,
                    node.position,
                    format!("`{field}: {text}` is read as `{value}` (a YAML 1.1 boolean, as upstream reads it); write `{value}`"),
                );
                value
            }
            other => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!(
                        "`{field}` must be true or false, found {}",
                        other.kind_name()
                    ),
                );
                false
            }
        }
    }

    /// An integer in `min..=max`, or `None` after reporting why not.
    fn integer_value(
        &mut self,
        file: &Path,
        node: &Node,
        field: &str,
        min: i128,
        max: i128,
    ) -> Option<i128> {
        match &node.value {
            NodeValue::Integer(i) if *i < 0 && min >= 0 => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!("`{field}` must not be negative, found {i}"),
                );
                None
            }
            NodeValue::Integer(i) if *i < min => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!("`{field}` must be at least {min}, found {i}"),
                );
                None
            }
            NodeValue::Integer(i) if *i > max => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!("`{field}` must be at most {max}, found {i}"),
                );
                None
            }
            NodeValue::Integer(i) => Some(*i),
            NodeValue::Float(f) => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!("`{field}` must be an integer, found the float {f}"),
                );
                None
            }
            other => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!("`{field}` must be an integer, found {}", other.kind_name()),
                );
                None
            }
        }
    }

    /// Loads a `descriptors` list into `level`.
    fn load_level(
        &mut self,
        context: &Context<'_>,
        rules: &mut DomainRules,
        level: &mut Level,
        path: &[(String, Option<String>)],
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
            self.load_descriptor(context, rules, level, path, item);
        }
    }

    /// Loads one descriptor, its limits and its children into `level`.
    fn load_descriptor(
        &mut self,
        context: &Context<'_>,
        rules: &mut DomainRules,
        level: &mut Level,
        path: &[(String, Option<String>)],
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
        let mut key = None;
        let mut key_has_wrong_type = false;
        let mut value = None;
        let mut limits = Vec::new();
        let mut children = None;
        let mut shadow_mode = false;
        let mut on_store_error = StoreErrorPolicy::default();
        let mut detailed_metric = false;
        for (name, node) in self.checked_entries(file, entries, DESCRIPTOR_SECTION) {
            match name {
                "key" => {
                    key = self.text_value(file, node, "key");
                    key_has_wrong_type = !matches!(
                        node.value,
                        NodeValue::Null
                            | NodeValue::Text(_)
                            | NodeValue::Integer(_)
                            | NodeValue::Bool(_)
                    );
                }
                "value" => {
                    value = self
                        .text_value(file, node, "value")
                        .filter(|v| !v.is_empty())
                }
                "rate_limit" if !matches!(node.value, NodeValue::Null) => limits.push(node),
                "rate_limits" => match &node.value {
                    NodeValue::List(blocks) => limits.extend(blocks.iter()),
                    NodeValue::Null => {}
                    other => self.diagnostics.error(
                        file,
                        node.position,
                        format!(
                            "`rate_limits` must be a list of rate_limit blocks, found {}",
                            other.kind_name()
                        ),
                    ),
                },
                "descriptors" => children = Some(node),
                "shadow_mode" => shadow_mode = self.bool_value(file, node, "shadow_mode"),
                "on_store_error" => match &node.value {
                    NodeValue::Text(text) => match text.parse() {
                        Ok(policy) => on_store_error = policy,
                        Err(message) => self.diagnostics.error(file, node.position, message),
                    },
                    other => self.diagnostics.error(
                        file,
                        node.position,
                        format!(
                            "`on_store_error` must be one of allow, deny, local, found {}",
                            other.kind_name()
                        ),
                    ),
                },
                "detailed_metric" => {
                    detailed_metric = self.bool_value(file, node, "detailed_metric")
                }
                "value_to_metric" => {
                    self.bool_value(file, node, "value_to_metric");
                }
                "quota_mode" | "share_threshold" => {
                    self.diagnostics.warning(
                        file,
                        node.position,
                        format!("`{name}` is not supported by Tollgate yet and is ignored"),
                    );
                }
                _ => {}
            }
        }
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            if key_has_wrong_type {
                return;
            }
            self.diagnostics.error(
                file,
                item.position,
                "descriptor has an empty or missing `key`",
            );
            return;
        };
        let mut own_path = path.to_vec();
        own_path.push((key.clone(), value.clone()));
        let dotted = crate::model::dotted_path(context.domain, &own_path);
        let entry = level.keys.entry(key.clone()).or_default();
        let existing = match &value {
            Some(v) => entry.exact.get(v).copied(),
            None => entry.key_only,
        };
        if let Some(existing) = existing {
            let first = rules
                .nodes
                .get(existing)
                .map(|n| format!("{}:{}", n.file.display(), n.position))
                .unwrap_or_default();
            self.diagnostics.error(
                file,
                item.position,
                format!("duplicate descriptor `{dotted}`: already defined at {first}"),
            );
            return;
        }
        let mut built_limits = Vec::new();
        for block in limits {
            if let Some(limit) = self.load_limit(context, block) {
                built_limits.push(limit);
            }
        }
        let mut child_level = Level::default();
        if let Some(children) = children {
            self.load_level(context, rules, &mut child_level, &own_path, children);
        }
        let rule = (!built_limits.is_empty()).then(|| Rule {
            path: own_path,
            limits: built_limits,
            shadow_mode,
            on_store_error,
            detailed_metric,
            file: file.to_path_buf(),
            position: item.position,
        });
        let id = rules.nodes.len();
        rules.nodes.push(DescriptorNode {
            rule,
            children: child_level,
            file: file.to_path_buf(),
            position: item.position,
        });
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

    /// Loads one `rate_limit` block and builds its algorithm.
    fn load_limit(&mut self, context: &Context<'_>, block: &Node) -> Option<Limit> {
        let file = context.file;
        let NodeValue::Map(entries) = &block.value else {
            self.diagnostics.error(
                file,
                block.position,
                format!(
                    "`rate_limit` must be a mapping, found {}",
                    block.value.kind_name()
                ),
            );
            return None;
        };
        let mut ok = true;
        let errors_before = self.diagnostics.error_count();
        let mut unit: Option<(Unit, Position)> = None;
        let mut requests_per_unit = 0u32;
        let mut requests_position: Option<Position> = None;
        let mut unlimited = false;
        let mut name = None;
        let mut replaces = Vec::new();
        let mut algorithm_kind = AlgorithmKind::default();
        let mut burst: Option<(u64, Position)> = None;
        let mut multiplier: Option<(u32, Position)> = None;
        let mut window: Option<(Duration, Position)> = None;
        let checked = self.checked_entries(file, entries, RATE_LIMIT_SECTION);
        for (field, node) in checked {
            match field {
                // An empty `unit:` (as beside `unlimited`) is no unit.
                "unit" if matches!(node.value, NodeValue::Null) => {}
                "unit" => {
                    let unit_named = |text: &str| {
                        text.parse::<Unit>()
                            .map_err(|e| format!("`unit`: {}", e.replace('"', "`")))
                    };
                    match self.parsed_text(
                        file,
                        node,
                        field,
                        "a string such as `second`",
                        unit_named,
                    ) {
                        Some(u) => unit = Some((u, node.position)),
                        None => ok = false,
                    }
                }
                "requests_per_unit" => {
                    requests_position = Some(node.position);
                    match self.integer_value(file, node, field, 0, i128::from(u32::MAX)) {
                        Some(n) => requests_per_unit = n as u32,
                        None => ok = false,
                    }
                }
                "unlimited" => {
                    unlimited = self.bool_value(file, node, field);
                }
                "name" => name = self.text_value(file, node, field).filter(|n| !n.is_empty()),
                "replaces" => match &node.value {
                    NodeValue::List(items) => {
                        for item in items {
                            let NodeValue::Map(entries) = &item.value else {
                                self.diagnostics.error(file, item.position, format!("a `replaces` entry must be a mapping with `name`, found {}", item.value.kind_name()));
                                continue;
                            };
                            let mut replaced = None;
                            for (_, value) in self.checked_entries(file, entries, REPLACES_SECTION)
                            {
                                replaced = self.text_value(file, value, "name");
                            }
                            match replaced.filter(|n| !n.is_empty()) {
                                Some(n) => replaces.push((n, item.position)),
                                None => {
                                    self.diagnostics.error(
                                        file,
                                        item.position,
                                        "a `replaces` entry has an empty or missing `name`",
                                    );
                                    ok = false;
                                }
                            }
                        }
                    }
                    NodeValue::Null => {}
                    other => {
                        self.diagnostics.error(
                            file,
                            node.position,
                            format!(
                                "`replaces` must be a list of `name:` entries, found {}",
                                other.kind_name()
                            ),
                        );
                        ok = false;
                    }
                },
                "algorithm" => {
                    let kind = |text: &str| text.parse::<AlgorithmKind>();
                    match self.parsed_text(
                        file,
                        node,
                        field,
                        "a string such as `token_bucket`",
                        kind,
                    ) {
                        Some(k) => algorithm_kind = k,
                        None => ok = false,
                    }
                }
                "burst" => match self.integer_value(file, node, field, 0, i128::from(u64::MAX)) {
                    Some(n) => burst = Some((n as u64, node.position)),
                    None => ok = false,
                },
                "unit_multiplier" => {
                    match self.integer_value(file, node, field, 1, i128::from(u32::MAX)) {
                        Some(n) => multiplier = Some((n as u32, node.position)),
                        None => ok = false,
                    }
                }
                "window" => {
                    match self.parsed_text(
                        file,
                        node,
                        field,
                        "a duration such as `5m`",
                        parse_window,
                    ) {
                        Some(d) => window = Some((d, node.position)),
                        None => ok = false,
                    }
                }
                _ => {}
            }
        }
        for (replaced, position) in &replaces {
            if name.as_deref() == Some(replaced.as_str()) {
                self.diagnostics.error(
                    file,
                    *position,
                    format!("rate limit `{replaced}` replaces itself"),
                );
                ok = false;
            } else {
                self.replaces.push(PendingReplace {
                    domain: context.domain.to_owned(),
                    file: file.to_path_buf(),
                    position: *position,
                    name: replaced.clone(),
                });
            }
        }
        if unlimited {
            if let Some((_, position)) = unit {
                self.diagnostics.error(
                    file,
                    position,
                    "`unit` cannot be combined with `unlimited: true`",
                );
                ok = false;
            }
            if let Some((_, position)) = window {
                self.diagnostics.error(
                    file,
                    position,
                    "`window` cannot be combined with `unlimited: true`",
                );
                ok = false;
            }
            if !ok {
                return None;
            }
            return Some(Limit {
                name,
                replaces: replaces.into_iter().map(|(n, _)| n).collect(),
                requests_per_unit,
                window: None,
                algorithm_kind,
                burst: burst.map(|(b, _)| b),
                algorithm: None,
                position: block.position,
            });
        }
        let window_position = unit.map(|(_, p)| p).or(window.map(|(_, p)| p));
        let length = match (unit, window) {
            (Some((_, unit_position)), Some(_)) => {
                self.diagnostics.error(
                    file,
                    unit_position,
                    "`unit` and `window` cannot both be set; use one",
                );
                return None;
            }
            (Some((unit, _)), None) => WindowLength::Unit {
                unit,
                multiplier: multiplier.map_or(1, |(m, _)| m),
            },
            (None, Some((duration, _))) => {
                if let Some((_, position)) = multiplier {
                    self.diagnostics.error(
                        file,
                        position,
                        "`unit_multiplier` needs `unit`, not `window`",
                    );
                    return None;
                }
                WindowLength::Duration(duration)
            }
            (None, None) => {
                if ok {
                    self.diagnostics.error(
                        file,
                        block.position,
                        "`rate_limit` needs a `unit` (second, minute, hour, day, week, month, year), a `window`, or `unlimited: true`",
                    );
                }
                return None;
            }
        };
        if !ok {
            return None;
        }
        let burst_is_ignored = matches!(
            algorithm_kind,
            AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow | AlgorithmKind::SlidingLog
        );
        if let Some((_, position)) = burst.filter(|_| burst_is_ignored) {
            self.diagnostics.warning(
                file,
                position,
                format!("`burst` has no effect with `{algorithm_kind}` and is ignored"),
            );
        }
        if requests_per_unit == 0 && algorithm_kind != AlgorithmKind::FixedWindow {
            self.diagnostics.error(
                file,
                requests_position.unwrap_or(block.position),
                format!("`{algorithm_kind}` needs `requests_per_unit` of at least 1 (only `fixed_window` reads 0 as \"always over\")"),
            );
            return None;
        }
        let burst_position = burst.map(|(_, p)| p);
        let burst = burst.map(|(b, _)| b);
        match build_algorithm(
            algorithm_kind,
            u64::from(requests_per_unit),
            length.duration(),
            burst,
        ) {
            Ok(algorithm) => {
                // A misspelt `requests_per_unit` has its own error already.
                if requests_position.is_none() && self.diagnostics.error_count() == errors_before {
                    self.diagnostics.warning(
                        file,
                        block.position,
                        "`requests_per_unit` is missing, so it is 0 and every request is over the limit (as upstream); write `requests_per_unit: 0` if that is meant",
                    );
                }
                Some(Limit {
                    name,
                    replaces: replaces.into_iter().map(|(n, _)| n).collect(),
                    requests_per_unit,
                    window: Some(length),
                    algorithm_kind,
                    burst,
                    algorithm: Some(algorithm),
                    position: block.position,
                })
            }
            Err((field, message)) => {
                let position = match field {
                    "requests_per_unit" => requests_position,
                    "burst" => burst_position,
                    _ => window_position,
                };
                self.diagnostics
                    .error(file, position.unwrap_or(block.position), message);
                None
            }
        }
    }

    /// Reports every `replaces` name that no limit in its domain has.
    fn check_replaces(&mut self) {
        let pending = std::mem::take(&mut self.replaces);
        for replace in pending {
            let known = self.domains.get(&replace.domain).is_some_and(|d| {
                d.rules
                    .nodes
                    .iter()
                    .filter_map(|n| n.rule.as_ref())
                    .flat_map(|r| r.limits.iter())
                    .any(|l| l.name.as_deref() == Some(replace.name.as_str()))
            });
            if !known {
                self.diagnostics.error(
                    &replace.file,
                    replace.position,
                    format!(
                        "`replaces` names `{}`, but no rate limit in domain `{}` has that name",
                        replace.name, replace.domain
                    ),
                );
            }
        }
    }
}

/// Builds the algorithm for one limit, so a parameter it cannot work with is a
/// config error; the error names the file's field and says what is wrong.
pub(crate) fn build_algorithm(
    kind: AlgorithmKind,
    requests: u64,
    window: Duration,
    burst: Option<u64>,
) -> Result<AnyAlgorithm, (&'static str, String)> {
    let built: Result<AnyAlgorithm, tollgate_core::ConfigError> = match kind {
        AlgorithmKind::FixedWindow => FixedWindow::new(requests, window).map(Into::into),
        AlgorithmKind::TokenBucket => {
            TokenBucket::new(burst.unwrap_or(requests), requests, window).map(Into::into)
        }
        AlgorithmKind::Gcra => {
            Gcra::new(requests, window, burst.unwrap_or(requests)).map(Into::into)
        }
        AlgorithmKind::SlidingWindow => SlidingWindow::new(requests, window).map(Into::into),
        AlgorithmKind::SlidingLog => SlidingLog::new(requests, window).map(Into::into),
        AlgorithmKind::LeakyBucket => {
            LeakyBucket::policer(requests, window, burst.unwrap_or(0)).map(Into::into)
        }
    };
    built.map_err(|e| {
        let field = match e.parameter() {
            "limit" | "rate" | "tokens_per_fill" => "requests_per_unit",
            "max_tokens" | "burst" => "burst",
            _ => "window",
        };
        let message = format!(
            "this `{kind}` limit cannot be built: `{field}` {}",
            e.reason()
        );
        (field, message)
    })
}

/// The YAML 1.1 spelling of a boolean that upstream's parser accepts (`yes`, `On`, `N`, …).
fn yaml11_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            Some(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            Some(false)
        }
        _ => None,
    }
}

/// Parses `window:`: a duration such as `90s`, `5m`, `1h 30m`, or a unit name.
fn parse_window(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let duration = match text.parse::<Unit>() {
        Ok(unit) => unit.duration(),
        Err(_) => humantime::parse_duration(text).map_err(|e| {
            format!("`window` `{text}` is not a duration ({e}); write e.g. `30s`, `5m`, `1h`")
        })?,
    };
    if duration.is_zero() {
        return Err("`window` must be longer than zero".to_owned());
    }
    Ok(duration)
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
