//! Hot reload: a live engine that a new limits configuration replaces all at once, and a watcher that triggers it.
//!
//! [`LiveEngine`] holds the running [`Engine`] behind an [`ArcSwap`]: every
//! call reads it with one atomic load and no lock. [`LiveEngine::reload`]
//! reads the configuration again and either swaps in
//! [`Engine::with_rules`] of the new rules (so every counter whose
//! algorithm and window are unchanged keeps counting) or, when any file
//! has an error, keeps the running engine and returns the diagnostics.
//!
//! [`watch`] reloads it with tollgate-runtime's [`ConfigWatcher`]: writes in
//! place, rename-replace and a Kubernetes ConfigMap's `..data` symlink swap
//! are reloaded once they have gone quiet, and [`LimitsEntries`] says which
//! entries of a limits directory count. A reload whose files hash the same
//! as the running configuration does nothing; SIGHUP always reloads.

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use tollgate_core::Clock;
use tollgate_rules::{Diagnostics, LoadOptions, Loaded, RuleSet, load_path_observed};
use tollgate_runtime::{AbortOnDrop, ConfigEntries, ConfigWatcher, DEFAULT_DEBOUNCE};
use xxhash_rust::xxh3::Xxh3;

use crate::engine::Engine;
use crate::overrides::OverrideSet;

/// A limits configuration read from disk, with the hash of what was read.
#[derive(Debug)]
pub struct ReadConfig {
    /// The rules and diagnostics.
    pub loaded: Loaded,
    /// The xxh3 hash of every file's name and contents, in load order.
    pub hash: u64,
}

/// Reads the limits file or directory at `path` (following symlinks afresh) and hashes what it read.
///
/// Fails only when `path` itself cannot be read; a file that cannot be
/// read or is not UTF-8 becomes an error at its line 1, column 1.
pub fn read_config(path: &Path, options: LoadOptions) -> io::Result<ReadConfig> {
    let mut hasher = Xxh3::new();
    let loaded = load_path_observed(path, options, |file, read| {
        let name = file.to_string_lossy();
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        match read {
            Ok(bytes) => {
                hasher.update(&(bytes.len() as u64).to_le_bytes());
                hasher.update(bytes);
            }
            Err(_) => hasher.update(&u64::MAX.to_le_bytes()),
        }
    })?;
    Ok(ReadConfig {
        loaded,
        hash: hasher.digest(),
    })
}

/// Where a [`LiveEngine`] reloads its rules from.
#[derive(Clone, Debug)]
struct Source {
    path: PathBuf,
    options: LoadOptions,
}

/// What a successful [`LiveEngine::reload`] did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// The new rules are serving.
    Reloaded(ReloadSummary),
    /// The files hash the same as the running configuration, so nothing changed.
    Unchanged,
}

/// The configuration a reload put in service.
#[derive(Debug)]
pub struct ReloadSummary {
    /// How many files were read.
    pub files: usize,
    /// How many domains they define.
    pub domains: usize,
    /// How many rules they define.
    pub rules: usize,
    /// The configuration's hash.
    pub hash: u64,
    /// Warnings found while loading.
    pub warnings: Diagnostics,
}

/// Why a reload kept the running configuration.
#[derive(Debug)]
pub enum ReloadError {
    /// The engine has no configuration path to reload from.
    NoSource,
    /// The configuration path itself could not be read.
    Unreadable {
        /// The path.
        path: PathBuf,
        /// What went wrong.
        error: io::Error,
    },
    /// At least one file has an error; every diagnostic, with file, line and column.
    Invalid(Diagnostics),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::NoSource => f.write_str("no configuration path to reload from"),
            ReloadError::Unreadable { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            ReloadError::Invalid(diagnostics) => {
                write!(
                    f,
                    "the configuration has {} error(s)",
                    diagnostics.error_count()
                )
            }
        }
    }
}

impl std::error::Error for ReloadError {}

/// What the rules in service are made of.
struct Layers {
    /// The rules of the limits files, as last loaded.
    files: Arc<RuleSet>,
    /// The overrides laid over them.
    overrides: Arc<OverrideSet>,
}

/// The engine in service, replaceable while calls are answered; share it in an [`Arc`].
pub struct LiveEngine<C: Clock> {
    current: ArcSwap<Engine<C>>,
    source: Option<Source>,
    /// Serialises reloads so two never race to swap; holds what the rules
    /// in service are made of: the files' rules and the overrides laid over them.
    reloading: parking_lot::Mutex<Layers>,
    /// The overrides in service, read without waiting for a reload that
    /// holds `reloading` while it parses (a scrape of `/metrics` reads them).
    overrides: ArcSwap<OverrideSet>,
    successes: AtomicU64,
    failures: AtomicU64,
    config_hash: AtomicU64,
}

impl<C: Clock> LiveEngine<C> {
    /// A live engine that never reloads: [`reload`](Self::reload) fails with [`ReloadError::NoSource`].
    pub fn fixed(engine: Arc<Engine<C>>) -> Self {
        let files = Arc::clone(engine.rules());
        LiveEngine {
            current: ArcSwap::new(engine),
            source: None,
            reloading: parking_lot::Mutex::new(Layers {
                files,
                overrides: Arc::default(),
            }),
            overrides: ArcSwap::default(),
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            config_hash: AtomicU64::new(0),
        }
    }

    /// A live engine serving `engine`, loaded from `path` with `options` as a configuration hashing to `hash`.
    pub fn new(engine: Arc<Engine<C>>, path: PathBuf, options: LoadOptions, hash: u64) -> Self {
        LiveEngine {
            source: Some(Source { path, options }),
            config_hash: AtomicU64::new(hash),
            ..LiveEngine::fixed(engine)
        }
    }

    /// The engine in service now (one atomic load; hold it only for one call).
    pub fn load(&self) -> arc_swap::Guard<Arc<Engine<C>>> {
        self.current.load()
    }

    /// The engine in service now, as an owned handle.
    pub fn engine(&self) -> Arc<Engine<C>> {
        self.current.load_full()
    }

    /// At shutdown: gives the outstanding quota leases of the engine in
    /// service back to the shared store, and this instance's shares and
    /// starter slot (it leaves the shares fleet), and logs what went back
    /// (nothing to do with counters in memory).
    pub async fn give_back_at_shutdown(&self) {
        let engine = self.engine();
        if let Some(remote) = engine.remote() {
            let units = remote.return_leases(engine.now()).await;
            tracing::info!(units, "outstanding leases returned");
            match remote.leave_shares().await {
                Ok(keys) => tracing::info!(keys, "left the shares fleet: shares given back"),
                Err(error) => tracing::warn!(
                    %error,
                    "could not leave the shares fleet: this instance's shares return to the others when its registration lapses (--shares-ttl)"
                ),
            }
        }
    }

    /// The configuration path, if it reloads from one.
    pub fn path(&self) -> Option<&Path> {
        self.source.as_ref().map(|s| s.path.as_path())
    }

    /// How many reloads put a configuration in service.
    pub fn successes(&self) -> u64 {
        self.successes.load(Ordering::Relaxed)
    }

    /// How many reloads failed and kept the running configuration.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The hash of the configuration in service (see [`read_config`]).
    pub fn config_hash(&self) -> u64 {
        self.config_hash.load(Ordering::Relaxed)
    }

    /// Reads the configuration again and puts it in service if it has no errors.
    ///
    /// Unless `force` is set, a configuration that hashes the same as the
    /// running one is left alone ([`ReloadOutcome::Unchanged`]). On any
    /// error the running engine keeps serving and nothing is swapped.
    pub fn reload(&self, force: bool) -> Result<ReloadOutcome, ReloadError>
    where
        C: Clone,
    {
        let Some(source) = &self.source else {
            return Err(ReloadError::NoSource);
        };
        let mut layers = self.reloading.lock();
        let read = match read_config(&source.path, source.options) {
            Ok(read) => read,
            Err(error) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                return Err(ReloadError::Unreadable {
                    path: source.path.clone(),
                    error,
                });
            }
        };
        if !force && read.hash == self.config_hash() {
            return Ok(ReloadOutcome::Unchanged);
        }
        let files = read.loaded.file_count;
        let (rules, warnings) = match read.loaded.into_result() {
            Ok(ok) => ok,
            Err(diagnostics) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                return Err(ReloadError::Invalid(diagnostics));
            }
        };
        let summary = ReloadSummary {
            files,
            domains: rules.domain_count(),
            rules: rules.rule_count(),
            hash: read.hash,
            warnings,
        };
        self.swap_files(&mut layers, rules, read.hash);
        Ok(ReloadOutcome::Reloaded(summary))
    }

    /// Puts `rules`, read from somewhere other than the configuration path
    /// (an xDS server, see [`crate::xds`]) and hashing to `hash`, in service
    /// as a reload does: the overrides stay laid over them, and counters
    /// whose algorithm and window are unchanged keep counting.
    pub fn put_rules(&self, rules: RuleSet, hash: u64)
    where
        C: Clone,
    {
        let mut layers = self.reloading.lock();
        self.swap_files(&mut layers, rules, hash);
    }

    /// Counts a configuration that was refused and kept the running one
    /// (`config_load_error`), when it came from somewhere other than the
    /// configuration path.
    pub fn count_refused(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes `rules` the files' layer and swaps in an engine of it with the overrides laid over.
    fn swap_files(&self, layers: &mut Layers, rules: RuleSet, hash: u64)
    where
        C: Clone,
    {
        layers.files = Arc::new(rules);
        let next = self
            .current
            .load()
            .with_rules(layers.overrides.apply(&layers.files));
        self.current.store(Arc::new(next));
        self.config_hash.store(hash, Ordering::Relaxed);
        self.successes.fetch_add(1, Ordering::Relaxed);
    }

    /// Lays `overrides` over the files' rules and puts the result in
    /// service as a reload does (counters whose algorithm and window are
    /// unchanged keep counting); later reloads keep laying them over.
    pub fn set_overrides(&self, overrides: Arc<OverrideSet>)
    where
        C: Clone,
    {
        let mut layers = self.reloading.lock();
        let next = self
            .current
            .load()
            .with_rules(overrides.apply(&layers.files));
        self.current.store(Arc::new(next));
        self.overrides.store(Arc::clone(&overrides));
        layers.overrides = overrides;
    }

    /// The overrides in service (never waits for a reload in progress).
    pub fn overrides(&self) -> Arc<OverrideSet> {
        self.overrides.load_full()
    }

    /// Reloads like [`reload`](Self::reload) and logs the outcome; true when new rules went into service.
    ///
    /// Success logs `config reloaded` (info) with the counts and hash; failure
    /// logs every diagnostic as `file:line:col: …` and then `keeping the
    /// running config` (error).
    pub fn reload_and_log(&self, force: bool) -> bool
    where
        C: Clone,
    {
        let config = self
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        match self.reload(force) {
            Ok(ReloadOutcome::Reloaded(summary)) => {
                for warning in summary.warnings.all() {
                    tracing::warn!("{warning}");
                }
                tracing::info!(
                    %config,
                    files = summary.files,
                    domains = summary.domains,
                    rules = summary.rules,
                    hash = %format_args!("{:016x}", summary.hash),
                    forced = force,
                    "config reloaded"
                );
                true
            }
            Ok(ReloadOutcome::Unchanged) => {
                tracing::debug!(%config, "config unchanged, nothing to reload");
                false
            }
            Err(ReloadError::Invalid(diagnostics)) => {
                for diagnostic in diagnostics.all() {
                    tracing::error!("{diagnostic}");
                }
                tracing::error!(
                    %config,
                    errors = diagnostics.error_count(),
                    "the new config has errors; keeping the running config"
                );
                false
            }
            Err(error) => {
                tracing::error!(%config, %error, "cannot reload; keeping the running config");
                false
            }
        }
    }
}

impl<C: Clock> fmt::Debug for LiveEngine<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveEngine")
            .field("engine", &*self.current.load())
            .field("path", &self.path())
            .field("successes", &self.successes())
            .field("failures", &self.failures())
            .field("config_hash", &format_args!("{:016x}", self.config_hash()))
            .finish()
    }
}

/// The entries of a limits directory that can change its configuration: limits files and dot entries.
///
/// Other files in the directory (a log written next to the limits, say) are
/// ignored, so they cannot set off reloads. A single configured file is
/// watched as itself, whatever its name.
#[derive(Clone, Copy, Debug)]
pub struct LimitsEntries;

impl ConfigEntries for LimitsEntries {
    fn concerns(name: &OsStr) -> bool {
        let name = name.to_string_lossy();
        name.starts_with('.') || name.ends_with(".yaml") || name.ends_with(".yml")
    }
}

/// Starts reloading `live` when its configuration path changes (after a quiet period) and, on Unix, on SIGHUP; `None` without a path.
///
/// A change reloads only when the files hash differently; SIGHUP always
/// reloads. A path that cannot be watched is logged and only SIGHUP
/// reloads it. Reloading stops when the returned guard is dropped.
pub fn watch<C>(live: &Arc<LiveEngine<C>>) -> Option<AbortOnDrop>
where
    C: Clock + Clone + Send + Sync + 'static,
{
    let path = live.path()?.to_path_buf();
    let watcher = ConfigWatcher::new_or_forced_only::<LimitsEntries>(&[path], DEFAULT_DEBOUNCE);
    let live = Arc::clone(live);
    Some(watcher.spawn(move |trigger| {
        live.reload_and_log(trigger.is_forced());
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scrape reads the overrides while a reload holds the reloading lock
    /// (parsing a large or hostile file): it answered only once the parse
    /// ended, so `/metrics` timed out behind a slow reload.
    #[test]
    fn the_overrides_are_read_while_a_reload_holds_the_lock() {
        use tollgate_core::{ManualClock, Timestamp};
        let engine = Engine::new(
            Arc::new(RuleSet::default()),
            crate::engine::EngineOptions::default(),
            ManualClock::new(Timestamp::from_secs(60)),
        );
        let live = Arc::new(LiveEngine::fixed(Arc::new(engine)));
        let reloading = live.reloading.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = Arc::clone(&live);
        let scrape = std::thread::spawn(move || {
            let _ = tx.send(reader.overrides().len());
        });
        let read = rx.recv_timeout(std::time::Duration::from_secs(5));
        drop(reloading);
        scrape.join().expect("the reader ends");
        assert_eq!(read, Ok(0), "the overrides waited for the reload's lock");
    }

    /// Whether a change to the directory entry at `path` concerns the limits.
    fn concerns(path: &Path) -> bool {
        LimitsEntries::concerns(path.file_name().expect("a name"))
    }

    /// A configured single file (`limits.conf` here) always counts; that is
    /// the runtime's watcher's rule, tested in tollgate-runtime's `entries`.
    #[test]
    fn only_limits_files_and_dot_entries_concern_the_config() {
        assert!(concerns(Path::new("/c/a.yaml")));
        assert!(concerns(Path::new("/c/b.yml")));
        assert!(concerns(Path::new("/c/..data")));
        assert!(concerns(Path::new("/c/..2026_01_01_00_00_00.1")));
        assert!(!concerns(Path::new("/c/server.log")));
        assert!(!concerns(Path::new("/c/limits.yaml.tmp")));
    }
}
