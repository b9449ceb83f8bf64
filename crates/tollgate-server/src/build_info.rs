//! What build is serving: the version, git commit, build profile and Cargo features, for `/version` and the `tollgate_build_info` gauge.

use serde::Serialize;

/// What the binary was built from; the binary fills it in from its build script.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuildInfo {
    /// The crate version (`0.1.0`).
    pub version: &'static str,
    /// The git commit built, abbreviated, or `unknown` (a build outside a git checkout).
    pub git_hash: &'static str,
    /// Cargo's build profile: `debug` or `release`.
    pub profile: &'static str,
    /// The Cargo features the binary was built with, comma-separated, or `none`.
    pub features: &'static str,
}

impl BuildInfo {
    /// The labels of the `tollgate_build_info` gauge, in order.
    pub fn labels(&self) -> [(&'static str, &'static str); 4] {
        [
            ("version", self.version),
            ("git_hash", self.git_hash),
            ("profile", self.profile),
            ("features", self.features),
        ]
    }
}
