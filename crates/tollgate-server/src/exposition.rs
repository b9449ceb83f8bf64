//! The Prometheus text format (0.0.4) that `/metrics` serves, with the extra labels of upstream's `EXTRA_TAGS` on every series.
//!
//! The registry encodes OpenMetrics; [`prometheus_text`] turns that into the
//! Prometheus text format, the one envoyproxy/ratelimit's exporter serves
//! (its handler does not offer OpenMetrics). That format lets a counter
//! family be named without the `_total` suffix, as upstream's counters are
//! (`ratelimit_service_rate_limit_over_limit`, …), and still be typed
//! `counter`. The translation:
//! * a counter family whose samples end in `_total` is named with the
//!   suffix (`# TYPE ratelimit_store_errors_total counter`), so every
//!   sample name stays as it was;
//! * `unknown` becomes `untyped`; `# UNIT` and `# EOF` lines go (the
//!   format has neither);
//! * each sample gets the [`ExtraTags`] as labels, after its own; a series
//!   that already has a label of that name keeps its own value.

use std::fmt::Write as _;

/// The content type of [`prometheus_text`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Labels added to every Prometheus series and tags added to every statsd
/// line (upstream's `EXTRA_TAGS`): names valid as Prometheus label names,
/// values free of control characters, in the order given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtraTags(Vec<(String, String)>);

/// Label names Prometheus gives a meaning of its own (histogram buckets, summary quantiles).
const RESERVED_LABELS: [&str; 2] = ["le", "quantile"];

impl ExtraTags {
    /// Parses upstream's format, `name:value,name:value`; the error says which item is wrong and why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut tags: Vec<(String, String)> = Vec::new();
        if text.trim().is_empty() {
            return Ok(ExtraTags(tags));
        }
        for item in text.split(',') {
            let Some((name, value)) = item.split_once(':') else {
                return Err(format!("{item:?} is not name:value"));
            };
            if !is_label_name(name) {
                return Err(format!(
                    "{name:?} is not a label name (letters, digits and _, not starting with a digit or __)"
                ));
            }
            if RESERVED_LABELS.contains(&name) {
                return Err(format!("{name:?} is a label Prometheus reserves"));
            }
            if value.is_empty() {
                return Err(format!("{name:?} has no value"));
            }
            if value.chars().any(char::is_control) {
                return Err(format!("the value of {name:?} holds a control character"));
            }
            if tags.iter().any(|(seen, _)| seen == name) {
                return Err(format!("{name:?} is given twice"));
            }
            tags.push((name.to_owned(), value.to_owned()));
        }
        Ok(ExtraTags(tags))
    }

    /// The tags, in the order given.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether `name` is a Prometheus label name not reserved for Prometheus's own use (`__…`).
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// `openmetrics` (as the registry encodes it) in the Prometheus text format, with `extra` on every sample.
pub fn prometheus_text(openmetrics: &str, extra: &ExtraTags) -> String {
    let lines: Vec<&str> = openmetrics.lines().collect();
    let mut out = String::with_capacity(openmetrics.len() + 64);
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // A descriptor: HELP, then TYPE, then perhaps UNIT.
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = lines
                .get(i + 1)
                .and_then(|l| l.strip_prefix("# TYPE "))
                .and_then(|l| l.rsplit_once(' '))
                .map_or("untyped", |(_, kind)| kind);
            let first_sample = lines[i + 1..]
                .iter()
                .take_while(|l| !l.starts_with("# HELP "))
                .find(|l| !l.starts_with('#'))
                .copied()
                .unwrap_or("");
            let name = family_name(name, kind, first_sample);
            let kind = match kind {
                "unknown" => "untyped",
                // Only these two appear in the registry; the format has no info or stateset.
                "info" | "stateset" => "gauge",
                kind => kind,
            };
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            i += 1;
            while lines
                .get(i)
                .is_some_and(|l| l.starts_with("# TYPE ") || l.starts_with("# UNIT "))
            {
                i += 1;
            }
            continue;
        }
        if !line.starts_with('#') && !line.is_empty() {
            push_sample(&mut out, line, extra);
        }
        i += 1;
    }
    out
}

/// The family's name in the Prometheus text format: a counter's samples are `name_total`, and the family is named as they are.
fn family_name(name: &str, kind: &str, first_sample: &str) -> String {
    let total = format!("{name}_total");
    let sample_name = first_sample
        .split(['{', ' '])
        .next()
        .unwrap_or(first_sample);
    if kind == "counter" && sample_name == total {
        total
    } else {
        name.to_owned()
    }
}

/// Writes `sample` with `extra` labels the series does not have already.
fn push_sample(out: &mut String, sample: &str, extra: &ExtraTags) {
    if extra.is_empty() {
        out.push_str(sample);
        out.push('\n');
        return;
    }
    let name_end = sample.find(['{', ' ']).unwrap_or(sample.len());
    let (name, rest) = sample.split_at(name_end);
    let (own, value) = match rest.strip_prefix('{') {
        Some(labels) => {
            let end = label_set_end(labels);
            (&labels[..end], &labels[(end + 1).min(labels.len())..])
        }
        None => ("", rest),
    };
    out.push_str(name);
    out.push('{');
    out.push_str(own);
    let mut first = own.is_empty();
    for (label, text) in extra.pairs() {
        if has_label(own, label) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(label);
        out.push_str("=\"");
        for c in text.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
    out.push_str(value);
    out.push('\n');
}

/// The index of the `}` that closes a label set starting at `labels[0]` (values are quoted, with `\` escapes).
fn label_set_end(labels: &str) -> usize {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return i,
            _ => {}
        }
    }
    labels.len()
}

/// Whether the label set `own` (without braces) has a label named `label`.
fn has_label(own: &str, label: &str) -> bool {
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in own.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '=' if !quoted && own[start..i].trim_start_matches(',') == label => return true,
            ',' if !quoted => start = i,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_typed_and_named_as_their_samples() {
        let om = "# HELP up_counts Upstream's\n# TYPE up_counts counter\nup_counts{domain=\"d\"} 3\n\
                  # HELP own Tollgate's\n# TYPE own counter\nown_total 2\n\
                  # HELP odd Unknown\n# TYPE odd unknown\nodd 1\n\
                  # HELP t_seconds Seconds\n# TYPE t_seconds histogram\n# UNIT t_seconds seconds\nt_seconds_count 1\n# EOF\n";
        let text = prometheus_text(om, &ExtraTags::default());
        assert_eq!(
            text,
            "# HELP up_counts Upstream's\n# TYPE up_counts counter\nup_counts{domain=\"d\"} 3\n\
             # HELP own_total Tollgate's\n# TYPE own_total counter\nown_total 2\n\
             # HELP odd Unknown\n# TYPE odd untyped\nodd 1\n\
             # HELP t_seconds Seconds\n# TYPE t_seconds histogram\nt_seconds_count 1\n"
        );
    }

    #[test]
    fn extra_tags_join_every_sample_after_its_own_labels() {
        let extra = ExtraTags::parse("zone:eu-1,domain:ignored").expect("valid");
        let om = "# HELP a A\n# TYPE a gauge\na 1\na{domain=\"x,y=\\\"}\"} 2\n";
        let text = prometheus_text(om, &extra);
        assert!(
            text.contains("a{zone=\"eu-1\",domain=\"ignored\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("a{domain=\"x,y=\\\"}\",zone=\"eu-1\"} 2\n"),
            "{text}"
        );
    }

    #[test]
    fn extra_tags_refuse_what_is_not_a_label() {
        for bad in [
            "novalue", "1x:v", "__x:v", "a-b:v", "le:1", "a:", "a:1,a:2", "a:x\ny",
        ] {
            assert!(ExtraTags::parse(bad).is_err(), "{bad} was accepted");
        }
        let tags = ExtraTags::parse("k1:v1,k2:a:b").expect("valid");
        assert_eq!(
            tags.pairs(),
            [("k1".into(), "v1".into()), ("k2".into(), "a:b".into())]
        );
    }
}
