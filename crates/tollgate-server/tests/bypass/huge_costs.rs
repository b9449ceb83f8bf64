//! Huge costs and wrapping counters: `hits` of 0, `u32::MAX`, 2^53 ± 1 (past a Lua number's exact integers) and up to `u64::MAX`, once or added up, never wrap a counter back under its limit.

use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest};

use crate::target::{
    DOMAIN, LIMIT, STORES, StoreKind, Target, algorithm_keys, assert_within, request,
};

/// Costs no request for five may pass.
const HUGE: [u64; 8] = [
    LIMIT as u64 + 1,
    u32::MAX as u64,
    u32::MAX as u64 + 1,
    1 << 53,
    (1 << 53) + 1,
    u64::MAX / 2 + 1,
    u64::MAX - 1,
    u64::MAX,
];

async fn huge_costs(store: StoreKind) {
    let target = Target::new("huge-costs", store, "").await;
    for key in algorithm_keys() {
        // Cost 0 checks without spending.
        for _ in 0..3 * LIMIT {
            let status = target.decide(&request(key, "zero", Some(0), false)).await;
            assert_eq!(status[0].code, Code::Ok, "{key}: a check of a fresh key");
        }
        assert_eq!(
            target.admitted(key, "zero", LIMIT + 2).await,
            LIMIT,
            "{key} after checks"
        );
        // No huge cost passes, each twice so that sums would wrap.
        for hits in HUGE.into_iter().chain(HUGE) {
            let status = target
                .decide(&request(key, "huge", Some(hits), false))
                .await;
            assert_eq!(
                status[0].code,
                Code::OverLimit,
                "{key}: {hits} hits on {store:?}"
            );
        }
        let after = target.admitted(key, "huge", LIMIT + 3).await;
        assert_within(&target, after, "huge costs", key);
        // The request-wide `hits_addend` (a u32) too.
        let wide = RateLimitRequest {
            domain: DOMAIN.to_owned(),
            descriptors: vec![Descriptor::new([(key, "wide")])],
            hits_addend: u32::MAX,
        };
        for _ in 0..2 {
            let status = target.decide(&wide).await;
            assert_eq!(
                status[0].code,
                Code::OverLimit,
                "{key}: hits_addend u32::MAX"
            );
        }
        let after = target.admitted(key, "wide", LIMIT + 3).await;
        assert_within(&target, after, "a huge hits_addend", key);
        // A used-up key asked for huge costs stays used up.
        assert_eq!(
            target.admitted(key, "spent", LIMIT + 1).await,
            LIMIT,
            "{key}"
        );
        for hits in HUGE {
            target
                .decide(&request(key, "spent", Some(hits), false))
                .await;
        }
        assert_eq!(
            target.admitted(key, "spent", 3).await,
            0,
            "{key}: wrapped back open"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_costs_never_pass_or_wrap_a_counter() {
    for store in STORES {
        huge_costs(store).await;
    }
}
