//! Scratch directories for a test's files (configs, logs), removed when dropped.

use std::fs;
use std::path::{Path, PathBuf};

/// A fresh directory under the system's temporary directory, removed when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// An empty directory named after `name` and this process.
    #[must_use]
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("tollgate-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("the temporary directory is created");
        TempDir(path)
    }

    /// The directory's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to the file `name` in the directory; its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, text).expect("a test file is written");
        path
    }

    /// Writes `limits.yaml` with `yaml`; its path.
    pub fn limits(&self, yaml: &str) -> PathBuf {
        self.write("limits.yaml", yaml)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
