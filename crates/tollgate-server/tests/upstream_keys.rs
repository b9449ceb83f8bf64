//! `--redis-key-format upstream`: fixed-window rules count in envoyproxy/ratelimit's own Redis keys with its arithmetic, so pods of both share one budget — on a real Redis, beside a second writer doing what upstream's source does.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands as _;
use tollgate_core::{ManualClock, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{LoadOptions, RuleSet, load_sources};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions};
use tollgate_testkit::redis::RedisServer;

/// `CACHE_KEY_PREFIX` in these tests.
const PREFIX: &str = "pfx_";
const LIMIT: u64 = 10;
const HOUR: u64 = 3_600;

/// Ten an hour per user, and a token bucket (which keeps Tollgate's keys) on `api`.
fn rules() -> Arc<RuleSet> {
    let yaml = format!(
        "domain: mig\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: {LIMIT}}}\n  - key: api\n    rate_limit: {{unit: hour, requests_per_unit: {LIMIT}, algorithm: token_bucket}}\n"
    );
    let loaded = load_sources(
        [(Path::new("mig.yaml"), yaml.as_str())],
        LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

fn request(key: &str, value: &str, hits: Option<u64>) -> RateLimitRequest {
    let mut descriptor = Descriptor::new([(key, value)]);
    descriptor.hits_addend = hits;
    RateLimitRequest {
        domain: "mig".to_owned(),
        descriptors: vec![descriptor],
        hits_addend: 0,
    }
}

/// A connection to `redis`, and Redis `TIME` in whole seconds: the clock both writers name windows by.
async fn connect(redis: &RedisServer) -> (redis::aio::MultiplexedConnection, u64) {
    let client = redis::Client::open(redis.url()).expect("URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let (secs, _micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .expect("TIME");
    (connection, secs)
}

/// An engine on `redis` at `now_s`, keys under `prefix`, upstream's keys on or off, up to `jitter_s` on their TTL.
async fn engine_with(
    redis: &RedisServer,
    prefix: &str,
    upstream_keys: bool,
    jitter_s: u64,
    now_s: u64,
) -> Engine<ManualClock> {
    let store = RedisStore::connect(&redis.url(), Duration::from_secs(2))
        .await
        .expect("Redis answers")
        .with_key_prefix(prefix.as_bytes())
        .with_expiration_jitter(jitter_s);
    let options = RemoteOptions {
        upstream_keys,
        ..RemoteOptions::default()
    };
    let remote = RemoteStore::new(store, options);
    let clock = ManualClock::new(Timestamp::from_secs(now_s));
    Engine::with_remote(rules(), EngineOptions::default(), clock, remote)
}

/// An engine on `redis`, keys under [`PREFIX`], upstream's keys on or off, no TTL jitter.
async fn engine(redis: &RedisServer, upstream_keys: bool, now_s: u64) -> Engine<ManualClock> {
    engine_with(redis, PREFIX, upstream_keys, 0, now_s).await
}

/// One request of an envoyproxy/ratelimit pod, as its Redis cache does it:
/// the key `CACHE_KEY_PREFIX + domain_key_value_ + window start`, then in one
/// pipeline `INCRBY key hits` and `EXPIRE key unit + jitter`; over the limit
/// when the count after the increment is above it. Whether it admitted.
async fn upstream_pod_hit(
    connection: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    user: &str,
    now_s: u64,
    jitter_s: u64,
) -> bool {
    let key = format!("{prefix}mig_user_{user}_{}", now_s / HOUR * HOUR);
    let (after, _): (u64, bool) = redis::pipe()
        .cmd("INCRBY")
        .arg(&key)
        .arg(1)
        .cmd("EXPIRE")
        .arg(&key)
        .arg(HOUR + jitter_s)
        .query_async(connection)
        .await
        .expect("pipeline");
    after <= LIMIT
}

/// Both kinds of pod serve one user at once, 3 × the limit each; how many requests the fleet admitted.
async fn fleet_admits(upstream_keys: bool) -> u64 {
    let redis = RedisServer::start();
    let (connection, now_s) = connect(&redis).await;
    let engine = Arc::new(engine(&redis, upstream_keys, now_s).await);
    let ours = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..3 * LIMIT {
                let answer = engine
                    .decide(&request("user", "alice", None))
                    .await
                    .expect("valid");
                admitted += u64::from(answer.overall == Code::Ok);
            }
            admitted
        })
    };
    let theirs = {
        let mut connection = connection.clone();
        tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..3 * LIMIT {
                admitted +=
                    u64::from(upstream_pod_hit(&mut connection, PREFIX, "alice", now_s, 7).await);
            }
            admitted
        })
    };
    ours.await.expect("ours") + theirs.await.expect("theirs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_and_tollgate_pods_share_one_budget_in_upstream_keys() {
    assert_eq!(fleet_admits(true).await, LIMIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_tollgate_keys_the_two_fleets_count_apart_and_admit_twice_the_limit() {
    // The gap the setting closes: each side spends its own budget.
    assert_eq!(fleet_admits(false).await, 2 * LIMIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_ttls_and_hits_are_upstreams() {
    let redis = RedisServer::start();
    let (mut connection, now_s) = connect(&redis).await;
    let engine = engine(&redis, true, now_s).await;
    let key = format!("{PREFIX}mig_user_bob_{}", now_s / HOUR * HOUR);

    let first = engine
        .decide(&request("user", "bob", Some(3)))
        .await
        .expect("valid");
    assert_eq!(first.overall, Code::Ok);
    assert_eq!(first.statuses[0].limit_remaining, 7);
    let keys: Vec<String> = connection.keys("*").await.expect("KEYS");
    assert_eq!(keys, vec![key.clone()], "upstream's key, nothing else");
    let count: String = connection.get(&key).await.expect("GET");
    assert_eq!(count, "3", "a plain integer, INCRBY by the hits");
    let ttl: i64 = connection.ttl(&key).await.expect("TTL");
    assert_eq!(ttl, HOUR as i64, "EXPIRE of the unit (no jitter set)");

    // hits_addend 0 checks without counting, and EXPIRE is sent again, as upstream.
    let _: () = connection.expire(&key, 100).await.expect("EXPIRE");
    let check = engine
        .decide(&request("user", "bob", Some(0)))
        .await
        .expect("valid");
    assert_eq!(check.statuses[0].limit_remaining, 7);
    let count: String = connection.get(&key).await.expect("GET");
    assert_eq!(count, "3");
    let ttl: i64 = connection.ttl(&key).await.expect("TTL");
    assert_eq!(ttl, HOUR as i64);

    // Over when the count after the increment is above the limit, and a
    // denied request still counts, as upstream's does.
    let big = engine
        .decide(&request("user", "bob", Some(8)))
        .await
        .expect("valid");
    assert_eq!(big.overall, Code::OverLimit);
    let count: String = connection.get(&key).await.expect("GET");
    assert_eq!(count, "11");
    // An upstream pod sees the same count: over.
    assert!(!upstream_pod_hit(&mut connection, PREFIX, "bob", now_s, 0).await);

    // A token bucket keeps Tollgate's key.
    let _ = engine
        .decide(&request("api", "x", None))
        .await
        .expect("valid");
    let keys: Vec<Vec<u8>> = connection
        .keys(format!("{PREFIX}tg{{*"))
        .await
        .expect("KEYS");
    assert_eq!(keys.len(), 1, "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_gets_upstreams_jitter_when_set() {
    let redis = RedisServer::start();
    let (mut connection, now_s) = connect(&redis).await;
    // No prefix here: the key is upstream's with an empty CACHE_KEY_PREFIX.
    let engine = engine_with(&redis, "", true, 300, now_s).await;
    let mut ttls = Vec::new();
    // Bounded: 20 users, one key each.
    for i in 0..20 {
        let user = format!("u{i}");
        let _ = engine
            .decide(&request("user", &user, None))
            .await
            .expect("valid");
        let key = format!("mig_user_{user}_{}", now_s / HOUR * HOUR);
        let ttl: i64 = connection.ttl(&key).await.expect("TTL");
        ttls.push(ttl);
    }
    assert!(
        ttls.iter()
            .all(|t| (HOUR as i64..HOUR as i64 + 300).contains(t)),
        "{ttls:?}"
    );
    let mut distinct = ttls.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() > 1, "spread by the jitter: {ttls:?}");
}

/// On a cluster, a request's upstream keys go to their own slots (one call
/// per slot, as upstream's cluster mode does one pipeline per key), and an
/// upstream pod writing one of them still shares its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_each_upstream_key_counts_in_its_slot_with_the_upstream_pod() {
    let cluster = tollgate_testkit::redis_cluster::RedisCluster::start();
    let (_, now_s) = connect(&cluster.nodes[0]).await;
    let nodes: Vec<String> = cluster.nodes.iter().map(RedisServer::url).collect();
    let client = redis::cluster::ClusterClient::new(nodes).expect("cluster URLs");
    let connection = client.get_async_connection().await.expect("cluster");
    let store = RedisStore::connect(&cluster.url(), Duration::from_secs(2))
        .await
        .expect("the cluster answers")
        .with_expiration_jitter(0);
    let options = RemoteOptions {
        upstream_keys: true,
        ..RemoteOptions::default()
    };
    let clock = ManualClock::new(Timestamp::from_secs(now_s));
    let engine = Arc::new(Engine::with_remote(
        rules(),
        EngineOptions::default(),
        clock,
        RemoteStore::new(store, options),
    ));
    let both = RateLimitRequest {
        domain: "mig".to_owned(),
        descriptors: vec![
            Descriptor::new([("user", "alice")]),
            Descriptor::new([("user", "carol")]),
        ],
        hits_addend: 0,
    };
    let ours = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            let (mut alice, mut carol) = (0, 0);
            for _ in 0..3 * LIMIT {
                let answer = engine.decide(&both).await.expect("valid");
                alice += u64::from(answer.statuses[0].code == Code::Ok);
                carol += u64::from(answer.statuses[1].code == Code::Ok);
            }
            (alice, carol)
        })
    };
    let theirs = {
        let mut connection = connection.clone();
        tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..3 * LIMIT {
                let hit = upstream_pod_hit(&mut connection, "", "alice", now_s, 0).await;
                admitted += u64::from(hit);
            }
            admitted
        })
    };
    let (alice, carol) = ours.await.expect("ours");
    let upstream = theirs.await.expect("theirs");
    assert_eq!(alice + upstream, LIMIT, "alice's one budget");
    assert_eq!(carol, LIMIT, "carol's, in another key");
    let mut connection = connection;
    let carol_count: u64 = connection
        .get(format!("mig_user_carol_{}", now_s / HOUR * HOUR))
        .await
        .expect("GET");
    // Counted in upstream's key past the limit (denied requests count),
    // until the quick-deny cache answers a request whose keys are all
    // closed without a call, as upstream's local cache does.
    assert!(
        (LIMIT + 1..=3 * LIMIT).contains(&carol_count),
        "{carol_count}"
    );
}

/// A cost no window can hold (up to `u64::MAX`) is denied, and closes the
/// window in upstream's key, rather than failing the call (which the rule's
/// `on_store_error`, `allow` by default, would answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_cost_is_denied_and_closes_the_window() {
    let redis = RedisServer::start();
    let (mut connection, now_s) = connect(&redis).await;
    let engine = engine(&redis, true, now_s).await;
    let key = format!("{PREFIX}mig_user_eve_{}", now_s / HOUR * HOUR);
    for hits in [u64::MAX, 1 << 60, LIMIT + 1] {
        let answer = engine
            .decide(&request("user", "eve", Some(hits)))
            .await
            .expect("valid");
        assert_eq!(answer.overall, Code::OverLimit, "{hits}");
    }
    let after = engine
        .decide(&request("user", "eve", None))
        .await
        .expect("valid");
    assert_eq!(after.overall, Code::OverLimit, "the window is closed");
    let count: u64 = connection.get(&key).await.expect("GET");
    assert!(count > LIMIT, "{count}");
}
