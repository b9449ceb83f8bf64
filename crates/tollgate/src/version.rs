//! What this build is: the version line of `tollgate --version` and the [`BuildInfo`] that `serve` reports on `/version` and `tollgate_build_info`.
//!
//! The build script records the git commit (`unknown` outside a git
//! checkout, such as a source tarball), Cargo's profile and the enabled
//! features.

use tollgate_server::BuildInfo;

/// The version line: `0.1.0 (git 0123456789ab, release, features: default,mimalloc)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("TOLLGATE_GIT_HASH"),
    ", ",
    env!("TOLLGATE_BUILD_PROFILE"),
    ", features: ",
    env!("TOLLGATE_FEATURES"),
    ")"
);

/// This build, as `serve` reports it.
pub fn build_info() -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        git_hash: env!("TOLLGATE_GIT_HASH"),
        profile: env!("TOLLGATE_BUILD_PROFILE"),
        features: env!("TOLLGATE_FEATURES"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use tollgate_testkit::scratch::TempDir;

    use super::*;
    use crate::build_git::{UNKNOWN, commit, is_commit, watched_files};

    #[test]
    fn a_tree_without_git_is_unknown_and_a_copy_inside_another_repository_too() {
        let dir = TempDir::new("version-no-git");
        assert_eq!(commit(dir.path()), None);
        assert_eq!(watched_files(dir.path()), Vec::<std::path::PathBuf>::new());
        let fallback = commit(dir.path()).unwrap_or_else(|| UNKNOWN.to_owned());
        // What the image's build passes in TOLLGATE_GIT_HASH is taken only when it is a commit.
        assert!(is_commit("0123456789ab") && is_commit(&"f".repeat(40)));
        assert!(!is_commit("unknown") && !is_commit("abc") && !is_commit("0123456789abx"));
        assert_eq!(fallback, "unknown");

        // A vendored copy: a plain directory inside someone else's checkout.
        let init = Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .status();
        if init.is_ok_and(|status| status.success()) {
            let vendored = dir.path().join("vendor/tollgate");
            std::fs::create_dir_all(&vendored).expect("created");
            assert_eq!(commit(&vendored), None);
        }
    }

    #[test]
    fn this_build_names_the_checkouts_commit_profile_and_features() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let expected = commit(&workspace).unwrap_or_else(|| UNKNOWN.to_owned());
        if expected != UNKNOWN {
            // A new commit or a checkout of another branch rebuilds the version.
            let watched = watched_files(&workspace);
            assert!(
                watched.iter().any(|f| f.ends_with("HEAD") && f.is_file()),
                "{watched:?}"
            );
        }
        let info = build_info();
        assert_eq!(info.git_hash, expected);
        assert!(
            info.git_hash == UNKNOWN
                || (info.git_hash.len() == 12
                    && info.git_hash.bytes().all(|b| b.is_ascii_hexdigit())),
            "{info:?}"
        );
        assert_eq!(info.profile, "debug", "tests build the dev profile");
        assert_eq!(
            VERSION,
            format!(
                "{} (git {}, debug, features: {})",
                info.version, info.git_hash, info.features
            )
        );
    }
}
