//! Concurrent callers of one key: together they get exactly the limit.

use std::sync::Arc;

use tollgate_rules::AlgorithmKind;
use tollgate_server::EngineOptions;

use super::{Backend, LIMIT, Subject, admissions};

/// Callers at once.
const CALLERS: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_of_one_key_get_the_limit_together() {
    for backend in Backend::all() {
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        let engine = Arc::new(subject.engine);
        for kind in AlgorithmKind::ALL {
            let callers: Vec<_> = (0..CALLERS)
                .map(|_| {
                    let engine = Arc::clone(&engine);
                    tokio::spawn(async move { admissions(&engine, kind, "crowd", 2 * LIMIT).await })
                })
                .collect();
            let mut ok = 0;
            for caller in callers {
                ok += caller.await.expect("a caller finishes");
            }
            assert_eq!(ok, LIMIT, "{kind} on {}", backend.name());
        }
    }
}
