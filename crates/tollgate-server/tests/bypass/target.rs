//! The engines the tricks run against, one per store, and the admission counter they are judged by.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Clock, CoarseClock, ManualClock, NANOS_PER_SEC, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, DescriptorStatus, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{AlgorithmKind, LoadOptions};
use tollgate_server::reload::read_config;
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions, LiveEngine};
use tollgate_store::StoreConfig;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::window::{DAY, DAY_MARGIN};

/// Every rule's limit: five per day.
pub const LIMIT: usize = 5;

/// The domain of every rule.
pub const DOMAIN: &str = "bypass";

/// A day boundary: a whole number of days since the epoch.
const DAY_START: u64 = 1_699_920_000;

/// Keys each in-memory rule store holds (small, so a flood passes it quickly).
pub const MAX_KEYS: usize = 512;

/// The limits file: five per day under each algorithm, keyed by its name,
/// and `extra` rules after them.
pub fn limits_yaml(extra: &str) -> String {
    let mut yaml = format!("domain: {DOMAIN}\ndescriptors:\n");
    for kind in AlgorithmKind::ALL {
        // A leaky bucket admits `burst + 1` at once.
        let burst = if kind == AlgorithmKind::LeakyBucket {
            ", burst: 4"
        } else {
            ""
        };
        yaml.push_str(&format!(
            "  - key: {kind}\n    rate_limit: {{unit: day, requests_per_unit: {LIMIT}, algorithm: {kind}{burst}}}\n"
        ));
    }
    yaml.push_str(extra);
    yaml
}

/// The keys limited to five per day, one per algorithm.
pub fn algorithm_keys() -> impl Iterator<Item = &'static str> {
    AlgorithmKind::ALL.into_iter().map(AlgorithmKind::name)
}

/// Where the counters live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// In this process.
    Memory,
    /// In a real `redis-server`.
    Redis,
}

/// Both stores, for tests that run on each.
pub const STORES: [StoreKind; 2] = [StoreKind::Memory, StoreKind::Redis];

/// A live engine on a limits file, the wall its clock follows, and the Redis behind it (if any).
pub struct Target {
    /// The engine in service.
    pub live: Arc<LiveEngine<CoarseClock>>,
    /// The clock decisions run on.
    pub clock: CoarseClock,
    /// The wall the clock follows, stepped by hand (memory only: Redis decides on `TIME`).
    pub wall: ManualClock,
    /// The limits file.
    pub file: PathBuf,
    /// The Redis server, when counters live there.
    pub redis: Option<RedisServer>,
    /// Redis `TIME` in seconds when the target was built.
    started_day: u64,
    _dir: TempDir,
}

impl Target {
    /// An engine on [`limits_yaml`] with `extra` rules, counters in `store`.
    pub async fn new(name: &str, store: StoreKind, extra: &str) -> Target {
        let dir = TempDir::new(&format!("bypass-{name}-{store:?}"));
        let file = dir.limits(&limits_yaml(extra));
        let wall = ManualClock::new(Timestamp::from_secs(DAY_START + 3600));
        let clock = CoarseClock::ticked_by_hand(wall.clone());
        let read = read_config(&file, LoadOptions::default()).expect("readable");
        let (rules, _) = read.loaded.into_result().expect("the limits load");
        let options = EngineOptions {
            store_config: StoreConfig::with_max_keys(MAX_KEYS),
            override_store_config: StoreConfig::with_max_keys(MAX_KEYS),
            ..EngineOptions::default()
        };
        let (engine, redis) = match store {
            StoreKind::Memory => (Engine::new(Arc::new(rules), options, clock.clone()), None),
            StoreKind::Redis => {
                let server = RedisServer::start();
                // Day windows on Redis's clock: clear of midnight.
                tokio::time::sleep(server.wait_clear_of_window_end(DAY, DAY_MARGIN)).await;
                let redis = RedisStore::connect(&server.url(), Duration::from_secs(2))
                    .await
                    .expect("redis answers");
                let remote = RemoteStore::new(redis, RemoteOptions::default());
                let engine = Engine::with_remote(Arc::new(rules), options, clock.clone(), remote);
                (engine, Some(server))
            }
        };
        let live = LiveEngine::new(
            Arc::new(engine),
            file.clone(),
            LoadOptions::default(),
            read.hash,
        );
        let mut target = Target {
            live: Arc::new(live),
            clock,
            wall,
            file,
            redis,
            started_day: 0,
            _dir: dir,
        };
        target.started_day = target.day();
        target
    }

    /// The day the store decides in: the wall's in memory, Redis `TIME`'s on Redis.
    fn day(&self) -> u64 {
        match &self.redis {
            None => self.clock.now().as_nanos() / NANOS_PER_SEC / 86_400,
            Some(server) => {
                let time = server.cli(&["TIME"]);
                let secs: u64 = time
                    .lines()
                    .next()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or_else(|| panic!("redis TIME answered {time:?}"));
                secs / 86_400
            }
        }
    }

    /// The most admissions a key may have had since the target was built:
    /// [`LIMIT`] for each day the store's clock has been in (one, unless the
    /// run crossed midnight or the test stepped the wall past it).
    pub fn ceiling(&self) -> usize {
        let days = usize::try_from(self.day() - self.started_day + 1).expect("a few days");
        LIMIT * days
    }

    /// Decides `request` on the engine in service.
    pub async fn decide(&self, request: &RateLimitRequest) -> Vec<DescriptorStatus> {
        let engine = self.live.engine();
        engine
            .decide(request)
            .await
            .expect("a valid request")
            .statuses
    }

    /// Whether one request for `key` (value `client`) with `hits` is admitted.
    pub async fn admits(&self, key: &str, value: &str, hits: Option<u64>) -> bool {
        let statuses = self.decide(&request(key, value, hits, false)).await;
        statuses[0].code == Code::Ok
    }

    /// Admissions out of `n` requests of one hit for `key` = `value`.
    pub async fn admitted(&self, key: &str, value: &str, n: usize) -> usize {
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(self.admits(key, value, None).await);
        }
        ok
    }

    /// Steps the wall by `by` (forward) and ticks the clock; panics on Redis.
    pub fn step_forward(&self, by: Duration) -> Timestamp {
        assert!(self.redis.is_none(), "Redis decides on its own TIME");
        self.wall.advance(by);
        self.clock.tick()
    }

    /// Steps the wall back by `by` and ticks the clock; panics on Redis.
    pub fn step_back(&self, by: Duration) -> Timestamp {
        assert!(self.redis.is_none(), "Redis decides on its own TIME");
        let now = self.wall.now();
        self.wall
            .set(Timestamp::from_nanos(now.as_nanos().saturating_sub(
                u64::try_from(by.as_nanos()).expect("a short step"),
            )));
        self.clock.tick()
    }

    /// The limits file's path.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

/// A request for one descriptor `key` = `value`, with the descriptor's own `hits` when set, given back when `refund`.
pub fn request(key: &str, value: &str, hits: Option<u64>, refund: bool) -> RateLimitRequest {
    let mut descriptor = Descriptor::new([(key, value)]);
    descriptor.hits_addend = hits;
    descriptor.is_negative_hits = refund;
    RateLimitRequest {
        domain: DOMAIN.to_owned(),
        descriptors: vec![descriptor],
        hits_addend: 0,
    }
}

/// Asserts `admitted` is within `target`'s ceiling, naming the trick, store and key.
pub fn assert_within(target: &Target, admitted: usize, what: &str, key: &str) {
    let ceiling = target.ceiling();
    assert!(
        admitted <= ceiling,
        "{what}: {key} admitted {admitted} > {ceiling} on {:?}",
        target.redis.as_ref().map_or("memory", |_| "redis")
    );
}
