//! The config watcher: one quiet-period debounce over the configuration's file events, plus forced reloads (SIGHUP), calling one reload callback.
//!
//! [`ConfigWatcher`] hands the events [`ConfigEvents`] lets through to
//! `notify-debouncer-mini`, which reports them once no event has come for
//! the debounce time ([`DEFAULT_DEBOUNCE`] unless configured). Every relevant
//! event is filed under one key, so the quiet period is the whole
//! configuration's: a file written in many small writes, or several files
//! replaced one after another, is reloaded once, after the last write. There
//! is no maximum wait: a configuration that never stops changing is never
//! whole, so reloading it would only read it half-written; SIGHUP still
//! forces a reload at any time.
//!
//! A [`Trigger::Forced`] (SIGHUP, or a [`ReloadTrigger`]) skips the quiet
//! period. Triggers that arrive while a reload runs are answered by one more
//! reload, forced if any of them was.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::entries::{ConfigEntries, ConfigEvents};
use crate::reload_trigger::{ReloadTrigger, Trigger};
use crate::task::AbortOnDrop;
use notify::RecursiveMode;
use notify_debouncer_mini::{Config, DebounceEventResult, DebouncedEventKind, new_debouncer_opt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How long the configuration must stay quiet (no file event) before it is reloaded, unless configured otherwise.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);

/// The file watch and its debouncer, stopped when dropped.
type Debouncer = Box<dyn Send>;

/// Watches configuration paths and turns their changes and forced triggers into calls of one reload callback.
pub struct ConfigWatcher {
    _debouncer: Option<Debouncer>,
    sender: UnboundedSender<Trigger>,
    receiver: UnboundedReceiver<Trigger>,
}

impl fmt::Debug for ConfigWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigWatcher")
            .field("watching", &self._debouncer.is_some())
            .finish_non_exhaustive()
    }
}

impl ConfigWatcher {
    /// Starts watching `paths` (files or directories) with a quiet period of `debounce`.
    ///
    /// Entries of a watched directory count when `E` says so; a watched
    /// file counts, and so do the `..` entries (a ConfigMap's) beside it.
    /// The watch is in place when this returns, so a change made right
    /// after is not missed.
    pub fn new<E: ConfigEntries>(paths: &[PathBuf], debounce: Duration) -> notify::Result<Self> {
        let (sender, receiver) = unbounded_channel();
        let changes = sender.clone();
        let config = Config::default().with_timeout(debounce);
        let mut debouncer =
            new_debouncer_opt::<_, ConfigEvents<E>>(config, move |result: DebounceEventResult| {
                match result {
                    // `AnyContinuous` means events are still coming: not quiet yet.
                    Ok(events) => {
                        if events.iter().any(|e| e.kind == DebouncedEventKind::Any) {
                            let _ = changes.send(Trigger::FileChange);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "config watch error; reloading to be safe");
                        let _ = changes.send(Trigger::FileChange);
                    }
                }
            })?;
        for path in paths {
            debouncer
                .watcher()
                .watch(path, RecursiveMode::NonRecursive)?;
        }
        Ok(ConfigWatcher {
            _debouncer: Some(Box::new(debouncer)),
            sender,
            receiver,
        })
    }

    /// Watches `paths` like [`new`](Self::new), or, when they cannot be watched, logs why and answers forced triggers only.
    pub fn new_or_forced_only<E: ConfigEntries>(paths: &[PathBuf], debounce: Duration) -> Self {
        ConfigWatcher::new::<E>(paths, debounce).unwrap_or_else(|error| {
            tracing::warn!(?paths, %error, "cannot watch the config; only SIGHUP reloads it");
            ConfigWatcher::forced_only()
        })
    }

    /// A watcher of no files: only forced triggers reload.
    pub fn forced_only() -> Self {
        let (sender, receiver) = unbounded_channel();
        ConfigWatcher {
            _debouncer: None,
            sender,
            receiver,
        }
    }

    /// A handle that forces reloads.
    pub fn trigger(&self) -> ReloadTrigger {
        ReloadTrigger(self.sender.clone())
    }

    /// Calls `reload` (on a blocking thread) after each quiet burst of changes and each forced trigger, until dropped.
    pub async fn run<F>(mut self, reload: F)
    where
        F: Fn(Trigger) + Send + Sync + 'static,
    {
        let reload = Arc::new(reload);
        while let Some(first) = self.receiver.recv().await {
            let mut trigger = first;
            // Whatever queued up meanwhile is answered by this one reload.
            while let Ok(next) = self.receiver.try_recv() {
                if next.is_forced() {
                    trigger = Trigger::Forced;
                }
            }
            let reload = Arc::clone(&reload);
            if let Err(error) = tokio::task::spawn_blocking(move || reload(trigger)).await {
                tracing::error!(%error, "the reload task failed; keeping the running config");
            }
        }
    }

    /// Runs the watcher and forces a reload on each SIGHUP, until the returned guard is dropped.
    ///
    /// The SIGHUP handler is in place when this returns.
    pub fn spawn<F>(self, reload: F) -> AbortOnDrop
    where
        F: Fn(Trigger) + Send + Sync + 'static,
    {
        let hangups = crate::signal::spawn_hangups(self.trigger());
        let watching = tokio::spawn(self.run(reload));
        AbortOnDrop::new(hangups.into_iter().chain([watching]))
    }
}
