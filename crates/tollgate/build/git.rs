//! Which git commit a directory's checkout is at, for the build script (and its tests).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the version says when the source is not a git checkout (a tarball, a vendored copy) or git is missing.
pub const UNKNOWN: &str = "unknown";

/// The abbreviated commit of the git checkout whose top is exactly `workspace`, or `None`.
///
/// A source tree without its own `.git` that happens to lie inside another
/// repository (a vendored copy) is not that repository's commit, so the
/// checkout's top must be `workspace` itself.
pub fn commit(workspace: &Path) -> Option<String> {
    let top = git(workspace, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), workspace) {
        return None;
    }
    let hash = git(workspace, &["rev-parse", "--short=12", "HEAD"])?;
    is_commit(&hash).then_some(hash)
}

/// Whether `text` looks like a (possibly abbreviated) commit hash: 7 to 40 hex digits.
pub fn is_commit(text: &str) -> bool {
    (7..=40).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The files whose change means another commit is checked out: `HEAD` and the ref it names (in the checkout's git directories).
pub fn watched_files(workspace: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(dir) = git(workspace, &["rev-parse", "--absolute-git-dir"]) {
        files.push(Path::new(&dir).join("HEAD"));
    }
    if let Some(common) = git(workspace, &["rev-parse", "--git-common-dir"]) {
        let common = workspace.join(common);
        files.push(common.join("packed-refs"));
        if let Some(head_ref) = git(workspace, &["symbolic-ref", "-q", "HEAD"]) {
            files.push(common.join(head_ref));
        }
    }
    files
}

/// `git ARGS` run in `dir`: its trimmed stdout when it succeeds and prints something.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !text.is_empty()).then_some(text)
}
