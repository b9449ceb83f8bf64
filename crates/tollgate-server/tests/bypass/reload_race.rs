//! Reload races: the limits file is rewritten and reloaded over and over while clients hammer every algorithm's key; no reload resets a counter or admits past the limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::target::{LIMIT, STORES, StoreKind, Target, algorithm_keys, assert_within, limits_yaml};

/// Reloads the rewriter does.
const RELOADS: usize = 60;
/// Requests each hammering task sends at most, per key.
const REQUESTS_PER_TASK: usize = 40;
/// Hammering tasks.
const TASKS: usize = 4;

/// What the file is rewritten to, in turn: the same rules with a comment, an
/// unrelated rule added, a broken file (kept out), and the original again.
fn versions() -> [String; 4] {
    [
        format!("# rewritten\n{}", limits_yaml("")),
        limits_yaml("  - key: unrelated\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
        format!("{}  - key: [broken\n", limits_yaml("")),
        limits_yaml(""),
    ]
}

async fn hammer_while_reloading(store: StoreKind) {
    let target = Arc::new(Target::new("reload-race", store, "").await);
    let done = Arc::new(AtomicBool::new(false));
    let rewriter = {
        let target = Arc::clone(&target);
        let done = Arc::clone(&done);
        tokio::task::spawn_blocking(move || {
            let versions = versions();
            let staged = target.file().with_extension("staged");
            for i in 0..RELOADS {
                // Rename-replace, so each reload reads one whole version.
                std::fs::write(&staged, &versions[i % versions.len()]).expect("written");
                std::fs::rename(&staged, target.file()).expect("renamed");
                let _ = target.live.reload(i % 2 == 0);
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let target = Arc::clone(&target);
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let mut admitted = vec![0usize; algorithm_keys().count()];
            for _ in 0..REQUESTS_PER_TASK {
                for (i, key) in algorithm_keys().enumerate() {
                    admitted[i] += usize::from(target.admits(key, "victim", None).await);
                }
                if done.load(Ordering::SeqCst) {
                    break;
                }
            }
            admitted
        }));
    }
    rewriter.await.expect("the rewriter finishes");
    let mut totals = vec![0usize; algorithm_keys().count()];
    for task in tasks {
        for (total, n) in totals.iter_mut().zip(task.await.expect("a hammering task")) {
            *total += n;
        }
    }
    assert!(
        target.live.successes() > 0,
        "some reloads went into service"
    );
    assert!(
        target.live.failures() > 0,
        "the broken version was kept out"
    );
    for (key, admitted) in algorithm_keys().zip(totals) {
        assert_within(&target, admitted, "reload race", key);
        // The count survived every reload: nothing more now.
        assert_eq!(
            target.admitted(key, "victim", 2).await,
            0,
            "{key} on {store:?} after the reloads"
        );
        assert!(
            admitted >= LIMIT,
            "{key} on {store:?} admitted {admitted} < {LIMIT}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_while_hammering_never_reset_a_counter() {
    for store in STORES {
        hammer_while_reloading(store).await;
    }
}
