//! `tollgate serve` processes sharing one real Redis in the shares mode: a SIGTERM gives an instance's share to the others at once, a SIGKILLed one's returns when its registration lapses, and a Redis restart never lets the fleet pass the limit.
//!
//! The rule is a token bucket of 600 per hour (`on_store_error: deny`), so
//! at most a few tokens refill during a test: what the fleet admits over
//! the whole run is bounded by the burst plus that refill (twice the burst
//! when Redis restarts without its data, as for exact counters). How the
//! key is split is read from Redis itself: the key's book
//! (`tg{shares}:k:…`) lists each instance's booked part.

mod rls_client;
mod rls_load;

use std::time::Duration;

use rls_client::{channel, request};
use rls_load::admitted;
use tollgate_testkit::budget::{BUDGET, Stopwatch};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tonic::transport::Channel;

const LIMIT: u64 = 600;

const LIMITS: &str = "domain: fleet
descriptors:
  - key: tenant
    shares: true
    on_store_error: deny
    rate_limit:
      unit: hour
      requests_per_unit: 600
      algorithm: token_bucket
";

/// The one key's book in Redis: the instances holding a part, how many
/// of them have reported a measured demand, and the sum of their booked bursts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    holders: usize,
    measured: usize,
    booked: u64,
}

impl Split {
    /// `n` instances hold a part, each with its demand measured (an
    /// instance whose demand is not known yet is split only the floor).
    fn busy(self, n: usize) -> bool {
        self.holders == n && self.measured == n
    }
}

/// Reads the book of the only shares key (`None`: no book yet).
fn split(redis: &RedisServer) -> Option<Split> {
    // A counter key holds binary parts: the script finds and reads it.
    let script = "local k = redis.call('KEYS', ARGV[1])[1] \
                  if not k then return '' end return redis.call('GET', k)";
    let book = redis.cli(&["EVAL", script, "0", "tg{shares}:k:*"]);
    // version limit.rate limit.burst pool.rate pool.burst level at n (holder incarnation booked.rate booked.burst target.rate target.burst demand)*
    let fields: Vec<&str> = book.split_whitespace().collect();
    let holders: usize = fields.get(7)?.parse().ok()?;
    let (mut booked, mut measured) = (0, 0);
    for i in 0..holders {
        booked += fields.get(8 + 7 * i + 3)?.parse::<u64>().ok()?;
        measured += usize::from(*fields.get(8 + 7 * i + 6)? != "-");
    }
    Some(Split {
        holders,
        measured,
        booked,
    })
}

/// Registered instances (`tg{shares}:m`).
fn members(redis: &RedisServer) -> usize {
    redis
        .cli(&["HLEN", "tg{shares}:m"])
        .trim()
        .parse()
        .unwrap_or(0)
}

/// `n` instances on `url` with `flags`, and a gRPC channel to each.
async fn fleet(dir: &TempDir, url: &str, n: usize, flags: &[&str]) -> (Vec<Server>, Vec<Channel>) {
    let config = dir.limits(LIMITS);
    let mut all = vec!["--log-level", "warn", "--drain-delay", "0s"];
    all.extend_from_slice(flags);
    let servers: Vec<Server> = (0..n).map(|_| Server::serve(&config, url, &all)).collect();
    let mut channels = Vec::new();
    for server in &servers {
        channels.push(channel(&server.address()).await);
    }
    (servers, channels)
}

/// `per` calls of the hot key on each of `channels`, all at once; how many were admitted.
async fn round(channels: &[Channel], per: usize) -> u64 {
    let hot = request("fleet", "tenant", "hot");
    admitted(channels, &hot, per * channels.len()).await as u64
}

/// Sends rounds on `channels` (keeping their demand up) every 50 ms until
/// `done` holds, at most [`BUDGET`] × 2; (admitted, how long it took).
async fn until(
    channels: &[Channel],
    mut done: impl FnMut() -> bool,
    what: &str,
) -> (u64, Duration) {
    let watch = Stopwatch::start();
    let mut passed = 0;
    // Bounded: at most 2 × BUDGET / 50 ms rounds of 10 calls per instance.
    for _ in 0..(2 * BUDGET.as_millis() / 50) {
        if done() {
            return (passed, watch.elapsed());
        }
        passed += round(channels, 10).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within {:?}: {what}", 2 * BUDGET);
}

/// What an exact bucket of `LIMIT` per hour, full at the start, admits over `elapsed`.
fn exact_bound(elapsed: Duration) -> u64 {
    LIMIT + (LIMIT as f64 * elapsed.as_secs_f64() / 3600.0).ceil() as u64
}

/// Uses up what is left on `channels` (10 rounds of 60 calls each) and
/// checks that everything admitted since `run` started, `passed` before
/// these, stays within `buckets` exact buckets; the total.
async fn use_up(channels: &[Channel], mut passed: u64, run: &Stopwatch, buckets: u64) -> u64 {
    for _ in 0..10 {
        passed += round(channels, 60).await;
    }
    let elapsed = run.elapsed();
    let bound = buckets * exact_bound(elapsed);
    assert!(
        passed <= bound,
        "{passed} admitted in {elapsed:?} (bound: {buckets} exact bucket(s), {bound})"
    );
    passed
}

/// Three instances split the key; one is SIGKILLed. The others' parts grow
/// to the whole limit only once its registration lapses (`--shares-ttl`,
/// here 2 s), never before, and the fleet never admits past the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_instances_share_returns_when_its_registration_lapses() {
    let redis = RedisServer::start();
    let dir = TempDir::new("shares-fleet-kill");
    let ttl = Duration::from_secs(2);
    let (mut servers, channels) = fleet(&dir, &redis.url(), 3, &["--shares-ttl", "2s"]).await;
    let run = Stopwatch::start();
    let (mut passed, _) = until(
        &channels,
        || split(&redis).is_some_and(|s| s.busy(3)),
        "three busy instances hold a part",
    )
    .await;
    let before = split(&redis).expect("a book");
    assert!(before.booked <= LIMIT, "{before:?}");
    servers[0].child.kill().expect("SIGKILL");
    let _ = servers[0].child.wait();
    let survivors = &channels[1..];
    let (more, lapsed) = until(
        survivors,
        || members(&redis) == 2,
        "the killed instance's registration lapses",
    )
    .await;
    passed += more;
    let (more, whole) = until(
        survivors,
        || split(&redis).is_some_and(|s| s.holders == 2 && s.booked == LIMIT),
        "the survivors hold the whole limit",
    )
    .await;
    passed += more;
    let whole = lapsed + whole;
    assert!(
        lapsed >= ttl - ttl / 10,
        "the registration lapsed after {lapsed:?}, before its TTL of {ttl:?}"
    );
    // Use up what is left: the fleet never passes the bucket.
    let passed = use_up(survivors, passed, &run, 1).await;
    eprintln!(
        "killed with {before:?}: registration gone after {lapsed:?}, the survivors held the whole limit after {whole:?} \
         (ttl {ttl:?}); {passed} of {LIMIT} admitted over {:?}",
        run.elapsed()
    );
}

/// Two instances split the key; one gets SIGTERM. It leaves at shutdown:
/// the other holds the whole limit within a few calls, not after the
/// registration's TTL (10 s by default), and the fleet never passes the
/// bucket across the handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_instance_gives_its_share_back_at_once() {
    let redis = RedisServer::start();
    let dir = TempDir::new("shares-fleet-term");
    let (mut servers, channels) = fleet(&dir, &redis.url(), 2, &[]).await;
    let run = Stopwatch::start();
    let (mut passed, _) = until(
        &channels,
        || split(&redis).is_some_and(|s| s.busy(2)),
        "two busy instances hold a part",
    )
    .await;
    servers[0].terminate();
    let stopping = Stopwatch::start();
    let (code, _, _) = servers[0].finish();
    let stopped = stopping.elapsed();
    assert_eq!(code, Some(0), "a clean exit");
    let survivor = &channels[1..];
    let (more, whole) = until(
        survivor,
        || split(&redis).is_some_and(|s| s.holders == 1 && s.booked == LIMIT),
        "the survivor holds the whole limit",
    )
    .await;
    passed += more;
    assert_eq!(members(&redis), 1, "the leaver's registration is gone");
    assert!(
        whole < Duration::from_secs(3),
        "the survivor held the whole limit {whole:?} after the exit: the TTL, not the leave"
    );
    let passed = use_up(survivor, passed, &run, 1).await;
    eprintln!(
        "exited {stopped:?} after SIGTERM; the survivor held the whole limit {whole:?} later; \
         {passed} of {LIMIT} admitted over {:?}",
        run.elapsed()
    );
}

/// Two instances split the key; Redis is SIGKILLed for `outage` and
/// restarted (with its data when `keep_data`, from an append-only file).
/// While it is gone the shares held keep deciding and a new key gets
/// `on_store_error` (deny); after it returns new keys get shares again.
/// What passes over the run: at most the bucket with the data kept, at
/// most two buckets without (each Redis life's pool, as exact counters).
async fn through_a_redis_restart(keep_data: bool, outage: Duration) {
    let extra: &[&str] = if keep_data {
        &["--appendonly", "yes"]
    } else {
        &[]
    };
    let mut redis = RedisServer::start_on(free_port, extra);
    let dir = TempDir::new(if keep_data {
        "shares-fleet-restart-aof"
    } else {
        "shares-fleet-restart"
    });
    let (_servers, channels) = fleet(&dir, &redis.url(), 2, &[]).await;
    let run = Stopwatch::start();
    let (before, _) = until(
        &channels,
        || split(&redis).is_some_and(|s| s.busy(2)),
        "two busy instances hold a part",
    )
    .await;
    redis.kill();
    let down = Stopwatch::start();
    let mut during = 0;
    let mut fresh_admitted = 0;
    // Bounded: rounds every 100 ms for the outage.
    while down.elapsed() < outage {
        during += round(&channels, 10).await;
        let fresh = request("fleet", "tenant", "fresh-during-outage");
        fresh_admitted += admitted(&channels, &fresh, 2).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        fresh_admitted, 0,
        "a key with no share gets on_store_error: deny"
    );
    redis.restart();
    let (after, resumed) = until(
        &channels,
        || split(&redis).is_some_and(|s| s.holders == 2),
        "both instances hold a part again",
    )
    .await;
    let buckets = if keep_data { 1 } else { 2 };
    let passed = use_up(&channels, before + during + after, &run, buckets).await;
    eprintln!(
        "keep_data={keep_data}: {before} admitted before, {during} during the {outage:?} outage (from the shares held), \
         shares again {resumed:?} after the restart, {} after it; {passed} of {LIMIT} in all over {:?}",
        passed - before - during,
        run.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_with_its_data_never_lets_the_fleet_pass_the_limit() {
    through_a_redis_restart(true, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_without_its_data_admits_at_most_a_second_bucket() {
    through_a_redis_restart(false, Duration::from_secs(2)).await;
}
