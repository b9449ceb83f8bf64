//! Time budgets: how long a test waits for a child or a condition, measured on a real clock.

use std::time::{Duration, Instant};

/// How long a child may take to print its address or to exit.
pub const BUDGET: Duration = Duration::from_secs(30);

/// How long [`eventually`] pauses between two checks.
pub const POLL_PAUSE: Duration = Duration::from_millis(20);

/// A real-time measurement: a wait's deadline or how long a real process took.
///
/// Tests decide nothing by it except whether they waited too long.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts measuring now.
    #[must_use]
    pub fn start() -> Stopwatch {
        #[expect(
            clippy::disallowed_methods,
            reason = "tests bound their waits on real processes by real time"
        )]
        let now = Instant::now();
        Stopwatch(now)
    }

    /// The time since [`Stopwatch::start`].
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    /// Whether `budget` has passed since [`Stopwatch::start`].
    #[must_use]
    pub fn exceeded(&self, budget: Duration) -> bool {
        self.elapsed() >= budget
    }
}

/// Polls `check` every [`POLL_PAUSE`] until it returns `Some`, for at most `budget`; `None` when time ran out.
pub fn poll_until<T>(budget: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let watch = Stopwatch::start();
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if watch.exceeded(budget) {
            return None;
        }
        std::thread::sleep(POLL_PAUSE);
    }
}

/// [`poll_until`] for a check that awaits (a call to a server on the
/// test's runtime): `check` every [`POLL_PAUSE`], for at most `budget`.
pub async fn poll_until_async<T, F: Future<Output = Option<T>>>(
    budget: Duration,
    mut check: impl FnMut() -> F,
) -> Option<T> {
    let watch = Stopwatch::start();
    loop {
        if let Some(found) = check().await {
            return Some(found);
        }
        if watch.exceeded(budget) {
            return None;
        }
        tokio::time::sleep(POLL_PAUSE).await;
    }
}

/// Polls `check` every [`POLL_PAUSE`] until it holds; panics naming `what` when it does not within `budget`.
pub fn eventually(what: &str, budget: Duration, mut check: impl FnMut() -> bool) {
    if poll_until(budget, || check().then_some(())).is_none() {
        panic!("{what}: not within {budget:?}");
    }
}
