//! A YAML document as a tree of nodes that remember where they were written.
//!
//! The limits file is read into this tree with `serde-saphyr` (each node
//! through its `Spanned` wrapper), and every check after that works on the
//! tree, so every message can name the line and column of what it is about.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A line and column in a file, both counted from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// The line, from 1.
    pub line: u64,
    /// The column in characters, from 1.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One YAML node with the position where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    pub(crate) position: Position,
    pub(crate) value: NodeValue,
    /// The scalar exactly as written, for numbers (`0x1F`, `010`), when the source can be sliced.
    pub(crate) written: Option<String>,
}

/// What a YAML node holds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum NodeValue {
    Null,
    Bool(bool),
    Integer(i128),
    Float(f64),
    Text(String),
    List(Vec<Node>),
    /// Entries in file order.
    Map(Vec<(Node, Node)>),
}

impl NodeValue {
    /// The YAML kind, as a message names it ("a string", "a list", …).
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            NodeValue::Null => "null",
            NodeValue::Bool(_) => "a boolean",
            NodeValue::Integer(_) => "an integer",
            NodeValue::Float(_) => "a float",
            NodeValue::Text(_) => "a string",
            NodeValue::List(_) => "a list",
            NodeValue::Map(_) => "a mapping",
        }
    }
}

/// Why a document could not be read (invalid YAML, or over the [`YamlLimits`]), with where the reader stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) position: Position,
    pub(crate) message: String,
}

/// The first YAML document of a file, and where any later ones start.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Document {
    /// The first document's root (null for an empty file).
    pub(crate) root: Node,
    /// Where each later document starts; upstream reads only the first.
    pub(crate) ignored_documents: Vec<Position>,
}

/// The most YAML nodes one limits file may hold unless configured otherwise.
///
/// A rule costs about 8 nodes (a descriptor with `key`, `value` and a
/// `rate_limit` of `unit` and `requests_per_unit`), so this is about 120 000
/// rules in one file. Loading costs roughly 300 bytes per node while the
/// file is read (about 300 MB at this bound), released once it is loaded.
pub const DEFAULT_MAX_YAML_NODES: usize = 1_000_000;

/// The deepest YAML nesting (lists and mappings) a limits file may use unless configured otherwise.
///
/// Each level of nested `descriptors` costs two YAML levels (the list and
/// the descriptor's mapping), so 128 allows about 63 levels of descriptors.
pub const DEFAULT_MAX_YAML_DEPTH: usize = 128;

/// How much YAML one limits file may hold: bounds on what reading it costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YamlLimits {
    /// The most nodes (scalars, lists and mappings) in one file.
    pub max_nodes: usize,
    /// The deepest nesting of lists and mappings in one file.
    pub max_depth: usize,
}

impl Default for YamlLimits {
    /// [`DEFAULT_MAX_YAML_NODES`] and [`DEFAULT_MAX_YAML_DEPTH`].
    fn default() -> Self {
        YamlLimits {
            max_nodes: DEFAULT_MAX_YAML_NODES,
            max_depth: DEFAULT_MAX_YAML_DEPTH,
        }
    }
}

impl YamlLimits {
    /// serde-saphyr's budget for these limits; every other budget keeps its default
    /// except the event count, raised to follow the nodes (each collection is two events),
    /// and the anchor events aliases may replay, lowered to follow them.
    fn budget(self) -> serde_saphyr::budget::Budget {
        let mut budget = serde_saphyr::budget::Budget::default();
        budget.max_events = budget
            .max_events
            .max(self.max_nodes.saturating_mul(2).saturating_add(64));
        // Anchor events replayed by aliases become nodes: a file that replays
        // more than twice the node bound cannot load, so stop recording there.
        budget.max_recorded_anchor_events = budget
            .max_recorded_anchor_events
            .min(self.max_nodes.saturating_mul(2).saturating_add(64));
        budget.max_nodes = self.max_nodes;
        budget.max_depth = self.max_depth;
        budget
    }

    /// The message for a file that breaks `breach`, naming the setting to raise.
    fn breach_message(self, breach: &serde_saphyr::budget::BudgetBreach) -> String {
        use serde_saphyr::budget::BudgetBreach;
        match breach {
            BudgetBreach::Nodes { .. } | BudgetBreach::Events { .. } => format!(
                "limits file too large: more than {} YAML nodes (raise --config-max-nodes / TOLLGATE_CONFIG_MAX_NODES, or split the file)",
                self.max_nodes
            ),
            BudgetBreach::Depth { .. } => format!(
                "limits file nested too deeply: more than {} levels of YAML lists and mappings (raise --config-max-depth / TOLLGATE_CONFIG_MAX_DEPTH)",
                self.max_depth
            ),
            BudgetBreach::Aliases { .. } | BudgetBreach::RecordedAnchorEvents { .. } => {
                "limits file expands too far through YAML aliases (`*name` repeating an `&name` anchor): an alias bomb, or far more aliases than a limits file needs; write the repeated parts out or use fewer aliases".to_owned()
            }
            _ => "limits file too large for the YAML reader's bounds (too many anchors, documents or characters in one scalar)".to_owned(),
        }
    }
}

/// The error under the alias and snippet wrappers serde-saphyr puts around it.
fn innermost(mut error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::AliasError { error: inner, .. }
    | serde_saphyr::Error::WithSnippet { error: inner, .. } = error
    {
        error = inner;
    }
    error
}

/// Reads a file's YAML into a located tree, within `limits`.
pub(crate) fn parse_document(text: &str, limits: YamlLimits) -> Result<Document, SyntaxError> {
    let mut options = serde_saphyr::options::Options::default();
    // `n`, `no`, `on`, `y` are keys and values in limits files, not booleans.
    options.strict_booleans = true;
    options.budget = Some(limits.budget());
    match serde_saphyr::from_multiple_with_options::<Spanned<LocatedValue>>(text, options) {
        Ok(documents) => {
            let mut nodes = documents.into_iter().map(|d| into_node(d, text));
            let root = nodes.next().unwrap_or(Node {
                position: Position { line: 1, column: 1 },
                value: NodeValue::Null,
                written: None,
            });
            Ok(Document {
                root,
                ignored_documents: nodes.map(|n| n.position).collect(),
            })
        }
        Err(error) => {
            let position = error
                .location()
                .map(|location| Position {
                    line: location.line().max(1),
                    column: location.column().max(1),
                })
                .unwrap_or(Position { line: 1, column: 1 });
            let message = match innermost(&error) {
                serde_saphyr::Error::Budget { breach, .. } => limits.breach_message(breach),
                _ => {
                    let mut message = format!("invalid YAML: {}", error.without_snippet());
                    if let Some(at) = message.rfind(" at line ") {
                        message.truncate(at);
                    }
                    message
                }
            };
            Err(SyntaxError { position, message })
        }
    }
}

/// The value half of a spanned node, as `serde-saphyr` hands it over.
enum LocatedValue {
    Null,
    Bool(bool),
    Integer(i128),
    Float(f64),
    Text(String),
    List(Vec<Spanned<LocatedValue>>),
    Map(Vec<(Spanned<LocatedValue>, Spanned<LocatedValue>)>),
}

fn into_node(spanned: Spanned<LocatedValue>, text: &str) -> Node {
    let position = Position {
        line: spanned.referenced.line(),
        column: spanned.referenced.column(),
    };
    let span = spanned.defined.span();
    let written = match spanned.value {
        LocatedValue::Integer(_) | LocatedValue::Float(_) => span
            .byte_offset()
            .zip(span.byte_len())
            .and_then(|(start, len)| {
                let start = usize::try_from(start).ok()?;
                let end = start.checked_add(usize::try_from(len).ok()?)?;
                text.get(start..end)
            })
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
        _ => None,
    };
    let value = match spanned.value {
        LocatedValue::Null => NodeValue::Null,
        LocatedValue::Bool(b) => NodeValue::Bool(b),
        LocatedValue::Integer(i) => NodeValue::Integer(i),
        LocatedValue::Float(f) => NodeValue::Float(f),
        LocatedValue::Text(s) => NodeValue::Text(s),
        LocatedValue::List(items) => NodeValue::List(
            items
                .into_iter()
                .map(|item| into_node(item, text))
                .collect(),
        ),
        LocatedValue::Map(entries) => NodeValue::Map(
            entries
                .into_iter()
                .map(|(k, v)| (into_node(k, text), into_node(v, text)))
                .collect(),
        ),
    };
    Node {
        position,
        value,
        written,
    }
}

/// The serde visitor that accepts any YAML value.
struct AnyValueVisitor;

impl<'de> Visitor<'de> for AnyValueVisitor {
    type Value = LocatedValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E>(self) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Null)
    }

    fn visit_none<E>(self) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<LocatedValue, D::Error> {
        d.deserialize_any(AnyValueVisitor)
    }

    fn visit_bool<E>(self, v: bool) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Integer(i128::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Integer(i128::from(v)))
    }

    fn visit_i128<E>(self, v: i128) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Integer(v))
    }

    fn visit_u128<E>(self, v: u128) -> Result<LocatedValue, E> {
        Ok(i128::try_from(v).map_or(LocatedValue::Float(v as f64), LocatedValue::Integer))
    }

    fn visit_f64<E>(self, v: f64) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Text(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Text(v))
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<LocatedValue, E> {
        Ok(LocatedValue::Text(String::from_utf8_lossy(v).into_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<LocatedValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = access.next_element()? {
            items.push(item);
        }
        Ok(LocatedValue::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<LocatedValue, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = access.next_entry()? {
            entries.push(entry);
        }
        Ok(LocatedValue::Map(entries))
    }
}

impl<'de> Deserialize<'de> for LocatedValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyValueVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_carry_the_line_and_column_of_keys_and_values() {
        let doc = parse_document(
            "domain: x\ndescriptors:\n  - key: n\n    value: 404\n",
            YamlLimits::default(),
        )
        .unwrap()
        .root;
        let NodeValue::Map(entries) = &doc.value else {
            panic!("expected a map, got {doc:?}")
        };
        let (key, list) = &entries[1];
        assert_eq!(key.position, Position { line: 2, column: 1 });
        let NodeValue::List(items) = &list.value else {
            panic!("expected a list")
        };
        let NodeValue::Map(descriptor) = &items[0].value else {
            panic!("expected a map")
        };
        // `n` stays a string: booleans are only `true` and `false`.
        assert_eq!(descriptor[0].1.value, NodeValue::Text("n".into()));
        assert_eq!(descriptor[1].1.value, NodeValue::Integer(404));
        assert_eq!(
            descriptor[1].1.position,
            Position {
                line: 4,
                column: 12
            }
        );
    }

    #[test]
    fn numbers_keep_their_written_form() {
        let doc = parse_document("a: 0x1F\nb: 010\nc: 1_000\n", YamlLimits::default())
            .unwrap()
            .root;
        let NodeValue::Map(entries) = &doc.value else {
            panic!("expected a map")
        };
        let written: Vec<Option<&str>> =
            entries.iter().map(|(_, v)| v.written.as_deref()).collect();
        assert_eq!(written, [Some("0x1F"), Some("010"), Some("1_000")]);
    }

    #[test]
    fn later_documents_are_located_but_not_read() {
        let doc = parse_document("domain: a\n---\ndomain: b\n", YamlLimits::default()).unwrap();
        assert_eq!(doc.ignored_documents.len(), 1);
        assert_eq!(doc.ignored_documents[0].line, 3);
        assert_eq!(
            parse_document("", YamlLimits::default())
                .unwrap()
                .root
                .value,
            NodeValue::Null
        );
    }

    #[test]
    fn syntax_errors_have_a_position_and_a_bare_message() {
        let error = parse_document("a: [\n", YamlLimits::default()).unwrap_err();
        assert_eq!(error.position.line, 1);
        assert!(!error.message.contains(" at line "), "{}", error.message);
    }
}
