//! [`Overrides`]: sets and deletes overrides, keeps them (memory, a file, or Redis for a fleet) and puts them in service as a reload does.
//!
//! Every change is checked first (the limits file's diagnostics, the size
//! and count bounds), then kept, then put in service: a change that cannot
//! be kept (the file cannot be written, Redis is down) changes nothing. In
//! a fleet the change goes to Redis and comes back through [`Overrides::sync`],
//! which every instance also runs on its poll ([`Overrides::poll`]); an
//! instance that cannot reach Redis keeps the overrides it last applied.
//! Each change is logged (target `tollgate::overrides`) with who made it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::Clock;
use tollgate_redis::DocumentWrite;
use tollgate_rules::{Diagnostics, LoadOptions};
use tollgate_runtime::AbortOnDrop;

use super::fleet::Fleet;
use super::{
    InvalidOverride, Override, OverrideBounds, OverrideKey, OverrideRecord, OverrideSet, file,
};
use crate::reload::LiveEngine;

/// Where the overrides are kept.
#[derive(Debug)]
pub enum Backing {
    /// In this process only: a restart forgets them.
    Memory,
    /// In this file, rewritten on every change (`--overrides-file`).
    File(PathBuf),
    /// In the shared Redis, for every instance.
    Fleet(Fleet),
}

/// Why a change was refused.
#[derive(Debug)]
pub enum ChangeError {
    /// The text is not a valid override (400; 413 when too large).
    Invalid(InvalidOverride),
    /// A new override past `--max-overrides` (409).
    Full {
        /// The bound.
        max: usize,
    },
    /// No override at that path (404).
    NotFound(OverrideKey),
    /// The change could not be kept; nothing changed (503).
    Unkept(String),
}

impl fmt::Display for ChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeError::Invalid(invalid) => invalid.fmt(f),
            ChangeError::Full { max } => write!(
                f,
                "{max} overrides are held, the most --max-overrides allows; delete one first"
            ),
            ChangeError::NotFound(key) => write!(f, "no override at {key}"),
            ChangeError::Unkept(reason) => {
                write!(
                    f,
                    "the change could not be kept, so nothing changed: {reason}"
                )
            }
        }
    }
}

/// What a set did.
#[derive(Debug)]
pub struct SetOutcome {
    /// The override now in service.
    pub set: Arc<Override>,
    /// Whether none was at its path before.
    pub created: bool,
    /// The loader's warnings about it.
    pub warnings: Diagnostics,
}

/// The applied version before anything was read (Redis counts from 0).
const NOTHING_APPLIED: u64 = u64::MAX;

/// The overrides of one instance: checked, kept and put in service.
pub struct Overrides<C: Clock> {
    live: Arc<LiveEngine<C>>,
    bounds: OverrideBounds,
    options: LoadOptions,
    backing: Backing,
    /// Serialises changes, so two never interleave their keep-then-apply.
    changing: tokio::sync::Mutex<()>,
    /// The fleet version last applied ([`NOTHING_APPLIED`] before the first):
    /// a poll that finds it unchanged reads nothing more and swaps nothing,
    /// so the engine (and its leases) is rebuilt only for a change.
    applied_version: AtomicU64,
    /// Whether the last poll of the fleet failed (logged once per outage).
    unreachable: AtomicBool,
}

impl<C: Clock> fmt::Debug for Overrides<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overrides")
            .field("bounds", &self.bounds)
            .field("backing", &self.backing)
            .finish_non_exhaustive()
    }
}

impl<C: Clock + Clone + Send + Sync + 'static> Overrides<C> {
    /// The overrides of `live`, within `bounds`, read as limits files are with `options`, kept in `backing`.
    pub fn new(
        live: Arc<LiveEngine<C>>,
        bounds: OverrideBounds,
        options: LoadOptions,
        backing: Backing,
    ) -> Arc<Self> {
        Arc::new(Overrides {
            live,
            bounds,
            options,
            backing,
            changing: tokio::sync::Mutex::new(()),
            applied_version: AtomicU64::new(NOTHING_APPLIED),
            unreachable: AtomicBool::new(false),
        })
    }

    /// The bounds.
    pub fn bounds(&self) -> OverrideBounds {
        self.bounds
    }

    /// The overrides in service.
    pub fn current(&self) -> Arc<OverrideSet> {
        self.live.overrides()
    }

    /// The engine they are laid over.
    pub fn live(&self) -> &Arc<LiveEngine<C>> {
        &self.live
    }

    /// Where they are kept, in words.
    pub fn backing_name(&self) -> String {
        match &self.backing {
            Backing::Memory => "memory (lost on restart; --overrides-file keeps them)".to_owned(),
            Backing::File(path) => format!("file {}", path.display()),
            Backing::Fleet(_) => "the shared Redis store".to_owned(),
        }
    }

    /// At start with a file: reads it and puts its overrides in service; the problem otherwise.
    pub fn load_file(&self) -> Result<usize, String> {
        let Backing::File(path) = &self.backing else {
            return Ok(0);
        };
        let set = file::read(path, self.bounds, self.options)?;
        let count = set.len();
        self.live.set_overrides(Arc::new(set));
        Ok(count)
    }

    /// Sets the override `record` describes (replacing the one at its path), on behalf of `who`.
    pub async fn set(&self, record: OverrideRecord, who: &str) -> Result<SetOutcome, ChangeError> {
        let (next, warnings) =
            Override::load(record, self.bounds, self.options).map_err(ChangeError::Invalid)?;
        let key = next.key.clone();
        let _changing = self.changing.lock().await;
        let current = self.live.overrides();
        let created = current.get(&key).is_none();
        match &self.backing {
            Backing::Fleet(fleet) => {
                let value = serde_json::to_string(&next.record)
                    .map_err(|error| ChangeError::Unkept(error.to_string()))?;
                match fleet
                    .put(&key.id(), &value, self.bounds.max_overrides)
                    .await
                {
                    Ok(DocumentWrite::Written(_)) => {}
                    Ok(DocumentWrite::Full) => {
                        return Err(ChangeError::Full {
                            max: self.bounds.max_overrides,
                        });
                    }
                    Err(error) => return Err(ChangeError::Unkept(error.to_string())),
                }
                self.sync_locked().await;
            }
            backing => {
                if created && current.len() >= self.bounds.max_overrides {
                    return Err(ChangeError::Full {
                        max: self.bounds.max_overrides,
                    });
                }
                let set = current.with(next.clone());
                if let Backing::File(path) = backing {
                    file::write(path, &set).map_err(|error| {
                        ChangeError::Unkept(format!("cannot write {}: {error}", path.display()))
                    })?;
                }
                self.apply(set).await;
            }
        }
        tracing::info!(
            target: "tollgate::overrides",
            who,
            action = if created { "create" } else { "replace" },
            id = %key,
            body = %next.record.body,
            "override set"
        );
        let set = self
            .live
            .overrides()
            .get(&key)
            .cloned()
            .unwrap_or_else(|| Arc::new(next));
        Ok(SetOutcome {
            set,
            created,
            warnings,
        })
    }

    /// Deletes the override at `key`, on behalf of `who`.
    pub async fn delete(&self, key: &OverrideKey, who: &str) -> Result<(), ChangeError> {
        let _changing = self.changing.lock().await;
        match &self.backing {
            Backing::Fleet(fleet) => {
                let removed = fleet
                    .delete(&key.id())
                    .await
                    .map_err(|error| ChangeError::Unkept(error.to_string()))?;
                self.sync_locked().await;
                if !removed {
                    return Err(ChangeError::NotFound(key.clone()));
                }
            }
            backing => {
                let (set, removed) = self.live.overrides().without(key);
                if !removed {
                    return Err(ChangeError::NotFound(key.clone()));
                }
                if let Backing::File(path) = backing {
                    file::write(path, &set).map_err(|error| {
                        ChangeError::Unkept(format!("cannot write {}: {error}", path.display()))
                    })?;
                }
                self.apply(set).await;
            }
        }
        tracing::info!(target: "tollgate::overrides", who, action = "delete", id = %key, "override deleted");
        Ok(())
    }

    /// In a fleet: reads the overrides from Redis when their version
    /// changed and puts them in service; keeps the last applied ones when
    /// Redis cannot be read or holds one this instance refuses.
    pub async fn sync(&self) {
        let _changing = self.changing.lock().await;
        self.sync_locked().await;
    }

    async fn sync_locked(&self) {
        let Backing::Fleet(fleet) = &self.backing else {
            return;
        };
        let read = async {
            let version = fleet.version().await?;
            if version == self.applied_version.load(Ordering::Relaxed) {
                return Ok(None);
            }
            fleet.read().await.map(Some)
        };
        let (version, documents) = match read.await {
            Ok(Some(read)) => read,
            Ok(None) => {
                self.reachable_again();
                return;
            }
            Err(error) => {
                if !self.unreachable.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        target: "tollgate::overrides",
                        %error,
                        kept = self.live.overrides().len(),
                        "cannot read the overrides from Redis; keeping the last applied ones"
                    );
                }
                return;
            }
        };
        self.reachable_again();
        let mut overrides = Vec::with_capacity(documents.len());
        for (id, value) in documents {
            let loaded = serde_json::from_str::<OverrideRecord>(&value)
                .map_err(|error| error.to_string())
                .and_then(|record| {
                    Override::load(record, self.bounds, self.options).map_err(|e| e.to_string())
                });
            match loaded {
                Ok((o, _)) => overrides.push(o),
                Err(error) => {
                    tracing::error!(
                        target: "tollgate::overrides",
                        id,
                        %error,
                        version,
                        "an override in Redis is refused here; keeping the last applied overrides"
                    );
                    self.applied_version.store(version, Ordering::Relaxed);
                    return;
                }
            }
        }
        let count = overrides.len();
        self.apply(OverrideSet::of(overrides)).await;
        let before = self.applied_version.swap(version, Ordering::Relaxed);
        if before != version {
            tracing::info!(target: "tollgate::overrides", version, overrides = count, "overrides applied from Redis");
        }
    }

    /// Puts `set` in service, on a blocking thread as a reload runs: carrying
    /// in-memory counters into new stores can take a while.
    async fn apply(&self, set: OverrideSet) {
        let live = Arc::clone(&self.live);
        let applied = tokio::task::spawn_blocking(move || live.set_overrides(Arc::new(set))).await;
        if let Err(error) = applied {
            tracing::error!(target: "tollgate::overrides", %error, "applying the overrides failed; the rules in service are unchanged");
        }
    }

    /// Logs the end of an outage, once.
    fn reachable_again(&self) {
        if self.unreachable.swap(false, Ordering::Relaxed) {
            tracing::info!(target: "tollgate::overrides", "the overrides in Redis can be read again");
        }
    }

    /// In a fleet: syncs every `interval` until the guard drops; `None` otherwise.
    pub fn poll(self: &Arc<Self>, interval: Duration) -> Option<AbortOnDrop> {
        if !matches!(self.backing, Backing::Fleet(_)) {
            return None;
        }
        let overrides = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                overrides.sync().await;
            }
        });
        Some(AbortOnDrop::new([task]))
    }
}
