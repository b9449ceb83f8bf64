//! The build script: records the git commit, build profile and Cargo features for `tollgate --version`, `/version` and `tollgate_build_info`.

use std::path::{Path, PathBuf};

#[path = "build/git.rs"]
mod git;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let workspace = manifest.join("../..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    // The image's build stage has no .git: it passes the commit in TOLLGATE_GIT_HASH.
    println!("cargo:rerun-if-env-changed=TOLLGATE_GIT_HASH");
    let given = std::env::var("TOLLGATE_GIT_HASH")
        .ok()
        .filter(|hash| git::is_commit(hash));
    let hash = given
        .or_else(|| git::commit(&workspace))
        .unwrap_or_else(|| git::UNKNOWN.to_owned());
    println!("cargo:rustc-env=TOLLGATE_GIT_HASH={hash}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/git.rs");
    for file in git::watched_files(&workspace) {
        if Path::new(&file).exists() {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }

    // Cargo names the profile `debug` for dev and test builds, `release` for release and bench.
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| git::UNKNOWN.to_owned());
    println!("cargo:rustc-env=TOLLGATE_BUILD_PROFILE={profile}");
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(name, _)| {
            name.strip_prefix("CARGO_FEATURE_")
                .map(|f| f.to_ascii_lowercase().replace('_', "-"))
        })
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_owned()
    } else {
        features.join(",")
    };
    println!("cargo:rustc-env=TOLLGATE_FEATURES={features}");
}
