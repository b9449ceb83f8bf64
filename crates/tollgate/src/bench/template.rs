//! `bench rls` descriptor templates: `key=value[,key=value…]` where `{k}` in
//! a value stands for the request's key index.

use std::fmt::Write as _;

use tollgate_protocol::rls::wire::{Entry, RateLimitDescriptor};

use crate::CommandError;

/// One piece of a descriptor value: literal text or the key index.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Key,
}

/// A descriptor whose values may hold `{k}`.
#[derive(Clone, Debug)]
pub(super) struct Template {
    entries: Vec<(String, Vec<Piece>)>,
}

/// Parses `key=value[,key=value…]`, splitting each value at `{k}`.
pub(super) fn parse_template(text: &str) -> Result<Template, CommandError> {
    let mut entries = Vec::new();
    for part in text.split(',') {
        let Some((key, value)) = part.split_once('=') else {
            return Err(CommandError::Usage(format!(
                "--descriptor {text:?}: `{part}` is not key=value"
            )));
        };
        if key.is_empty() {
            return Err(CommandError::Usage(format!(
                "--descriptor {text:?}: a key is empty"
            )));
        }
        let mut pieces = Vec::new();
        let mut rest = value;
        while let Some(at) = rest.find("{k}") {
            if at > 0 {
                pieces.push(Piece::Text(rest[..at].to_owned()));
            }
            pieces.push(Piece::Key);
            rest = &rest[at + 3..];
        }
        if !rest.is_empty() || pieces.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        entries.push((key.to_owned(), pieces));
    }
    Ok(Template { entries })
}

impl Template {
    /// The descriptor for key index `key`.
    pub(super) fn render(&self, key: u64) -> RateLimitDescriptor {
        let entries = self
            .entries
            .iter()
            .map(|(name, pieces)| {
                let mut value = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Text(text) => value.push_str(text),
                        Piece::Key => {
                            let _ = write!(value, "{key}");
                        }
                    }
                }
                Entry {
                    key: name.clone(),
                    value,
                }
            })
            .collect();
        RateLimitDescriptor {
            entries,
            ..RateLimitDescriptor::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_replaces_every_k_in_values() {
        let template = parse_template("user={k},path=/a/{k}/b{k}x,plain=v").unwrap();
        let descriptor = template.render(42);
        let text: Vec<_> = descriptor
            .entries
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect();
        assert_eq!(text, ["user=42", "path=/a/42/b42x", "plain=v"]);
    }

    #[test]
    fn an_empty_value_is_allowed_but_not_an_empty_key_or_a_missing_equals() {
        let descriptor = parse_template("k=").unwrap().render(0);
        assert_eq!(descriptor.entries[0].value, "");
        assert!(matches!(
            parse_template("=v"),
            Err(CommandError::Usage(message)) if message.contains("a key is empty")
        ));
        assert!(matches!(
            parse_template("user"),
            Err(CommandError::Usage(message)) if message.contains("is not key=value")
        ));
    }
}
