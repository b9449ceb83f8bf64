//! Which file events concern a configuration: the filter between `notify` and the debouncer.
//!
//! [`ConfigEvents`] is a [`notify::Watcher`] that watches each directory
//! entry rather than a resolved target: a directory itself, or, for a single
//! file, the directory holding it. So writes in place, rename-replace (an
//! editor, `mv`) and a Kubernetes ConfigMap's `..data` symlink swap are all
//! seen. It drops what cannot change a configuration — reads (a reload's
//! own included), files next to a watched file, entries of a watched
//! directory that [`ConfigEntries`] rejects — and files every remaining event
//! under one key, so the debouncer waits for the whole configuration to go
//! quiet rather than for each file on its own. Each directory is resolved
//! once, when its watch starts, to the canonical path `notify` reports
//! events under, so a relative path (`--config examples/limits`) reloads
//! like an absolute one.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use notify::event::{AccessKind, AccessMode};
use notify::{Config, Event, EventHandler, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use parking_lot::Mutex;

/// Which entries of a watched directory can change the configuration.
///
/// Entries whose name starts with `..` (a ConfigMap's `..data` and its
/// versions) always count, and so does every change to a watched file.
pub trait ConfigEntries: Send + 'static {
    /// Whether a change to the entry named `name` can change the configuration.
    fn concerns(name: &OsStr) -> bool;
}

/// Every entry of a watched directory counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct EveryEntry;

impl ConfigEntries for EveryEntry {
    fn concerns(_name: &OsStr) -> bool {
        true
    }
}

/// The one key every relevant event is filed under, so the debouncer keeps one quiet period.
pub(crate) const CONFIG_KEY: &str = "<config>";

/// What is watched: whole directories, and single files by the directory holding them.
#[derive(Debug, Default)]
pub(crate) struct Roots {
    directories: BTreeSet<PathBuf>,
    /// (the directory watched, the file's name).
    files: BTreeSet<(PathBuf, PathBuf)>,
}

impl Roots {
    /// Adds `path`, returning the directory to watch for it: canonical, so
    /// the events `notify` reports under it match what is kept here.
    fn add(&mut self, path: &Path) -> PathBuf {
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            let directory = canonical(path);
            self.directories.insert(directory.clone());
            return directory;
        }
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => canonical(parent),
            _ => canonical(Path::new(".")),
        };
        let name = path.file_name().map(PathBuf::from).unwrap_or_default();
        self.files.insert((directory.clone(), name));
        directory
    }

    /// Whether a change to `path` can change the configuration.
    pub(crate) fn concerns<E: ConfigEntries>(&self, path: &Path) -> bool {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return true;
        };
        let configmap = name.as_encoded_bytes().starts_with(b"..");
        let in_directory = self.directories.contains(parent);
        if in_directory && (configmap || E::concerns(name)) {
            return true;
        }
        self.files
            .iter()
            .any(|(directory, file)| directory == parent && (configmap || name == file))
    }
}

/// The directory `path`, absolute and with its links resolved, once, when
/// the watch starts.
///
/// `notify` makes a relative path absolute (against the working directory)
/// and reports every event under that absolute path, so a root kept as
/// given (`examples/limits`) would match no event and a relative
/// configuration would never reload. A watched file is kept by its
/// directory and its own name, never resolved: a ConfigMap's file is a link
/// into a versioned directory that the next update replaces. A directory
/// that cannot be resolved (it does not exist) is kept as given, and
/// watching it then fails with its own error.
fn canonical(directory: &Path) -> PathBuf {
    std::fs::canonicalize(directory).unwrap_or_else(|_| directory.to_path_buf())
}

/// Whether `kind` can change a file: anything but a read (a closed write still counts).
fn changes(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// A [`notify::Watcher`] that passes on only the events concerning a configuration, all under one key.
pub(crate) struct ConfigEvents<E: ConfigEntries> {
    inner: RecommendedWatcher,
    roots: Arc<Mutex<Roots>>,
    watched: BTreeSet<PathBuf>,
    entries: PhantomData<fn() -> E>,
}

impl<E: ConfigEntries> Watcher for ConfigEvents<E> {
    fn new<F: EventHandler>(mut handler: F, config: Config) -> notify::Result<Self> {
        let roots = Arc::new(Mutex::new(Roots::default()));
        let seen = Arc::clone(&roots);
        let inner = RecommendedWatcher::new(
            move |event: notify::Result<Event>| {
                let relevant = match &event {
                    Ok(event) if !changes(&event.kind) => false,
                    Ok(event) => {
                        let roots = seen.lock();
                        event.paths.is_empty() || event.paths.iter().any(|p| roots.concerns::<E>(p))
                    }
                    Err(error) => {
                        tracing::warn!(%error, "config watch error; reloading to be safe");
                        true
                    }
                };
                if relevant {
                    tracing::trace!(?event, "config change");
                    handler
                        .handle_event(Ok(Event::new(EventKind::Any).add_path(CONFIG_KEY.into())));
                }
            },
            config,
        )?;
        Ok(ConfigEvents {
            inner,
            roots,
            watched: BTreeSet::new(),
            entries: PhantomData,
        })
    }

    fn watch(&mut self, path: &Path, _recursive_mode: RecursiveMode) -> notify::Result<()> {
        let directory = self.roots.lock().add(path);
        if self.watched.insert(directory.clone()) {
            self.inner.watch(&directory, RecursiveMode::NonRecursive)?;
            tracing::debug!(directory = %directory.display(), "watching the config");
        }
        Ok(())
    }

    fn unwatch(&mut self, path: &Path) -> notify::Result<()> {
        self.inner.unwatch(path)
    }

    fn kind() -> notify::WatcherKind {
        RecommendedWatcher::kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Yaml;

    impl ConfigEntries for Yaml {
        fn concerns(name: &OsStr) -> bool {
            name.to_string_lossy().ends_with(".yaml")
        }
    }

    #[test]
    fn a_watched_file_its_configmap_entries_and_the_entries_of_a_watched_directory_concern_the_config()
     {
        let mut roots = Roots::default();
        roots.files.insert(("/c".into(), "limits.conf".into()));
        roots.directories.insert("/d".into());
        assert!(roots.concerns::<Yaml>(Path::new("/c/limits.conf")));
        assert!(!roots.concerns::<Yaml>(Path::new("/c/other.conf")));
        assert!(roots.concerns::<Yaml>(Path::new("/c/..data")));
        assert!(!roots.concerns::<Yaml>(Path::new("/c/a.yaml")));
        assert!(roots.concerns::<Yaml>(Path::new("/d/a.yaml")));
        assert!(roots.concerns::<Yaml>(Path::new("/d/..2026_01_01_00_00_00.1")));
        assert!(!roots.concerns::<Yaml>(Path::new("/d/server.log")));
        assert!(!roots.concerns::<Yaml>(Path::new("/e/a.yaml")));
        assert!(roots.concerns::<EveryEntry>(Path::new("/d/server.log")));
    }

    /// `notify` reports a relative watch's events under its absolute path.
    #[test]
    fn a_relative_path_is_kept_by_its_canonical_directory() {
        let here = std::env::current_dir().expect("a working directory");
        let mut roots = Roots::default();
        assert_eq!(roots.add(Path::new("src")), canonical(&here.join("src")));
        assert_eq!(roots.add(Path::new("Cargo.toml")), canonical(&here));
        assert!(roots.concerns::<Yaml>(&here.join("src").join("a.yaml")));
        assert!(roots.concerns::<Yaml>(&here.join("Cargo.toml")));
        assert!(!roots.concerns::<Yaml>(&here.join("Cargo.lock")));
    }

    #[test]
    fn reads_change_nothing_but_a_closed_write_does() {
        use notify::event::{CreateKind, ModifyKind};
        assert!(!changes(&EventKind::Access(AccessKind::Open(
            AccessMode::Read
        ))));
        assert!(!changes(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(changes(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(changes(&EventKind::Modify(ModifyKind::Any)));
        assert!(changes(&EventKind::Create(CreateKind::File)));
    }
}
