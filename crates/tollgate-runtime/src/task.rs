//! A background task that lives as long as its guard: dropping [`AbortOnDrop`] aborts it.

use tokio::task::JoinHandle;

/// Background tasks aborted when this guard is dropped (a watcher, a signal listener).
#[derive(Debug, Default)]
pub struct AbortOnDrop(Vec<JoinHandle<()>>);

impl AbortOnDrop {
    /// Guards `tasks`.
    pub fn new(tasks: impl IntoIterator<Item = JoinHandle<()>>) -> Self {
        AbortOnDrop(tasks.into_iter().collect())
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}
