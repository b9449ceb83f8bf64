//! What build is running: `tollgate --version` (git hash, profile, features), `serve`'s `/version` and its `tollgate_build_info` gauge agree.

use std::path::Path;
use std::process::Command;

use tollgate_testkit::http::get;
use tollgate_testkit::tollgate::{Server, tollgate};

/// The abbreviated commit of this checkout, or `unknown` when it is not one.
fn checkout_commit() -> String {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new("git")
        .arg("-C")
        .arg(&workspace)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
}

/// The Cargo features this package was built with, as the build script
/// lists them: sorted, joined by commas, `none` when there are none. The
/// binary and these tests share the package's features, so a build with
/// `--no-default-features` expects `none` and the default build
/// `default,mimalloc`.
fn built_features() -> &'static str {
    match (cfg!(feature = "default"), cfg!(feature = "mimalloc")) {
        (true, true) => "default,mimalloc",
        (false, true) => "mimalloc",
        (true, false) => "default",
        (false, false) => "none",
    }
}

#[test]
fn version_names_the_commit_the_profile_and_the_features() {
    let output = tollgate(&["--version"]).output().expect("tollgate runs");
    assert!(output.status.success());
    let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let version = format!(
        "{} (git {}, debug, features: {})",
        env!("CARGO_PKG_VERSION"),
        checkout_commit(),
        built_features()
    );
    assert_eq!(line, format!("tollgate {version}"));
    // Subcommands print the same version.
    let output = tollgate(&["serve", "--version"]).output().expect("runs");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("tollgate-serve {version}")
    );
}

#[test]
fn serve_answers_its_build_on_version_and_in_a_gauge() {
    let server = Server::example_limits(&["--drain-delay", "0s"], &[]);
    let _ = server.address();
    let http = server.http_address();
    let commit = checkout_commit();

    let reply = get(http, "/version", &[]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(
        reply.json(),
        serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "git_hash": commit,
            "profile": "debug",
            "features": built_features(),
        })
    );

    let metrics = get(http, "/metrics", &[]);
    let gauge = format!(
        "tollgate_build_info{{version=\"{}\",git_hash=\"{commit}\",profile=\"debug\",features=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        built_features()
    );
    assert!(
        metrics.body.lines().any(|line| line == gauge),
        "no `{gauge}` in:\n{}",
        metrics.body
    );
}
