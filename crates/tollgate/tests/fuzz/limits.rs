//! Limits-file fuzzing: mutated YAML (deleted and duplicated lines, swapped
//! scalars, deep nesting, huge numbers, unicode, alias bombs) through the
//! rules loader never panics and either loads or errs at file:line:column; a
//! bad file reloaded into a running serve keeps its config and its counters.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_testkit::budget::eventually;

use super::{KNOWN_LIMIT, Served};

/// The seeds: the repository's example and the tests' good and bad fixtures.
fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seeds = vec![include_str!("../../../../examples/limits/example.yaml").to_owned()];
    for dir in ["tests/fixtures/limits/good", "tests/fixtures/limits/bad"] {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(dir))
            .expect("a fixtures folder")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        entries.sort();
        seeds.extend(
            entries
                .iter()
                .filter_map(|p| std::fs::read_to_string(p).ok()),
        );
    }
    seeds
}

/// Scalars a mutation swaps in.
const SWAPS: [&str; 10] = [
    "true",
    "-1",
    "99999999999999999999999999",
    "[]",
    "{}",
    "~",
    "\"\u{202e}ü\u{0}\"",
    "1.5e308",
    "*nowhere",
    "!!binary aGk=",
];

/// A YAML alias bomb: each level refers to the previous one ten times.
fn alias_bomb() -> String {
    let mut yaml = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        yaml.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    yaml.push_str("domain: bomb\ndescriptors: []\n");
    yaml
}

/// One mutation of a seed's lines.
fn mutated(seeds: Vec<String>) -> impl Strategy<Value = String> {
    let count = seeds.len();
    (
        0..count,
        any::<prop::sample::Index>(),
        0..6u8,
        0..SWAPS.len(),
    )
        .prop_map(move |(s, at, how, swap)| {
            let mut lines: Vec<String> = seeds[s].lines().map(str::to_owned).collect();
            if lines.is_empty() {
                lines.push(String::new());
            }
            let i = at.index(lines.len());
            match how {
                0 => {
                    lines.remove(i);
                }
                1 => {
                    let line = lines[i].clone();
                    lines.insert(i, line);
                }
                2 => {
                    let line = &lines[i];
                    let head = line.split_once(':').map_or(line.as_str(), |(k, _)| k);
                    lines[i] = format!("{head}: {}", SWAPS[swap]);
                }
                3 => lines.insert(i, format!("{}x", "[".repeat(200 + swap * 100))),
                4 => lines[i] = format!("  {}", lines[i]),
                _ => lines.truncate(i),
            }
            lines.join("\n")
        })
}

/// Loads `yaml`: a rule set, or errors each naming fuzz.yaml:LINE:COLUMN.
fn assert_loads_or_errs_with_a_position(yaml: &str) {
    let loaded = load_sources([(Path::new("fuzz.yaml"), yaml)], LoadOptions::default());
    for diagnostic in loaded.diagnostics.all() {
        let text = diagnostic.to_string();
        let mut parts = text.splitn(4, ':');
        assert_eq!(parts.next(), Some("fuzz.yaml"), "{text}");
        let line = parts.next().and_then(|l| l.parse::<u64>().ok());
        let column = parts.next().and_then(|c| c.parse::<u64>().ok());
        assert!(
            line.is_some() && column.is_some(),
            "no line:column in `{text}`\n{yaml}"
        );
    }
}

#[test]
fn mutated_limits_files_load_or_err_at_a_position() {
    assert_loads_or_errs_with_a_position(&alias_bomb());
    tollgate_testkit::fuzz::fixed_seed_runner(400)
        .run(&mutated(seeds()), |yaml| {
            assert_loads_or_errs_with_a_position(&yaml);
            Ok(())
        })
        .expect("every mutated file loads or errs at a position");
}

/// Failed reloads so far, from `/metrics`.
fn load_errors(http: &str) -> u64 {
    tollgate_testkit::http::exchange(http, "GET", "/metrics", &[], "")
        .body
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit_service_config_load_error "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Bad files reloaded into a running serve: the config and counters stay.
#[test]
fn a_bad_file_on_reload_keeps_the_running_limit_and_its_count() {
    let mut served = Served::start("fuzz-reload");
    assert_eq!(served.known_json(1), [200]);
    let bad = [
        "domain: fuzz\ndescriptors:\n  - key: known\n    rate_limit: {unit: hour, requests_per_unit: -3}\n",
        "",
        &alias_bomb(),
        "domain: fuzz\ndescriptors: [",
    ];
    let pid = served.server.child.id().to_string();
    for (n, text) in bad.iter().enumerate() {
        std::fs::write(&served.config, text).expect("the file is written");
        let status = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        // The file watcher may refuse it too: at least one more refusal.
        let http = served.http.clone();
        eventually("the reload is refused", Duration::from_secs(20), || {
            load_errors(&http) > n as u64
        });
    }
    let _ = &served.dir;
    served.assert_known_limit_holds(KNOWN_LIMIT - 1);
}
