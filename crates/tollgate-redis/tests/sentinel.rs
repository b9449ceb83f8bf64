//! A master found through Sentinel: `redis-sentinel://master@host:port` counts in that master.

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, Timestamp, TokenBucket};
use tollgate_redis::RedisStore;
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_sentinel::Sentinel;

#[tokio::test]
async fn the_master_named_by_sentinel_keeps_the_counters() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start(&master);
    let url = format!("redis-sentinel://mymaster@127.0.0.1:{}", sentinel.port);
    let store = RedisStore::connect(&url, Duration::from_secs(2))
        .await
        .expect("connects through the sentinel");
    let tb: AnyAlgorithm = TokenBucket::new(2, 2, Duration::from_secs(3600))
        .unwrap()
        .into();
    let counter = Counter {
        group: 0,
        key: b"via-sentinel",
        tag: 1,
        algorithm: tb,
        hits: 1,
        give_back: false,
        phase_ns: 0,
    };
    let mut out = Vec::new();
    let now = Timestamp::from_secs(1);
    let mut allowed = 0;
    for _ in 0..3 {
        store.check_batch(&[counter], now, &mut out).await.unwrap();
        allowed += usize::from(out[0].is_allowed());
    }
    assert_eq!(allowed, 2);
    assert_eq!(
        master.cli(&["DBSIZE"]).trim(),
        "1",
        "the counter is in the master"
    );
}
