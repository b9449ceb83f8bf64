//! Loading one `rate_limit` block: its fields, its window, and the algorithm built from them.

use std::path::Path;
use std::time::Duration;

use tollgate_core::Unit;
use tollgate_core::duration::parse_duration;

use super::sections::{RATE_LIMIT_SECTION, REPLACES_SECTION};
use super::{Context, Loader, PendingReplace};
use crate::algorithm::AlgorithmKind;
use crate::model::{Limit, WindowLength};
use crate::tree::{Node, NodeValue, Position};

/// What a bad `window` message suggests instead: the forms limits files use most.
const WINDOW_EXAMPLES: &str = "write e.g. `30s`, `5m`, `1h`";

/// What a `rate_limit` block says, with where each field was written.
struct RateLimitFields {
    /// No field was reported as wrong.
    ok: bool,
    unit: Option<(Unit, Position)>,
    requests_per_unit: u32,
    requests_position: Option<Position>,
    unlimited: bool,
    name: Option<String>,
    replaces: Vec<(String, Position)>,
    algorithm_kind: AlgorithmKind,
    burst: Option<(u64, Position)>,
    /// `delay` (leaky bucket only): a shaper that lets this many excess requests pass at once.
    delay: Option<(u64, Position)>,
    multiplier: Option<(u32, Position)>,
    window: Option<(Duration, Position)>,
    /// Where `unit: unknown` was written: no unit, valid only beside `unlimited: true`.
    unknown_unit: Option<Position>,
}

impl RateLimitFields {
    /// A limit with these fields and `window`/`algorithm` (both `None` when unlimited).
    fn into_limit(
        self,
        window: Option<WindowLength>,
        algorithm: Option<tollgate_core::AnyAlgorithm>,
        position: Position,
    ) -> Limit {
        Limit {
            name: self.name,
            replaces: self.replaces.into_iter().map(|(n, _)| n).collect(),
            requests_per_unit: self.requests_per_unit,
            window,
            algorithm_kind: self.algorithm_kind,
            burst: self.burst.map(|(b, _)| b),
            delay: self.delay.map(|(d, _)| d),
            algorithm,
            position,
        }
    }
}

impl Loader {
    /// Loads one `rate_limit` block and builds its algorithm.
    pub(super) fn load_limit(&mut self, context: &Context<'_>, block: &Node) -> Option<Limit> {
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
        let errors_before = self.diagnostics.error_count();
        let mut fields = self.rate_limit_fields(file, entries);
        self.queue_replaces(context, &mut fields);
        if fields.unlimited {
            return self.unlimited_limit(file, block, fields);
        }
        if let Some(position) = fields.unknown_unit {
            self.diagnostics.error(
                file,
                position,
                "invalid rate limit unit 'unknown': `unit: unknown` is only valid beside `unlimited: true`",
            );
            return None;
        }
        let length = self.window_length(file, block, &fields)?;
        if !fields.ok {
            return None;
        }
        self.built_limit(file, block, fields, length, errors_before)
    }

    /// Reads a block's keys, reporting the values of the wrong kind.
    fn rate_limit_fields(&mut self, file: &Path, entries: &[(Node, Node)]) -> RateLimitFields {
        let mut fields = RateLimitFields {
            ok: true,
            unit: None,
            requests_per_unit: 0,
            requests_position: None,
            unlimited: false,
            name: None,
            replaces: Vec::new(),
            algorithm_kind: AlgorithmKind::default(),
            burst: None,
            delay: None,
            multiplier: None,
            window: None,
            unknown_unit: None,
        };
        for (field, node) in self.checked_entries(file, entries, RATE_LIMIT_SECTION) {
            let read = match field {
                // An empty `unit:` (as beside `unlimited`) is no unit.
                "unit" if matches!(node.value, NodeValue::Null) => true,
                // The RLS enum's `UNKNOWN` is no unit too (upstream writes it beside `unlimited`).
                "unit" if is_unknown_unit(&node.value) => {
                    fields.unknown_unit = Some(node.position);
                    true
                }
                "unit" => {
                    let unit_named = |text: &str| {
                        text.parse::<Unit>()
                            .map_err(|e| format!("`unit`: {}", e.replace('"', "`")))
                    };
                    let expected = "a string such as `second`";
                    let unit = self.parsed_text(file, node, field, expected, unit_named);
                    if let Some(u) = unit {
                        fields.unit = Some((u, node.position));
                    }
                    unit.is_some()
                }
                "requests_per_unit" => {
                    fields.requests_position = Some(node.position);
                    let n = self.integer_value(file, node, field, 0, i128::from(u32::MAX));
                    if let Some(n) = n {
                        fields.requests_per_unit = n as u32;
                    }
                    n.is_some()
                }
                "unlimited" => {
                    fields.unlimited = self.bool_value(file, node, field);
                    true
                }
                "name" => {
                    fields.name = self.text_value(file, node, field).filter(|n| !n.is_empty());
                    true
                }
                "replaces" => self.replaced_names(file, node, &mut fields.replaces),
                "algorithm" => {
                    let kind = |text: &str| text.parse::<AlgorithmKind>();
                    let expected = "a string such as `token_bucket`";
                    let parsed = self.parsed_text(file, node, field, expected, kind);
                    fields.algorithm_kind = parsed.unwrap_or(fields.algorithm_kind);
                    parsed.is_some()
                }
                "burst" => {
                    let n = self.integer_value(file, node, field, 0, i128::from(u64::MAX));
                    if let Some(n) = n {
                        fields.burst = Some((n as u64, node.position));
                    }
                    n.is_some()
                }
                "delay" => {
                    let n = self.integer_value(file, node, field, 0, i128::from(u64::MAX));
                    if let Some(n) = n {
                        fields.delay = Some((n as u64, node.position));
                    }
                    n.is_some()
                }
                "unit_multiplier" => {
                    let n = self.integer_value(file, node, field, 1, i128::from(u32::MAX));
                    if let Some(n) = n {
                        fields.multiplier = Some((n as u32, node.position));
                    }
                    n.is_some()
                }
                "window" => {
                    let expected = "a duration such as `5m`";
                    let window = self.parsed_text(file, node, field, expected, parse_window);
                    if let Some(d) = window {
                        fields.window = Some((d, node.position));
                    }
                    window.is_some()
                }
                _ => true,
            };
            fields.ok &= read;
        }
        fields
    }

    /// Adds the names of a `replaces` list to `replaces`; `false` when an entry was wrong.
    fn replaced_names(
        &mut self,
        file: &Path,
        node: &Node,
        replaces: &mut Vec<(String, Position)>,
    ) -> bool {
        let items = match &node.value {
            NodeValue::List(items) => items,
            NodeValue::Null => return true,
            other => {
                self.diagnostics.error(
                    file,
                    node.position,
                    format!(
                        "`replaces` must be a list of `name:` entries, found {}",
                        other.kind_name()
                    ),
                );
                return false;
            }
        };
        let mut ok = true;
        for item in items {
            let NodeValue::Map(entries) = &item.value else {
                self.diagnostics.error(
                    file,
                    item.position,
                    format!(
                        "a `replaces` entry must be a mapping with `name`, found {}",
                        item.value.kind_name()
                    ),
                );
                continue;
            };
            let mut replaced = None;
            for (_, value) in self.checked_entries(file, entries, REPLACES_SECTION) {
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
        ok
    }

    /// Queues the block's `replaces` names to be checked once every limit is
    /// loaded; a limit that replaces itself is an error now.
    fn queue_replaces(&mut self, context: &Context<'_>, fields: &mut RateLimitFields) {
        for (replaced, position) in &fields.replaces {
            if fields.name.as_deref() == Some(replaced.as_str()) {
                self.diagnostics.error(
                    context.file,
                    *position,
                    format!("rate limit `{replaced}` replaces itself"),
                );
                fields.ok = false;
            } else {
                self.replaces.push(PendingReplace {
                    domain: context.domain.to_owned(),
                    file: context.file.to_path_buf(),
                    position: *position,
                    name: replaced.clone(),
                });
            }
        }
    }

    /// An `unlimited: true` limit, or `None` after reporting a window set beside it.
    fn unlimited_limit(
        &mut self,
        file: &Path,
        block: &Node,
        mut fields: RateLimitFields,
    ) -> Option<Limit> {
        if let Some((_, position)) = fields.unit {
            self.diagnostics.error(
                file,
                position,
                "`unit` cannot be combined with `unlimited: true`",
            );
            fields.ok = false;
        }
        if let Some((_, position)) = fields.window {
            self.diagnostics.error(
                file,
                position,
                "`window` cannot be combined with `unlimited: true`",
            );
            fields.ok = false;
        }
        fields
            .ok
            .then(|| fields.into_limit(None, None, block.position))
    }

    /// The window `unit` (times `unit_multiplier`) or `window` sets, or `None`
    /// after reporting both, neither, or a multiplier beside `window`.
    fn window_length(
        &mut self,
        file: &Path,
        block: &Node,
        fields: &RateLimitFields,
    ) -> Option<WindowLength> {
        match (fields.unit, fields.window) {
            (Some((_, unit_position)), Some(_)) => {
                self.diagnostics.error(
                    file,
                    unit_position,
                    "`unit` and `window` cannot both be set; use one",
                );
                None
            }
            (Some((unit, _)), None) => Some(WindowLength::Unit {
                unit,
                multiplier: fields.multiplier.map_or(1, |(m, _)| m),
            }),
            (None, Some((duration, _))) => {
                if let Some((_, position)) = fields.multiplier {
                    self.diagnostics.error(
                        file,
                        position,
                        "`unit_multiplier` needs `unit`, not `window`",
                    );
                    return None;
                }
                Some(WindowLength::Duration(duration))
            }
            (None, None) => {
                if fields.ok {
                    let units: Vec<&str> = Unit::ALL.iter().map(|u| u.name()).collect();
                    self.diagnostics.error(
                        file,
                        block.position,
                        format!(
                            "`rate_limit` needs a `unit` ({}), a `window`, or `unlimited: true`",
                            units.join(", ")
                        ),
                    );
                }
                None
            }
        }
    }

    /// The limit with its algorithm built, or `None` after reporting why it cannot be.
    fn built_limit(
        &mut self,
        file: &Path,
        block: &Node,
        fields: RateLimitFields,
        length: WindowLength,
        errors_before: usize,
    ) -> Option<Limit> {
        let kind = fields.algorithm_kind;
        if let Some((_, position)) = fields.burst.filter(|_| kind.ignores_burst()) {
            self.diagnostics.warning(
                file,
                position,
                format!("`burst` has no effect with `{kind}` and is ignored"),
            );
        }
        if fields.requests_per_unit == 0 && kind != AlgorithmKind::FixedWindow {
            self.diagnostics.error(
                file,
                fields.requests_position.unwrap_or(block.position),
                format!("`{kind}` needs `requests_per_unit` of at least 1 (only `fixed_window` reads 0 as \"always over\")"),
            );
            return None;
        }
        let requests = u64::from(fields.requests_per_unit);
        let burst = fields.burst.map(|(b, _)| b);
        let delay = fields.delay.map(|(d, _)| d);
        match kind.build(requests, length.duration(), burst, delay) {
            Ok(algorithm) => {
                // A misspelt `requests_per_unit` has its own error already.
                if fields.requests_position.is_none()
                    && self.diagnostics.error_count() == errors_before
                {
                    self.diagnostics.warning(
                        file,
                        block.position,
                        "`requests_per_unit` is missing, so it is 0 and every request is over the limit (as upstream); write `requests_per_unit: 0` if that is meant",
                    );
                }
                Some(fields.into_limit(Some(length), Some(algorithm), block.position))
            }
            Err(error) => {
                let position = match error.field {
                    "requests_per_unit" => fields.requests_position,
                    "burst" => fields.burst.map(|(_, p)| p),
                    "delay" => fields.delay.map(|(_, p)| p),
                    _ => fields
                        .unit
                        .map(|(_, p)| p)
                        .or(fields.window.map(|(_, p)| p)),
                };
                self.diagnostics
                    .error(file, position.unwrap_or(block.position), error.message);
                None
            }
        }
    }
}

/// Whether a `unit` value is the RLS enum's `UNKNOWN` (any case), which means no unit.
fn is_unknown_unit(value: &NodeValue) -> bool {
    matches!(value, NodeValue::Text(text) if text.trim().eq_ignore_ascii_case("unknown"))
}

/// Parses `window:`: a duration in Tollgate's one grammar (`90s`, `5m`,
/// `1h 30m`, `0.5s`, a unit name), longer than zero.
fn parse_window(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text).map_err(|e| {
        // The grammar's message ends with its long list of forms; a limits
        // file gets the three it uses most instead.
        let message = e.to_string();
        let reason = message
            .split_once("; ")
            .map_or(message.as_str(), |(r, _)| r);
        format!("`window` {reason}; {WINDOW_EXAMPLES}")
    })?;
    if duration.is_zero() {
        return Err("`window` must be longer than zero".to_owned());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_reads_the_one_duration_grammar_and_must_be_longer_than_zero() {
        assert_eq!(parse_window("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_window(" Minute "), Ok(Duration::from_secs(60)));
        assert_eq!(parse_window("2 hours"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_window("1h 30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(
            parse_window("0s"),
            Err("`window` must be longer than zero".to_owned())
        );
        assert_eq!(
            parse_window("soon"),
            Err(
                "`window` `soon` is not a duration (expected number at 0); write e.g. `30s`, `5m`, `1h`"
                    .to_owned()
            )
        );
    }
}
