//! [`with_book`]: the quota book's work runs on a blocking thread, so that neither its lock nor a large report's or tick's work holds up the runtime's workers (RLS calls, `/metrics`).

use std::sync::Arc;

use super::book::QuotaBook;

/// Runs `work` on `book` on tokio's blocking pool and waits for it.
///
/// A report of many buckets, or a tick over every counter in force, holds
/// the book's lock for as long as its work takes; run on a worker, it
/// would stall every task queued there, and every other worker waiting for
/// the lock. A panic in `work` carries on in the caller; a runtime shutting
/// down before `work` starts leaves the caller waiting until it is dropped.
pub async fn with_book<T, F>(book: &Arc<QuotaBook>, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce(&QuotaBook) -> T + Send + 'static,
{
    let book = Arc::clone(book);
    match tokio::task::spawn_blocking(move || work(&book)).await {
        Ok(done) => done,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => std::future::pending().await,
    }
}
