//! Large and deeply nested limits files load up to the configured bounds, and past them fail with a worded error naming the bound.

use std::path::Path;

use tollgate_rules::{DEFAULT_MAX_YAML_DEPTH, LoadOptions, Loaded, YamlLimits, load_sources};

/// A file of `rules` rules, one per value of one key.
fn many_rules(rules: usize) -> String {
    let mut text = String::from("domain: d\ndescriptors:\n");
    for i in 0..rules {
        text.push_str(&format!(
            "  - key: k\n    value: v{i}\n    rate_limit: {{unit: hour, requests_per_unit: 3}}\n"
        ));
    }
    text
}

/// A file whose one rule sits under `levels` levels of nested descriptors
/// (YAML depth `2 * levels + 2`, counting the `rate_limit` mapping).
fn nested(levels: usize) -> String {
    let mut text = String::from("domain: d\ndescriptors:\n");
    let mut indent = String::new();
    for level in 0..levels {
        text.push_str(&format!("{indent}  - key: k{level}\n"));
        if level + 1 == levels {
            text.push_str(&format!(
                "{indent}    rate_limit: {{unit: hour, requests_per_unit: 3}}\n"
            ));
        } else {
            text.push_str(&format!("{indent}    descriptors:\n"));
        }
        indent.push_str("    ");
    }
    text
}

fn load(text: &str, options: LoadOptions) -> Loaded {
    load_sources([(Path::new("big.yaml"), text)], options)
}

/// Runs `f` on a thread with tokio's default 2 MiB stack, where reloads run.
fn on_a_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("a thread")
        .join()
        .expect("no stack overflow")
}

#[test]
fn files_past_the_old_250_000_node_budget_load_by_default() {
    // 25 000 rules are about 250 000 YAML nodes, past serde-saphyr's default.
    let loaded = load(&many_rules(25_000), LoadOptions::default());
    assert!(
        !loaded.diagnostics.has_errors(),
        "{}",
        loaded.diagnostics.to_string().lines().next().unwrap_or("")
    );
    assert_eq!(loaded.rule_set.rule_count(), 25_000);
}

#[test]
fn a_file_over_the_node_bound_names_the_bound_and_the_setting() {
    let options = LoadOptions {
        yaml: YamlLimits {
            max_nodes: 1_000,
            ..YamlLimits::default()
        },
        ..LoadOptions::default()
    };
    let text = load(&many_rules(200), options).diagnostics.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].starts_with("big.yaml:")
            && lines[0].contains(
                ": error: limits file too large: more than 1000 YAML nodes \
                 (raise --config-max-nodes / TOLLGATE_CONFIG_MAX_NODES, or split the file)"
            ),
        "{text}"
    );
    assert!(!text.contains("budget"), "{text}");
}

#[test]
fn nesting_up_to_the_depth_bound_loads_on_a_reload_threads_stack_and_deeper_is_worded() {
    let deepest = (DEFAULT_MAX_YAML_DEPTH - 2) / 2;
    assert!(
        deepest >= 63,
        "at least 63 levels of descriptors: {deepest}"
    );
    let loaded = on_a_small_stack(move || load(&nested(deepest), LoadOptions::default()));
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    assert_eq!(loaded.rule_set.rule_count(), 1);

    let text = on_a_small_stack(move || {
        load(&nested(deepest + 1), LoadOptions::default())
            .diagnostics
            .to_string()
    });
    assert!(
        text.contains(&format!(
            ": error: limits file nested too deeply: more than {DEFAULT_MAX_YAML_DEPTH} levels \
             of YAML lists and mappings (raise --config-max-depth / TOLLGATE_CONFIG_MAX_DEPTH)"
        )),
        "{text}"
    );
}
