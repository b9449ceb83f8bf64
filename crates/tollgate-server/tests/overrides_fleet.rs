//! A fleet's overrides on a real Redis: a poll that finds their version unchanged swaps nothing, and one that finds a change applies it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{ManualClock, Timestamp};
use tollgate_redis::RedisStore;
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_server::overrides::control::Backing;
use tollgate_server::overrides::fleet::Fleet;
use tollgate_server::overrides::{OverrideBounds, OverrideRecord, Overrides};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions, LiveEngine};
use tollgate_testkit::redis::RedisServer;

#[tokio::test]
async fn a_poll_that_finds_the_version_unchanged_swaps_nothing() {
    let redis = RedisServer::start();
    let rules = load_sources(
        [(
            Path::new("limits.yaml"),
            "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
        )],
        LoadOptions::default(),
    )
    .into_result()
    .expect("loads")
    .0;
    let connect = |url: String| async move {
        let store = RedisStore::connect(&url, Duration::from_secs(2))
            .await
            .expect("redis answers");
        RemoteStore::new(store, RemoteOptions::default())
    };
    let instance = |remote: Arc<RemoteStore>| {
        let engine = Engine::with_remote(
            Arc::new(rules.clone()),
            EngineOptions::default(),
            ManualClock::new(Timestamp::from_secs(1_700_000_000)),
            Arc::clone(&remote),
        );
        let live = Arc::new(LiveEngine::fixed(Arc::new(engine)));
        Overrides::new(
            live,
            OverrideBounds::default(),
            LoadOptions::default(),
            Backing::Fleet(Fleet::new(remote)),
        )
    };
    let a = instance(connect(redis.url()).await);
    let b = instance(connect(redis.url()).await);

    b.sync().await;
    let first = b.live().engine();
    b.sync().await;
    b.sync().await;
    assert!(
        Arc::ptr_eq(&first, &b.live().engine()),
        "nothing changed in Redis, so the engine (and its leases) stays"
    );

    a.set(
        OverrideRecord {
            domain: "api".to_owned(),
            body: "key: tenant\nvalue: acme\nrate_limit: {unit: day, requests_per_unit: 10}\n"
                .to_owned(),
        },
        "test",
    )
    .await
    .expect("set");
    b.sync().await;
    let changed = b.live().engine();
    assert!(!Arc::ptr_eq(&first, &changed), "a change is applied");
    assert_eq!(b.current().len(), 1);
    b.sync().await;
    assert!(
        Arc::ptr_eq(&changed, &b.live().engine()),
        "and applied once"
    );
}
