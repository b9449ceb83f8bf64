//! The lab page in a real headless Chromium: `tests/browser/lab.mjs` (Playwright) against `tollgate lab`.
//!
//! Needs Node.js (`node` on PATH, or `NODE`), Chromium (`CHROMIUM`, else
//! /usr/bin/chromium) and `npm ci --prefix tests/browser`; scripts/test.sh
//! installs all three when missing.

use std::path::PathBuf;
use std::process::Command;

use tollgate_testkit::tollgate::Server;

#[test]
fn the_page_runs_a_comparison_and_shows_the_servers_figures() {
    let repository = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let browser_tests = repository.join("tests/browser");
    assert!(
        browser_tests.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci --prefix tests/browser` (scripts/test.sh does)"
    );
    let server = Server::spawn(&["lab", "--addr", "127.0.0.1:0"]);
    let url = format!("http://{}", server.line_after("tollgate lab: open http://"));
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lab-browser.png");
    let _ = std::fs::remove_file(&screenshot);
    let node = std::env::var("NODE").unwrap_or_else(|_| "node".to_owned());
    let output = Command::new(&node)
        .arg(browser_tests.join("lab.mjs"))
        .arg(&url)
        .arg(&screenshot)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {node} (install Node.js or set NODE): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the browser test failed:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.trim()).expect("lab.mjs prints its findings as JSON");
    assert_eq!(report["ok"], true);
    assert_eq!(report["lanes"], 3);
    assert_eq!(
        report["platformLanes"], 4,
        "the platform view shows every mode"
    );
    let png = std::fs::read(&screenshot).expect("the screenshot is saved");
    assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
    drop(server);
}
