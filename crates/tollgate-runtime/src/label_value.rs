//! A Prometheus label value that is written escaped, whatever it holds.
//!
//! prometheus-client writes a `String` label value as it is, so a value
//! holding a double quote ends the value early and a newline starts a new
//! sample line: a caller who chooses a label value could break the scrape
//! or add series of its own. [`LabelValue`] writes the value as the text
//! format asks (OpenMetrics and Prometheus 0.0.4 alike): `\` as `\\`, `"`
//! as `\"` and a line feed as `\n`; every other character as it is.

use std::fmt::{self, Write};

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// A label value, escaped when it is written.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelValue(pub String);

impl LabelValue {
    /// The value as it is (not escaped).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for LabelValue {
    fn from(value: &str) -> Self {
        LabelValue(value.to_owned())
    }
}

impl From<String> for LabelValue {
    fn from(value: String) -> Self {
        LabelValue(value)
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => r"\\",
                b'"' => r#"\""#,
                _ => r"\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::registry::Registry;

    use super::LabelValue;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Labels {
        name: LabelValue,
    }

    #[test]
    fn backslash_quote_and_newline_are_escaped_and_nothing_else() {
        let family = Family::<Labels, Counter>::default();
        let mut registry = Registry::default();
        registry.register("hits", "Hits", family.clone());
        // (value, as written between the quotes)
        let table = [
            ("plain é/x y\t", "plain é/x y\t"),
            ("a\\b", r"a\\b"),
            ("a\"b", r#"a\"b"#),
            ("a\ninjected_total 42\n", r"a\ninjected_total 42\n"),
            ("\\\"\n", r#"\\\"\n"#),
        ];
        for (value, written) in table {
            family.get_or_create(&Labels { name: value.into() }).inc();
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
            let line = format!("hits_total{{name=\"{written}\"}} 1");
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
            family.clear();
        }
    }
}
