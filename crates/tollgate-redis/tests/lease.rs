//! The lease script on a real Redis (and a 3-master cluster): grants come out of the budget the exact script decides, returns put back only what is safe, and a give-back never eats into leased units.
//!
//! Limits are per hour, so nothing refills between the calls of a test.

use std::time::Duration;

use tollgate_core::lease::Return;
use tollgate_core::{
    AnyAlgorithm, Decision, FixedWindow, Gcra, LeakyBucket, SlidingWindow, TokenBucket,
};
use tollgate_redis::RedisStore;
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_cluster::RedisCluster;

const HOUR: Duration = Duration::from_secs(3600);

fn counter(key: &[u8], algorithm: AnyAlgorithm, hits: u64, give_back: bool) -> Counter<'_> {
    Counter {
        group: 0,
        key,
        tag: xxhash_rust::xxh3::xxh3_64(key),
        algorithm,
        hits,
        give_back,
        phase_ns: 0,
    }
}

/// One exact decision through `check.lua`.
async fn exact(store: &RedisStore, c: Counter<'_>) -> Decision {
    let mut out = Vec::new();
    store
        .check_batch(&[c], tollgate_core::Timestamp::from_secs(0), &mut out)
        .await
        .expect("Redis answers");
    out[0]
}

/// Waits (at most 31 s) until Redis's clock is more than 30 s before the next hour.
async fn clear_of_an_hour_edge(redis: &RedisServer) {
    let hour = Duration::from_secs(3600);
    tokio::time::sleep(redis.wait_clear_of_window_end(hour, Duration::from_secs(30))).await;
}

async fn leases_share_one_budget_with_the_exact_script(store: &RedisStore) {
    let leased: [AnyAlgorithm; 4] = [
        TokenBucket::new(100, 100, HOUR).unwrap().into(),
        Gcra::new(100, HOUR, 100).unwrap().into(),
        LeakyBucket::policer(100, HOUR, 99).unwrap().into(),
        FixedWindow::new(100, HOUR).unwrap().into(),
    ];
    for (i, algorithm) in leased.into_iter().enumerate() {
        let key = format!("share-{i}");
        let c = counter(key.as_bytes(), algorithm, 1, false);
        // At most a share of what remains: 100 / 4.
        let grant = store.grant_lease(&c, 40, 4).await.expect("granted");
        assert_eq!((grant.units, grant.remaining), (25, 75), "{algorithm:?}");
        assert!(
            grant.lasts > Duration::ZERO && grant.lasts <= HOUR,
            "{algorithm:?}"
        );
        let d = exact(store, c).await;
        assert_eq!(
            d.remaining(),
            74,
            "{algorithm:?}: the exact script sees the lease"
        );
        // A give-back of more than the exact path took never eats into the lease.
        let d = exact(store, counter(key.as_bytes(), algorithm, 50, true)).await;
        assert_eq!(
            d.remaining(),
            75,
            "{algorithm:?}: the 25 leased units stay taken"
        );
        // The unused units of the lease go back.
        let back = store
            .return_lease(
                &c,
                Return {
                    units: 10,
                    token: grant.token,
                },
            )
            .await
            .expect("returned");
        assert_eq!(back, 10, "{algorithm:?}");
        assert_eq!(
            exact(store, counter(key.as_bytes(), algorithm, 0, false))
                .await
                .remaining(),
            85
        );
    }
}

async fn grants_shrink_to_zero_near_exhaustion(store: &RedisStore) {
    let fw: AnyAlgorithm = FixedWindow::new(10, HOUR).unwrap().into();
    let c = counter(b"tail", fw, 1, false);
    assert_eq!(
        exact(store, counter(b"tail", fw, 7, false))
            .await
            .remaining(),
        3
    );
    let grant = store.grant_lease(&c, 100, 4).await.expect("answered");
    assert_eq!(
        grant.units, 0,
        "3 left, divisor 4: the last units stay exact"
    );
    assert_eq!(
        exact(store, counter(b"tail", fw, 0, false))
            .await
            .remaining(),
        3,
        "nothing written"
    );
    // Sliding windows are never leased.
    let sw: AnyAlgorithm = SlidingWindow::new(10, HOUR).unwrap().into();
    let grant = store
        .grant_lease(&counter(b"sliding", sw, 1, false), 5, 1)
        .await
        .expect("answered");
    assert_eq!(grant.units, 0);
    assert_eq!(
        exact(store, counter(b"sliding", sw, 0, false))
            .await
            .remaining(),
        10
    );
}

async fn a_schedule_takes_a_lease_back_only_while_it_is_the_last(store: &RedisStore) {
    let tb: AnyAlgorithm = TokenBucket::new(100, 100, HOUR).unwrap().into();
    let c = counter(b"last", tb, 1, false);
    let first = store.grant_lease(&c, 10, 1).await.expect("granted");
    let second = store.grant_lease(&c, 10, 1).await.expect("granted");
    assert_eq!((first.units, second.units), (10, 10));
    let back = |grant: tollgate_core::lease::Grant| Return {
        units: grant.units,
        token: grant.token,
    };
    assert_eq!(
        store.return_lease(&c, back(first)).await.expect("answered"),
        0,
        "another lease was granted after it: its units run out with time"
    );
    assert_eq!(
        store
            .return_lease(&c, back(second))
            .await
            .expect("answered"),
        10
    );
    assert_eq!(
        exact(store, counter(b"last", tb, 0, false))
            .await
            .remaining(),
        90
    );
    // A window's lease is taken back only in its window, and only once.
    let fw: AnyAlgorithm = FixedWindow::new(100, HOUR).unwrap().into();
    let w = counter(b"window", fw, 1, false);
    let grant = store.grant_lease(&w, 10, 1).await.expect("granted");
    let stale = Return {
        units: 10,
        token: (grant.token.0 - 1, 0),
    };
    assert_eq!(store.return_lease(&w, stale).await.expect("answered"), 0);
    assert_eq!(
        store.return_lease(&w, back(grant)).await.expect("answered"),
        10
    );
    assert_eq!(
        store.return_lease(&w, back(grant)).await.expect("answered"),
        0,
        "nothing leased is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_script_on_one_redis() {
    let redis = RedisServer::start();
    clear_of_an_hour_edge(&redis).await;
    let store = RedisStore::connect(&redis.url(), Duration::from_secs(2))
        .await
        .expect("connected");
    leases_share_one_budget_with_the_exact_script(&store).await;
    grants_shrink_to_zero_near_exhaustion(&store).await;
    a_schedule_takes_a_lease_back_only_while_it_is_the_last(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_script_on_a_cluster() {
    let cluster = RedisCluster::start();
    clear_of_an_hour_edge(&cluster.nodes[0]).await;
    let store = RedisStore::connect(&cluster.url(), Duration::from_secs(2))
        .await
        .expect("connected");
    leases_share_one_budget_with_the_exact_script(&store).await;
    grants_shrink_to_zero_near_exhaustion(&store).await;
    a_schedule_takes_a_lease_back_only_while_it_is_the_last(&store).await;
}
