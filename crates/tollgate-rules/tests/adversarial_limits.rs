//! The limits-file fuzzer: the repository's example limits files mutated (lines deleted and duplicated, scalars swapped for lists and maps, deep nesting, huge numbers, unicode, alias bombs) never panic the loader, and each either loads or fails with `file:line:column`.
//!
//! Mutations come from a fixed-seed proptest runner with a fixed number of
//! cases, so a failure names an input that reproduces.

use std::path::Path;

use proptest::prelude::*;
use tollgate_rules::{Diagnostics, LoadOptions, YamlLimits, load_sources};
use tollgate_testkit::fuzz::fixed_seed_runner;

/// Cases per run: modest, for the suite's time budget.
const CASES: u32 = 400;

/// The example limits files the mutations start from.
const SEEDS: [&str; 2] = [
    include_str!("../../../examples/limits/example.yaml"),
    include_str!("../../../examples/envoy/limits/demo.yaml"),
];

/// What one mutation puts in place of a line's value or between lines.
const SPLICES: [&str; 12] = [
    "[1, 2, 3]",
    "{a: 1}",
    "~",
    "99999999999999999999999999999999",
    "-1",
    "1e309",
    "\"\u{202e}ünï\u{0}cødé\"",
    "&a [*a]",
    "*missing",
    "!!binary aGVsbG8=",
    "'unterminated",
    "\t- tab",
];

/// One mutation of one seed, as the text it gives.
fn mutated() -> impl Strategy<Value = String> {
    (
        0..SEEDS.len(),
        0..6usize,
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        0..SPLICES.len(),
    )
        .prop_map(|(seed, kind, at, to, splice)| {
            let mut lines: Vec<String> = SEEDS[seed].lines().map(str::to_owned).collect();
            let i = at.index(lines.len());
            let j = to.index(lines.len());
            match kind {
                0 => {
                    lines.drain(i.min(j)..=i.max(j));
                }
                1 => {
                    let copy = lines[i.min(j)..=i.max(j)].to_vec();
                    lines.splice(i..i, copy);
                }
                2 => {
                    if let Some((key, _)) = lines[i].split_once(':') {
                        lines[i] = format!("{key}: {}", SPLICES[splice]);
                    }
                }
                3 => lines.insert(i, SPLICES[splice].to_owned()),
                4 => {
                    let indent = " ".repeat(j % 9);
                    lines[i] = format!("{indent}{}", lines[i].trim_start());
                }
                _ => lines.swap(i, j),
            }
            lines.join("\n")
        })
}

/// Asserts `text` loads, or fails with every error at a line and column of `fuzz.yaml`.
fn check(text: &str) {
    let loaded = load_sources([(Path::new("fuzz.yaml"), text)], LoadOptions::default());
    check_diagnostics(text, &loaded.diagnostics);
}

/// Asserts every error of `diagnostics` (from loading `text`) names a line and column of `fuzz.yaml` and says what is wrong in words.
fn check_diagnostics(text: &str, diagnostics: &Diagnostics) {
    for diagnostic in diagnostics.errors() {
        let shown = diagnostic.to_string();
        let place = shown
            .strip_prefix("fuzz.yaml:")
            .unwrap_or_else(|| panic!("{shown}\n{text}"));
        let mut parts = place.splitn(3, ':');
        let line: u64 = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
        let column: u64 = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        assert!(
            line >= 1 && column >= 1,
            "no line:column in {shown:?} for\n{text}"
        );
        assert!(
            !diagnostic.message.is_empty(),
            "an empty message for\n{text}"
        );
        assert!(
            !diagnostic.message.contains("budget breached") && !diagnostic.message.contains(" { "),
            "raw debug text: {shown}"
        );
    }
}

#[test]
fn mutated_example_files_load_or_fail_with_file_line_column() {
    for seed in SEEDS {
        let loaded = load_sources([(Path::new("fuzz.yaml"), seed)], LoadOptions::default());
        assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    }
    let mut runner = fixed_seed_runner(CASES);
    runner
        .run(&mutated(), |text| {
            check(&text);
            Ok(())
        })
        .unwrap_or_else(|error| panic!("{error}"));
}

#[test]
fn alias_bombs_deep_nesting_and_huge_numbers_fail_with_file_line_column() {
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..12 {
        let prev = level - 1;
        bomb.push_str(&format!("a{level}: &a{level} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
    }
    bomb.push_str("domain: edge\ndescriptors: *a11\n");
    let deep = format!(
        "domain: edge\ndescriptors: {}{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let deep_maps = format!(
        "domain: edge\ndescriptors:\n{}",
        (0..300)
            .map(|d| format!(
                "{}- key: k{d}\n{}  descriptors:\n",
                "  ".repeat(2 * d),
                "  ".repeat(2 * d)
            ))
            .collect::<String>()
    );
    let huge = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 18446744073709551616}\n";
    for (what, text) in [
        ("alias bomb", bomb.as_str()),
        ("deep flow nesting", deep.as_str()),
        ("deep descriptors", deep_maps.as_str()),
        ("a huge number", huge),
    ] {
        // A smaller node bound (which the alias replay follows) keeps the bomb cheap.
        let options = LoadOptions {
            yaml: YamlLimits {
                max_nodes: 20_000,
                ..YamlLimits::default()
            },
            ..LoadOptions::default()
        };
        let loaded = load_sources([(Path::new("fuzz.yaml"), text)], options);
        assert!(loaded.diagnostics.has_errors(), "{what} loaded");
        check_diagnostics(text, &loaded.diagnostics);
    }
}
