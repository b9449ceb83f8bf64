//! Refunds of more than was taken: giving back 1000 or `u64::MAX` hits never buys more than what was really taken.

use crate::target::{LIMIT, STORES, StoreKind, Target, algorithm_keys, assert_within, request};

/// Hits given back in one refund: far more than the limit, and the most a request can say.
const REFUNDS: [u64; 3] = [1000, u64::MAX / 2, u64::MAX];

async fn over_refund(store: StoreKind) {
    let target = Target::new("refunds", store, "").await;
    for key in algorithm_keys() {
        // Nothing taken, everything given back: still only the limit.
        for hits in REFUNDS {
            target
                .decide(&request(key, "fresh", Some(hits), true))
                .await;
        }
        let fresh = target.admitted(key, "fresh", LIMIT + 3).await;
        assert_within(&target, fresh, "a refund of nothing taken", key);
        // One taken, far more given back: one more than the limit at most.
        assert!(target.admits(key, "taken", None).await, "{key}");
        for hits in REFUNDS {
            target
                .decide(&request(key, "taken", Some(hits), true))
                .await;
        }
        let taken = target.admitted(key, "taken", LIMIT + 3).await;
        assert_within(&target, taken, "a refund of more than one taken", key);
        // A used-up key refunded wildly still gives back only what it took.
        for hits in REFUNDS {
            target
                .decide(&request(key, "taken", Some(hits), true))
                .await;
        }
        let again = target.admitted(key, "taken", 3 * LIMIT).await;
        assert_within(&target, again, "refunds of a used-up key", key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_of_more_than_was_taken_buy_nothing_more() {
    for store in STORES {
        over_refund(store).await;
    }
}
