//! [`ConfigPath`]: where a value sits in a configuration (`routes[2].priority_shedding.reserved`), and [`FieldError`], a problem with one.
//!
//! Compiling a config walks it with a path, pushing keys and indices as it
//! goes down; a problem found on the way is a [`FieldError`] carrying that
//! path, and becomes a [`ConfigError`](super::ConfigError) once the file is
//! known. The path renders the way the YAML is written: keys joined by `.`,
//! list positions in brackets.

use std::fmt;

/// One step down a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    /// A mapping key (it may itself hold dots, as Envoy's filter names do).
    Key(String),
    /// A position in a list, from 0.
    Index(usize),
}

/// The path of a field in a configuration, from its root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigPath {
    segments: Vec<Segment>,
}

impl ConfigPath {
    /// The root: the configuration as a whole.
    pub fn root() -> Self {
        ConfigPath::default()
    }

    /// This path with `key` appended.
    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut path = self.clone();
        path.push_key(key);
        path
    }

    /// This path with list position `index` appended.
    pub fn index(&self, index: usize) -> Self {
        let mut path = self.clone();
        path.push_index(index);
        path
    }

    /// Appends `key` in place.
    pub fn push_key(&mut self, key: impl Into<String>) {
        self.segments.push(Segment::Key(key.into()));
    }

    /// Appends list position `index` in place.
    pub fn push_index(&mut self, index: usize) {
        self.segments.push(Segment::Index(index));
    }

    /// Whether this is the root (no field named).
    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// A problem with the field at this path.
    pub fn error(&self, message: impl Into<String>) -> FieldError {
        FieldError {
            path: self.clone(),
            message: message.into(),
        }
    }
}

impl From<&str> for ConfigPath {
    /// A path whose root is named by `text` (e.g. `the file`).
    fn from(text: &str) -> Self {
        ConfigPath::root().key(text)
    }
}

impl fmt::Display for ConfigPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => f.write_str(key)?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A value that cannot be used, with the path of its field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field.
    pub path: ConfigPath,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for FieldError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_renders_as_the_yaml_is_written() {
        let path = ConfigPath::root()
            .key("routes")
            .index(2)
            .key("priority_shedding")
            .key("reserved");
        assert_eq!(path.to_string(), "routes[2].priority_shedding.reserved");
        assert_eq!(
            path.error("must be below 1").to_string(),
            "routes[2].priority_shedding.reserved: must be below 1"
        );
        assert_eq!(ConfigPath::root().error("bad").to_string(), "bad");
        assert_eq!(
            ConfigPath::from("the file").key("token_bucket").to_string(),
            "the file.token_bucket"
        );
    }
}
