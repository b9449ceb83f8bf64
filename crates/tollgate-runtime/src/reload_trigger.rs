//! Why a reload runs (files changed, or forced), and the handle that forces one from a signal handler or a test.

use tokio::sync::mpsc::UnboundedSender;

/// Why the watcher calls the reload callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The watched files changed and then went quiet; a caller may skip a reload when the files read the same.
    FileChange,
    /// A forced reload (SIGHUP or [`ReloadTrigger::force`]): reload even if the files look the same.
    Forced,
}

impl Trigger {
    /// Whether this reload was forced.
    pub fn is_forced(self) -> bool {
        self == Trigger::Forced
    }
}

/// A handle that forces reloads, for instance from a signal handler or a test.
#[derive(Clone, Debug)]
pub struct ReloadTrigger(pub(crate) UnboundedSender<Trigger>);

impl ReloadTrigger {
    /// Asks for a forced reload now; false once the watcher has stopped.
    pub fn force(&self) -> bool {
        self.0.send(Trigger::Forced).is_ok()
    }
}
