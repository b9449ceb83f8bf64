//! Concurrent callers: many tasks hammer one key of every algorithm at once; together they get the limit, never more.

use std::sync::Arc;

use crate::target::{LIMIT, STORES, StoreKind, Target, algorithm_keys, assert_within};

/// Tasks racing for each key.
const TASKS: usize = 8;
/// Requests each task sends per key.
const REQUESTS: usize = 2 * LIMIT;

async fn race(store: StoreKind) {
    let target = Arc::new(Target::new("concurrency", store, "").await);
    for key in algorithm_keys() {
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let target = Arc::clone(&target);
                tokio::spawn(async move { target.admitted(key, "shared", REQUESTS).await })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.expect("a racing task");
        }
        assert_within(&target, admitted, "concurrent callers", key);
        assert!(
            admitted >= LIMIT,
            "{key} on {store:?}: {admitted} < {LIMIT}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_limit() {
    for store in STORES {
        race(store).await;
    }
}
