//! Reading a scalar of a limits file as the type its key wants, reporting any other.

use std::path::Path;

use super::Loader;
use crate::tree::{Node, NodeValue};

impl Loader {
    /// A scalar as text (numbers and booleans as written), `None` for null; reports other kinds.
    pub(super) fn text_value(&mut self, file: &Path, node: &Node, field: &str) -> Option<String> {
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
    pub(super) fn parsed_text<T>(
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
    pub(super) fn bool_value(&mut self, file: &Path, node: &Node, field: &str) -> bool {
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
    pub(super) fn integer_value(
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
