//! The bypass suite: for every algorithm on every store, a client that tries each trick
//! (reload races, key floods, clock steps, over-refunds, huge costs, concurrent callers)
//! and a count of its admissions that must never exceed the limit.
//!
//! Every limit here is [`LIMIT`] per period, one rule per algorithm keyed by
//! the algorithm's name; a client is a descriptor value. The stores are the
//! engine's in-memory counters, deciding on a coarse clock ticked by hand
//! over a manual wall (the period is a minute), and a real `redis-server`
//! through the engine's Redis store, which decides at Redis `TIME` (the
//! period is a year, so no window ends and no bucket refills during a test).
//! No test waits on real time.

mod clock_steps;
mod concurrency;
mod floods;
mod huge_costs;
mod refunds;
mod reloads;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Clock, CoarseClock, ManualClock, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, DescriptorStatus, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{AlgorithmKind, LoadOptions, RuleSet, load_sources};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions};
use tollgate_testkit::redis::RedisServer;

/// Admissions each client may have per minute, under every algorithm.
const LIMIT: u64 = 5;

/// The suite's domain.
const DOMAIN: &str = "bypass";

/// An hour boundary plus ten seconds, so minute windows are mid-way and known.
const START: u64 = 1_699_999_210;

/// Where counters live.
enum Backend {
    /// The engine's in-memory stores.
    Memory,
    /// A fresh `redis-server` through the engine's Redis store.
    Redis(RedisServer),
}

impl Backend {
    /// Both stores: in memory and a fresh redis-server.
    fn all() -> [Backend; 2] {
        [Backend::Memory, Backend::Redis(RedisServer::start())]
    }

    /// The period of every limit: one a test can step past on the manual
    /// clock, and one that real time cannot end during a test on Redis.
    fn unit(&self) -> &'static str {
        match self {
            Backend::Memory => "minute",
            Backend::Redis(_) => "year",
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis(_) => "redis",
        }
    }
}

/// One rule of [`LIMIT`] per `backend`'s period per algorithm, keyed by the
/// algorithm's name, with `extra` rules appended; `deny` when the store
/// fails, so an error never admits.
fn rules_with(backend: &Backend, extra: &str) -> Arc<RuleSet> {
    let mut yaml = format!("domain: {DOMAIN}\ndescriptors:\n");
    for kind in AlgorithmKind::ALL {
        yaml.push_str(&rule_yaml(kind, backend));
    }
    yaml.push_str(extra);
    parse(&yaml)
}

/// The rule for `kind`: [`LIMIT`] per `backend`'s period (a leaky bucket admits `burst + 1` at once).
fn rule_yaml(kind: AlgorithmKind, backend: &Backend) -> String {
    let unit = backend.unit();
    let burst = if kind == AlgorithmKind::LeakyBucket {
        format!(", burst: {}", LIMIT - 1)
    } else {
        String::new()
    };
    format!(
        "  - key: {kind}\n    on_store_error: deny\n    rate_limit: {{unit: {unit}, requests_per_unit: {LIMIT}, algorithm: {kind}{burst}}}\n"
    )
}

fn parse(yaml: &str) -> Arc<RuleSet> {
    let loaded = load_sources([(Path::new("bypass.yaml"), yaml)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

/// An engine on `backend` over [`rules_with`]`(backend, "")`, and its clock.
struct Subject {
    engine: Engine<CoarseClock>,
    clock: CoarseClock,
    wall: ManualClock,
}

impl Subject {
    async fn start(backend: &Backend, options: EngineOptions) -> Subject {
        Subject::start_with(backend, options, rules_with(backend, ""), START).await
    }

    /// An engine for `rules` whose wall reads `secs`.
    async fn start_with(
        backend: &Backend,
        options: EngineOptions,
        rules: Arc<RuleSet>,
        secs: u64,
    ) -> Subject {
        let wall = ManualClock::new(Timestamp::from_secs(secs));
        let clock = CoarseClock::ticked_by_hand(wall.clone());
        let engine = match backend {
            Backend::Memory => Engine::new(rules, options, clock.clone()),
            Backend::Redis(redis) => {
                let remote = RemoteStore::new(connect(redis).await, RemoteOptions::default());
                Engine::with_remote(rules, options, clock.clone(), remote)
            }
        };
        Subject {
            engine,
            clock,
            wall,
        }
    }

    /// Moves the wall by `secs` (back when negative) and lets the coarse clock read it.
    fn step(&self, secs: i64) {
        let now = self.wall.now().as_nanos();
        let delta = i128::from(secs) * 1_000_000_000;
        let next = u64::try_from(i128::from(now) + delta).expect("a time after the epoch");
        self.wall.set(Timestamp::from_nanos(next));
        self.clock.tick();
    }
}

/// A Redis store connected to `redis`.
async fn connect(redis: &RedisServer) -> RedisStore {
    RedisStore::connect(&redis.url(), Duration::from_secs(2))
        .await
        .expect("redis answers")
}

/// One descriptor for client `who` of the `kind` rule, costing `hits` (`None`: the request's 1).
fn descriptor(kind: AlgorithmKind, who: &str, hits: Option<u64>, refund: bool) -> Descriptor {
    Descriptor {
        hits_addend: hits,
        is_negative_hits: refund,
        ..Descriptor::new([(kind.name(), who)])
    }
}

fn request(descriptors: Vec<Descriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: DOMAIN.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// The status of one descriptor, or `None` when the engine refused the request as invalid.
async fn status(engine: &Engine<CoarseClock>, d: Descriptor) -> Option<DescriptorStatus> {
    let response = engine.decide(&request(vec![d])).await.ok()?;
    assert_eq!(response.statuses.len(), 1);
    response.statuses.into_iter().next()
}

/// Whether `status` admitted the request under a limit (OK and a current limit).
fn admitted(status: Option<&DescriptorStatus>) -> bool {
    status.is_some_and(|s| s.code == Code::Ok && s.current_limit.is_some())
}

/// Admissions out of `n` one-hit requests by `who` under `kind`.
async fn admissions(engine: &Engine<CoarseClock>, kind: AlgorithmKind, who: &str, n: u64) -> u64 {
    let mut ok = 0;
    for _ in 0..n {
        ok += u64::from(admitted(
            status(engine, descriptor(kind, who, None, false))
                .await
                .as_ref(),
        ));
    }
    ok
}
