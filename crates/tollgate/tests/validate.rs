//! `tollgate validate` prints every problem with file:line:column, a summary, and exits 0, 1 or 2.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `tollgate validate ARGS…` from the crate directory, so fixture paths print relative.
fn validate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("validate")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the tollgate binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Validates one bad fixture and checks its one diagnostic line, the summary and exit code 1.
fn assert_rejected(fixture: &str, diagnostic: &str, summary: &str) {
    let path = format!("tests/fixtures/limits/bad/{fixture}");
    let output = validate(&[&path]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines().next(),
        Some(format!("{path}:{diagnostic}").as_str()),
        "{err}"
    );
    assert_eq!(stdout(&output).trim_end(), summary);
}

#[test]
fn the_good_fixtures_load_and_hidden_or_foreign_files_are_skipped() {
    let output = validate(&["tests/fixtures/limits/good"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).trim_end(),
        "4 files, 4 domains, 12 rules: OK"
    );
    assert_eq!(stderr(&output), "");
}

#[test]
fn one_file_can_be_validated_alone() {
    let output = validate(&["tests/fixtures/limits/good/messaging.yaml"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stdout(&output).trim_end(), "1 file, 1 domain, 2 rules: OK");
}

#[test]
fn unknown_key() {
    assert_rejected(
        "unknown_key.yaml",
        "6:7: error: unknown key `requests_per_units` in `rate_limit`; did you mean `requests_per_unit`?",
        "1 file, 1 domain, 1 rule: 1 error",
    );
}

#[test]
fn wrong_type() {
    assert_rejected(
        "wrong_type.yaml",
        "4:18: error: `shadow_mode` must be true or false, found a string",
        "1 file, 1 domain, 1 rule: 1 error",
    );
}

#[test]
fn missing_domain() {
    assert_rejected(
        "missing_domain.yaml",
        "1:1: error: missing `domain`: every limits file names its domain",
        "1 file, 0 domains, 0 rules: 1 error",
    );
}

#[test]
fn empty_domain() {
    assert_rejected(
        "empty_domain.yaml",
        "1:9: error: `domain` must not be empty",
        "1 file, 0 domains, 0 rules: 1 error",
    );
}

#[test]
fn duplicate_domain() {
    let output = validate(&["tests/fixtures/limits/bad/duplicate_domain"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output).lines().next(),
        Some(
            "tests/fixtures/limits/bad/duplicate_domain/b.yaml:1:9: error: duplicate domain `shared`: \
             already defined at tests/fixtures/limits/bad/duplicate_domain/a.yaml:1:9; \
             use one file per domain or merge_domains"
        )
    );
    assert_eq!(
        stdout(&output).trim_end(),
        "2 files, 1 domain, 1 rule: 1 error"
    );

    let merged = validate(&[
        "--merge-domains",
        "tests/fixtures/limits/bad/duplicate_domain",
    ]);
    assert_eq!(merged.status.code(), Some(0), "{}", stderr(&merged));
    assert_eq!(stdout(&merged).trim_end(), "2 files, 1 domain, 2 rules: OK");
}

#[test]
fn duplicate_descriptor() {
    assert_rejected(
        "duplicate_descriptor.yaml",
        "8:9: error: duplicate descriptor `dup.tenant_acme.user`: already defined at \
         tests/fixtures/limits/bad/duplicate_descriptor.yaml:6:9",
        "1 file, 1 domain, 1 rule: 1 error",
    );
}

#[test]
fn unit_and_unlimited() {
    assert_rejected(
        "unit_and_unlimited.yaml",
        "6:13: error: `unit` cannot be combined with `unlimited: true`",
        "1 file, 1 domain, 0 rules: 1 error",
    );
}

#[test]
fn replaces_naming_nothing() {
    assert_rejected(
        "replaces_unknown.yaml",
        "8:11: error: `replaces` names `nobody_has_this_name`, but no rate limit in domain `replaces_unknown` has that name",
        "1 file, 1 domain, 1 rule: 1 error",
    );
}

#[test]
fn replaces_itself() {
    assert_rejected(
        "replaces_itself.yaml",
        "9:11: error: rate limit `per_user` replaces itself",
        "1 file, 1 domain, 0 rules: 1 error",
    );
}

#[test]
fn replaces_with_an_empty_name() {
    assert_rejected(
        "replaces_empty_name.yaml",
        "8:11: error: a `replaces` entry has an empty or missing `name`",
        "1 file, 1 domain, 0 rules: 1 error",
    );
}

#[test]
fn float_where_an_integer_is_needed() {
    assert_rejected(
        "float_integer.yaml",
        "6:26: error: `requests_per_unit` must be an integer, found the float 2.5",
        "1 file, 1 domain, 0 rules: 1 error",
    );
}

#[test]
fn negative_requests_per_unit() {
    assert_rejected(
        "negative_requests.yaml",
        "6:26: error: `requests_per_unit` must not be negative, found -10",
        "1 file, 1 domain, 0 rules: 1 error",
    );
}

#[test]
fn invalid_yaml() {
    assert_rejected(
        "invalid_yaml.yaml",
        "3:3: error: invalid YAML: \"-\" is only valid inside a block",
        "1 file, 0 domains, 0 rules: 1 error",
    );
}

#[test]
fn a_misplaced_key_upstream_ignores_is_a_warning_and_exits_0() {
    let output = validate(&["tests/fixtures/limits/bad/misplaced_key.yaml"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stderr(&output).trim_end(),
        "tests/fixtures/limits/bad/misplaced_key.yaml:4:5: warning: `unit` has no effect in a descriptor \
         and is ignored (upstream ignores it too); it belongs in `rate_limit`"
    );
    assert_eq!(
        stdout(&output).trim_end(),
        "1 file, 1 domain, 1 rule: OK, 1 warning"
    );
}

#[test]
fn the_whole_bad_directory_reports_every_file() {
    let output = validate(&["tests/fixtures/limits/bad"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    // Every top-level bad file contributes its one error or warning; the
    // subdirectory is not read.
    assert_eq!(
        err.lines().filter(|l| l.contains(": error: ")).count(),
        12,
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains(": warning: ")).count(),
        1,
        "{err}"
    );
    assert!(
        stdout(&output)
            .trim_end()
            .ends_with(": 12 errors, 1 warning"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_missing_path_is_a_usage_error() {
    let output = validate(&["tests/fixtures/limits/does-not-exist"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("cannot read tests/fixtures/limits/does-not-exist"),
        "{}",
        stderr(&output)
    );
    let no_path = validate(&[]);
    assert_eq!(no_path.status.code(), Some(2));
}

#[cfg(unix)]
#[test]
fn a_kubernetes_style_configmap_directory_loads_through_its_symlinks() {
    use std::fs;
    use std::os::unix::fs::symlink;

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("validate-configmap");
    let _ = fs::remove_dir_all(&dir);
    let version = dir.join("..2026_01_01_00_00_00.1");
    fs::create_dir_all(&version).unwrap();
    fs::write(
        version.join("limits.yaml"),
        "domain: cm\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    symlink("..2026_01_01_00_00_00.1", dir.join("..data")).unwrap();
    symlink("..data/limits.yaml", dir.join("limits.yaml")).unwrap();

    let output = validate(&[dir.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim_end(), "1 file, 1 domain, 1 rule: OK");
}

/// Runs `tollgate validate` on an absolute path with `args` and the variables `env`: exit code, stdout, stderr.
fn validate_with(
    path: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command.arg("validate").arg(path).args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("the tollgate binary runs");
    (output.status.code(), stdout(&output), stderr(&output))
}

#[test]
fn an_empty_directory_fails_unless_empty_configs_are_allowed() {
    let dir = tollgate_testkit::scratch::TempDir::new("validate-empty");
    let (code, out, err) = validate_with(dir.path(), &[], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "{}:1:1: error: no limits file: {} holds no `*.yaml` or `*.yml` file; every request would be unlimited",
            dir.path().display(),
            dir.path().display()
        )),
        "{err}"
    );
    assert_eq!(out.trim_end(), "0 files, 0 domains, 0 rules: 1 error");

    let (code, out, err) = validate_with(dir.path(), &["--allow-empty-config"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim_end(), "0 files, 0 domains, 0 rules: OK");
    let (code, _, err) = validate_with(dir.path(), &[], &[("TOLLGATE_ALLOW_EMPTY_CONFIG", "true")]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_dangling_link_or_a_link_to_a_directory_is_an_error_naming_the_link() {
    let dir = tollgate_testkit::scratch::TempDir::new("validate-links");
    dir.write(
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n",
    );
    std::os::unix::fs::symlink("..data/b.yaml", dir.path().join("b.yaml")).expect("linked");
    std::fs::create_dir(dir.path().join("sub")).expect("created");
    std::os::unix::fs::symlink("sub", dir.path().join("c.yml")).expect("linked");
    let (code, out, err) = validate_with(dir.path(), &[], &[]);
    assert_eq!(code, Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let b = dir.path().join("b.yaml");
    let c = dir.path().join("c.yml");
    assert!(
        lines[0].starts_with(&format!(
            "{}:1:1: error: a dangling symbolic link: its target ..data/b.yaml cannot be read",
            b.display()
        )),
        "{err}"
    );
    assert_eq!(
        lines[1],
        format!(
            "{}:1:1: error: a directory (or a link to one), not a limits file",
            c.display()
        )
    );
    assert_eq!(out.trim_end(), "3 files, 1 domain, 1 rule: 2 errors");
}

#[test]
fn a_file_that_defines_no_rate_limit_fails() {
    let dir = tollgate_testkit::scratch::TempDir::new("validate-no-rule");
    let file = dir.write("limits.yaml", "domain: edge\ndescriptors:\n  - key: path\n");
    let (code, out, err) = validate_with(&file, &[], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "{}:1:1: error: the configuration defines no rate limit (1 file(s) read)",
            file.display()
        )),
        "{err}"
    );
    assert_eq!(out.trim_end(), "1 file, 1 domain, 0 rules: 1 error");
}

#[test]
fn an_empty_rate_limit_fails_at_its_line() {
    let dir = tollgate_testkit::scratch::TempDir::new("validate-empty-rate-limit");
    let file = dir.write(
        "limits.yaml",
        "domain: edge\ndescriptors:\n  - key: path\n    value: /login\n    rate_limit:\n  - key: path\n    value: /keep\n    rate_limit: {unit: day, requests_per_unit: 100}\n",
    );
    let (code, _, err) = validate_with(&file, &[], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "{}:5:15: error: `rate_limit` is empty, so this descriptor would have no limit",
            file.display()
        )),
        "{err}"
    );
}

#[test]
fn a_file_over_the_node_bound_fails_with_a_worded_error_and_the_bound_is_a_setting() {
    let dir = tollgate_testkit::scratch::TempDir::new("validate-nodes");
    let mut text = String::from("domain: edge\ndescriptors:\n");
    for i in 0..200 {
        text.push_str(&format!(
            "  - key: k\n    value: v{i}\n    rate_limit: {{unit: hour, requests_per_unit: 3}}\n"
        ));
    }
    let file = dir.write("limits.yaml", &text);
    let (code, out, err) = validate_with(&file, &[], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim_end(), "1 file, 1 domain, 200 rules: OK");
    let (code, _, err) = validate_with(&file, &["--config-max-nodes", "1000"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(": error: limits file too large: more than 1000 YAML nodes"),
        "{err}"
    );
    assert!(!err.contains("budget"), "{err}");
    let (code, _, err) = validate_with(&file, &[], &[("TOLLGATE_CONFIG_MAX_DEPTH", "3")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(": error: limits file nested too deeply: more than 3 levels"),
        "{err}"
    );
}
