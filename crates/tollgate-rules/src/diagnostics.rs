//! Errors and warnings about limits files, each with the file, line and column it is about.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::tree::Position;

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The file is rejected.
    Error,
    /// The file loads, but something in it looks wrong (upstream would accept it too).
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One problem in a limits file: where it is, how serious, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file the problem is in.
    pub file: PathBuf,
    /// Where in the file.
    pub position: Position,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, in one sentence without the location.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    /// Formats as `limits/a.yaml:7:9: error: message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file.display(),
            self.position,
            self.severity,
            self.message
        )
    }
}

/// All errors and warnings found while loading limits files, in the order found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics {
    entries: Vec<Diagnostic>,
}

impl Diagnostics {
    /// An empty collection.
    pub fn new() -> Self {
        Diagnostics::default()
    }

    /// Records an error at `position` in `file`.
    pub fn error(&mut self, file: &Path, position: Position, message: impl Into<String>) {
        self.push(file, position, Severity::Error, message.into());
    }

    /// Records a warning at `position` in `file`.
    pub fn warning(&mut self, file: &Path, position: Position, message: impl Into<String>) {
        self.push(file, position, Severity::Warning, message.into());
    }

    fn push(&mut self, file: &Path, position: Position, severity: Severity, message: String) {
        self.entries.push(Diagnostic {
            file: file.to_path_buf(),
            position,
            severity,
            message,
        });
    }

    /// Every diagnostic, errors and warnings, in the order found.
    pub fn all(&self) -> &[Diagnostic] {
        &self.entries
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.entries
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }

    /// The warnings only.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.entries
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// How many errors there are.
    pub fn error_count(&self) -> usize {
        self.errors().count()
    }

    /// How many warnings there are.
    pub fn warning_count(&self) -> usize {
        self.warnings().count()
    }

    /// Whether any error was found (warnings do not count).
    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }

    /// Whether nothing at all was found.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sorts by file, then position, keeping the order found among equals.
    pub fn sort(&mut self) {
        self.entries
            .sort_by(|a, b| (&a.file, a.position).cmp(&(&b.file, b.position)));
    }
}

impl fmt::Display for Diagnostics {
    /// One diagnostic per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for diagnostic in &self.entries {
            writeln!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}
