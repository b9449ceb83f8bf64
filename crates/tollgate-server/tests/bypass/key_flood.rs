//! Key floods: a key used up, then distinct keys past the store's key bound, of one hit or of more hits than the limit, for every algorithm; the used-up key stays denied throughout and after.

use tollgate_protocol::rls::{Descriptor, RateLimitRequest};

use crate::target::{
    DOMAIN, LIMIT, MAX_KEYS, STORES, StoreKind, Target, algorithm_keys, assert_within,
};

/// Distinct keys per algorithm: four times the bound.
const FLOOD: usize = 4 * MAX_KEYS;
/// Descriptors per flood request.
const BATCH: usize = 64;

/// Floods each algorithm's key with distinct values of `hits` each (0: one hit).
async fn flood(store: StoreKind, hits: u32) {
    let target = Target::new("key-flood", store, "").await;
    for key in algorithm_keys() {
        assert_eq!(
            target.admitted(key, "victim", LIMIT + 2).await,
            LIMIT,
            "{key}"
        );
    }
    let mut victim_admitted = vec![0usize; algorithm_keys().count()];
    for (i, key) in algorithm_keys().enumerate() {
        for start in (0..FLOOD).step_by(BATCH) {
            let request = RateLimitRequest {
                domain: DOMAIN.to_owned(),
                descriptors: (start..start + BATCH)
                    .map(|n| Descriptor::new([(key, format!("flood-{n}"))]))
                    .collect(),
                hits_addend: hits,
            };
            target.decide(&request).await;
            victim_admitted[i] += usize::from(target.admits(key, "victim", None).await);
        }
    }
    for (key, during) in algorithm_keys().zip(victim_admitted) {
        let after = target.admitted(key, "victim", 3).await;
        assert_within(&target, LIMIT + during + after, "key flood", key);
        assert_eq!(
            during + after,
            0,
            "{key} on {store:?} reopened by a flood of {hits} hits"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_keys_never_reopens_a_used_up_key() {
    for store in STORES {
        flood(store, 0).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_keys_costing_the_whole_limit_or_more_never_reopens_a_used_up_key() {
    // Each flood key is used up by its one request as the victim is, or
    // denied, which closes its window as the victim's denial closed it.
    for store in STORES {
        for hits in [LIMIT as u32, LIMIT as u32 + 1] {
            flood(store, hits).await;
        }
    }
}
