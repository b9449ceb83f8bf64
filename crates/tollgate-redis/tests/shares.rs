//! The shares authority on a real Redis (and a 3-master cluster): holders calling it concurrently admit a stream an exact bucket admits too (with starter slots as well, each slot owned once), a silent holder's share returns after its TTL, a Redis restart admits nothing past the limit, and a call held up past half a second is still answered within the store's timeout.
//!
//! The holders run in one task, in turn, on one monotonic clock, so the
//! conformance checker sees every admission at the time it was decided;
//! their calls to Redis go out together, so their compare-and-set writes
//! race on the same keys.

use std::time::Duration;

use futures_util::future::join_all;
use tollgate_core::clock::{Clock, MonotonicClock};
use tollgate_core::share::{
    AuthorityPolicy, ConformanceChecker, Holder, HolderPolicy, KeyReport, Leaving, Share,
    StarterPolicy, SyncCall, Verdict,
};
use tollgate_redis::{RedisAuthority, RedisStore};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_cluster::RedisCluster;

const LIMIT: Share = Share::per_second(50, 10);

fn policies(ttl: Duration) -> (HolderPolicy, AuthorityPolicy) {
    let holder = HolderPolicy {
        sync_interval: Duration::from_millis(20),
        batch_interval: Duration::from_millis(1),
        call_timeout: Duration::from_millis(500),
        ttl,
        ttl_margin: Duration::from_millis(200),
        idle_after: Duration::from_secs(30),
        demand_period: Duration::from_millis(200),
        max_keys: 1_000,
    };
    let authority = AuthorityPolicy {
        ttl,
        ..AuthorityPolicy::default()
    };
    (holder, authority)
}

/// A fleet of holders on one authority, with the exact bucket of each key.
struct Fleet {
    clock: MonotonicClock,
    holders: Vec<Holder<Vec<u8>>>,
    /// Whether each holder still runs (a stopped one neither decides nor calls).
    running: Vec<bool>,
    authority: RedisAuthority,
    checkers: Vec<(Vec<u8>, ConformanceChecker)>,
    limit: Share,
    store_errors: u64,
}

impl Fleet {
    fn new(authority: RedisAuthority, holders: u64, keys: &[&[u8]], policy: HolderPolicy) -> Self {
        let clock = MonotonicClock::new();
        let now = clock.now();
        Fleet {
            holders: (1..=holders)
                .map(|id| Holder::new(id, policy, now))
                .collect(),
            running: vec![true; holders as usize],
            authority,
            checkers: keys
                .iter()
                .map(|k| (k.to_vec(), ConformanceChecker::new(LIMIT, now)))
                .collect(),
            limit: LIMIT,
            clock,
            store_errors: 0,
        }
    }

    /// Runs `rounds` rounds: each running holder asks `per_round` times on every key, then due calls go out together.
    async fn run(&mut self, rounds: usize, per_round: usize) {
        for _ in 0..rounds {
            for (h, holder) in self.holders.iter_mut().enumerate() {
                if !self.running[h] {
                    continue;
                }
                for (key, checker) in &mut self.checkers {
                    for _ in 0..per_round {
                        let now = self.clock.now();
                        if holder.check(key, self.limit, now, 1) == Verdict::Admit
                            && holder.take(key, now, 1)
                        {
                            checker.admit(now, 1);
                        }
                    }
                }
            }
            let now = self.clock.now();
            let calls: Vec<_> = self
                .holders
                .iter_mut()
                .enumerate()
                .filter(|(h, _)| self.running[*h])
                .filter_map(|(h, holder)| holder.poll(now).map(|c| (h, c)))
                .collect();
            let authority = &self.authority;
            let replies = join_all(calls.iter().map(|(_, c)| authority.sync(c))).await;
            for ((h, _), reply) in calls.iter().zip(replies) {
                match reply {
                    Ok(reply) => {
                        self.holders[*h].on_reply(self.clock.now(), reply);
                    }
                    Err(_) => self.store_errors += 1,
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn admitted(&self) -> u64 {
        self.checkers.iter().map(|(_, c)| c.admitted()).sum()
    }

    fn over_admitted(&self) -> u64 {
        self.checkers.iter().map(|(_, c)| c.over_admitted()).sum()
    }
}

async fn conforming_fleet(url: &str) {
    let store = RedisStore::connect(url, Duration::from_secs(2))
        .await
        .expect("Redis");
    let (holder, policy) = policies(Duration::from_secs(5));
    let authority = RedisAuthority::new(store, policy);
    // 4 holders × 2 keys × 32 asks a round: 256 requests between calls.
    let mut fleet = Fleet::new(authority.clone(), 4, &[b"api-key-1", b"api-key-2"], holder);
    fleet.run(400, 32).await;
    assert_eq!(fleet.over_admitted(), 0, "admitted past the limit");
    assert_eq!(fleet.store_errors, 0);
    // The limit is used, not just kept: at least the two bursts and a
    // quarter of what refilled (the run lasts about a second or more).
    assert!(
        fleet.admitted() >= 2 * 10 + 12,
        "admitted only {}",
        fleet.admitted()
    );
    let stats = authority.stats();
    assert!(
        stats.conflicts.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the holders' writes never raced: the test did not exercise the compare-and-set"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_on_one_redis_admit_only_what_an_exact_bucket_admits() {
    let redis = RedisServer::start();
    conforming_fleet(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_on_a_cluster_admit_only_what_an_exact_bucket_admits() {
    let cluster = RedisCluster::start();
    conforming_fleet(&cluster.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_holders_share_returns_after_its_ttl() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url(), Duration::from_secs(2))
        .await
        .expect("Redis");
    let ttl = Duration::from_secs(1);
    let (holder, policy) = policies(ttl);
    let mut fleet = Fleet::new(RedisAuthority::new(store, policy), 2, &[b"k"], holder);
    fleet.run(100, 16).await;
    let key = b"k".to_vec();
    let busy = fleet.holders[1].in_force(&key);
    assert!(
        busy.rate < LIMIT.rate,
        "two busy holders share the key: {busy:?}"
    );
    // Holder 1 stops as if SIGKILLed: no call, no release.
    fleet.running[0] = false;
    let start = fleet.clock.now();
    let mut rounds = 0;
    while fleet.holders[1].in_force(&key).rate < LIMIT.rate && rounds < 2_000 {
        fleet.run(1, 16).await;
        rounds += 1;
    }
    let waited = fleet.clock.now().saturating_since(start);
    assert_eq!(
        fleet.holders[1].in_force(&key).rate,
        LIMIT.rate,
        "the whole rate after {waited:?}"
    );
    assert!(
        waited >= ttl - Duration::from_millis(200),
        "not before its registration ran out: {waited:?}"
    );
    assert_eq!(fleet.over_admitted(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_admits_nothing_past_the_limit_and_shares_resume() {
    let mut redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url(), Duration::from_millis(300))
        .await
        .expect("Redis");
    let (holder, policy) = policies(Duration::from_secs(1));
    let mut fleet = Fleet::new(RedisAuthority::new(store, policy), 3, &[b"k"], holder);
    fleet.run(100, 16).await;
    redis.kill();
    // Until every holder's registration has run out (bounded).
    let mut rounds = 0;
    while rounds < 2_000 && fleet.holders.iter().any(|h| h.valid_at(fleet.clock.now())) {
        fleet.run(1, 16).await;
        rounds += 1;
    }
    assert!(fleet.store_errors > 0, "Redis was down");
    let during = fleet.admitted();
    // The holders' registrations have run out: nothing is admitted without Redis.
    fleet.run(20, 16).await;
    assert_eq!(
        fleet.admitted(),
        during,
        "admitted with shares past their deadline"
    );
    redis.restart();
    fleet.run(300, 16).await;
    assert!(
        fleet.admitted() > during,
        "the mode resumed after the restart"
    );
    // A restarted Redis has lost the state: its pool starts full, which an
    // exact bucket full at the start admits too once the lapsed shares are gone.
    assert_eq!(
        fleet.over_admitted(),
        0,
        "admitted past the limit across the restart"
    );
}

/// Starter slots on one Redis: of 6 racing holders exactly 4 own one of the 4
/// slots, each decides a new key's first use with no call once its part has
/// refilled, and nothing passes an exact bucket of any key.
async fn starters_on(url: &str) {
    let store = RedisStore::connect(url, Duration::from_secs(2))
        .await
        .expect("Redis");
    let (holder, mut policy) = policies(Duration::from_secs(5));
    policy.starter = StarterPolicy {
        slots: 4,
        divisor: 4,
    };
    // 16 parts of 64/s, burst 64: 4 tokens a second and 4 of burst each.
    let limit = Share::per_second(64, 64);
    assert_eq!(policy.starter.part(limit), Share::per_second(4, 4));
    let authority = RedisAuthority::new(store, policy);
    let mut fleet = Fleet::new(authority.clone(), 6, &[b"old-1", b"old-2"], holder);
    fleet.limit = limit;
    let now = fleet.clock.now();
    fleet.checkers = fleet
        .checkers
        .iter()
        .map(|(k, _)| (k.clone(), ConformanceChecker::new(limit, now)))
        .collect();
    // Every holder registers at once, each with a key of its own (so no
    // shared book serializes their writes: only the slots' owners do).
    let now = fleet.clock.now();
    for (h, holder) in fleet.holders.iter_mut().enumerate() {
        let own = format!("own-{h}");
        assert_eq!(holder.check(own.as_bytes(), limit, now, 1), Verdict::Wait);
    }
    fleet.run(1, 0).await;
    // The parts refill for a second and more.
    let start = fleet.clock.now();
    while fleet.clock.now().saturating_since(start) < Duration::from_millis(1_200) {
        fleet.run(1, 4).await;
    }
    let owners = fleet
        .holders
        .iter()
        .filter(|h| h.starter().is_some())
        .count();
    assert_eq!(owners, 4, "4 slots, each owned by one holder");
    // New keys: a slot owner admits its first use at once.
    for (h, holder) in fleet.holders.iter_mut().enumerate() {
        let key = format!("new-{h}").into_bytes();
        let now = fleet.clock.now();
        let verdict = holder.check(&key, limit, now, 1);
        if holder.starter().is_some() {
            assert_eq!(
                verdict,
                Verdict::Admit,
                "holder {h}'s first use of a new key"
            );
            assert!(holder.take(&key, now, 1));
        } else {
            assert_eq!(verdict, Verdict::Wait, "holder {h} owns no slot");
        }
    }
    // Everybody on a handful of new keys at once, racing: inside each key's bucket.
    let keys: Vec<Vec<u8>> = (0..6).map(|k| format!("shared-{k}").into_bytes()).collect();
    let now = fleet.clock.now();
    fleet.checkers = keys
        .iter()
        .map(|k| (k.clone(), ConformanceChecker::new(limit, now)))
        .collect();
    fleet.run(300, 8).await;
    assert_eq!(fleet.over_admitted(), 0, "admitted past the limit");
    assert_eq!(fleet.store_errors, 0);
    assert!(
        fleet.admitted() >= 6 * 64,
        "admitted only {}",
        fleet.admitted()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starter_slots_on_one_redis_are_owned_once_and_admit_only_what_an_exact_bucket_admits() {
    let redis = RedisServer::start();
    starters_on(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starter_slots_on_a_cluster_are_owned_once_and_admit_only_what_an_exact_bucket_admits() {
    let cluster = RedisCluster::start();
    starters_on(&cluster.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_starter_policy_written_is_the_fleets() {
    let redis = RedisServer::start();
    let url = redis.url();
    let connect = || RedisStore::connect(&url, Duration::from_secs(2));
    let (holder, policy) = policies(Duration::from_secs(5));
    // The first instance runs without starter slots and writes that down.
    let mut first = Fleet::new(
        RedisAuthority::new(connect().await.expect("Redis"), policy),
        1,
        &[b"k"],
        holder,
    );
    first.run(5, 1).await;
    // A second instance asks for slots: it follows the fleet's policy, and no holder gets one.
    let asking = AuthorityPolicy {
        starter: StarterPolicy {
            slots: 4,
            divisor: 4,
        },
        ..policy
    };
    let authority = RedisAuthority::new(connect().await.expect("Redis"), asking);
    let mut second = Fleet::new(authority.clone(), 2, &[b"k"], holder);
    second.run(5, 1).await;
    assert!(second.holders.iter().all(|h| h.starter().is_none()));
    assert!(
        authority
            .stats()
            .starter_differs
            .load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A call the store's timeout allows is not cut at the connection's own default (500 ms): a
/// leaving instance's call with tens of thousands of keys takes longer than that on a busy Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_up_past_half_a_second_is_answered_within_the_stores_timeout() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Duration::from_secs(10))
        .await
        .expect("connects");
    let authority = RedisAuthority::new(store, AuthorityPolicy::default());
    let call = SyncCall {
        holder: 1,
        incarnation: 1,
        seq: 1,
        registering: true,
        leaving: Leaving::No,
        reports: vec![KeyReport {
            key: b"k".to_vec(),
            limit: Share::per_second(100, 100),
            in_force: Share::ZERO,
            returned: 0,
            demand: None,
            release: false,
        }],
    };
    // The server answers no client for the next 3 s.
    assert_eq!(server.cli(&["CLIENT", "PAUSE", "3000", "ALL"]).trim(), "OK");
    let clock = MonotonicClock::new();
    let began = clock.now();
    let reply = authority.sync(&call).await;
    let waited = clock.now().saturating_since(began);
    let reply = reply.expect("answered within the store's 10 s");
    assert!(reply.accepted && reply.answers.len() == 1, "{reply:?}");
    assert!(
        waited >= Duration::from_millis(500),
        "the pause held the call up: {waited:?}"
    );
}
