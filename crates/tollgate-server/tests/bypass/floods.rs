//! A flood of distinct keys past a small key bound never frees a used-up key.

use tollgate_rules::AlgorithmKind;
use tollgate_server::EngineOptions;
use tollgate_store::StoreConfig;

use super::{Backend, LIMIT, Subject, admissions};

/// The key bound of each in-memory store.
const MAX_KEYS: usize = 64;

/// Distinct keys in a flood: many times the bound in memory, a few hundred on Redis.
fn flood_size(backend: &Backend) -> usize {
    match backend {
        Backend::Memory => 40 * MAX_KEYS,
        Backend::Redis(_) => 200,
    }
}

#[tokio::test]
async fn a_used_up_key_stays_denied_through_a_flood_of_distinct_keys() {
    let options = EngineOptions {
        store_config: StoreConfig::with_max_keys(MAX_KEYS),
        ..EngineOptions::default()
    };
    for backend in Backend::all() {
        let subject = Subject::start(&backend, options).await;
        let engine = &subject.engine;
        for kind in AlgorithmKind::ALL {
            let at = format!("{kind} on {}", backend.name());
            assert_eq!(
                admissions(engine, kind, "victim", 2 * LIMIT).await,
                LIMIT,
                "{at}"
            );
            let mut after = 0;
            for n in 0..flood_size(&backend) {
                // Each flood key is spent to a different depth below its
                // limit (flood keys spent to the limit may evict a spent key:
                // the documented exception of docs/operations.md).
                let depth = 1 + (n as u64 % (LIMIT - 1));
                admissions(engine, kind, &format!("flood-{n}"), depth).await;
                if n % 16 == 0 {
                    after += admissions(engine, kind, "victim", 1).await;
                }
            }
            after += admissions(engine, kind, "victim", 2 * LIMIT).await;
            assert_eq!(
                after, 0,
                "{at}: the victim was admitted {after} times during the flood"
            );
        }
        if let Backend::Memory = backend {
            // The bound held: every store kept at most its keys (a store may round up per shard).
            let usage = subject.engine.memory_usage().stores;
            assert!(
                usage.keys <= usage.stores * 2 * MAX_KEYS,
                "{} keys in {} stores",
                usage.keys,
                usage.stores
            );
        }
    }
}
