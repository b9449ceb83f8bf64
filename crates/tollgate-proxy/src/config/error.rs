//! [`ConfigError`]: a configuration problem with its file, line and column, and field.

use std::fmt;
use std::path::{Path, PathBuf};

use super::path::{ConfigPath, FieldError};

/// A configuration problem: the file, the line and column when known, the field when known, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// Line and column, from 1, when the problem has a place in the file.
    pub position: Option<(u64, u64)>,
    /// The field the problem is about (the root when it is about the file as a whole).
    pub path: ConfigPath,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `file` as a whole.
    pub fn new(file: &Path, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            position: None,
            path: ConfigPath::root(),
            message: message.into(),
        }
    }

    /// An error about one field of `file`.
    pub fn field(file: &Path, error: FieldError) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            position: None,
            path: error.path,
            message: error.message,
        }
    }

    pub(super) fn from_yaml(file: &Path, error: &serde_saphyr::Error) -> Self {
        let position = error
            .location()
            .map(|l| (l.line().max(1), l.column().max(1)));
        let mut message = error.without_snippet().to_string();
        if let Some(at) = message.rfind(" at line ") {
            message.truncate(at);
        }
        ConfigError {
            file: file.to_path_buf(),
            position: Some(position.unwrap_or((1, 1))),
            path: ConfigPath::root(),
            message,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, column)) = self.position {
            write!(f, ":{line}:{column}")?;
        }
        if self.path.is_root() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}
