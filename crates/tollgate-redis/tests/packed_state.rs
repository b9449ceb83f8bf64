//! The packed state's layout (`prelude.lua`): what the check writes, byte for byte, and that a state written by an earlier release (the same little-endian doubles) decides as it did.
//!
//! A change to the Lua code that altered the layout would strand every
//! counter already in Redis: a state left by the previous release must keep
//! its meaning, lease floor included. The states here are written by hand,
//! as that release wrote them, and read back through the current code at a
//! supplied time, so every figure is exact.

use std::time::Duration;

use redis::Commands;
use tollgate_core::{AnyAlgorithm, Decision, FixedWindow, Timestamp, TokenBucket};
use tollgate_redis::{Encoding, RedisStore, SuppliedTime, redis_key};
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);
const TAG: u64 = 7;

fn counter(key: &[u8], algorithm: AnyAlgorithm) -> Counter<'_> {
    Counter {
        group: 0,
        key,
        tag: TAG,
        algorithm,
        hits: 1,
        give_back: false,
        phase_ns: 0,
    }
}

/// Little-endian doubles, as `struct.pack('<d…')` writes them.
fn doubles(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

struct Fixture {
    store: RedisStore,
    conn: redis::Connection,
    _server: RedisServer,
}

impl Fixture {
    async fn start() -> Fixture {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), Duration::from_secs(2))
            .await
            .unwrap()
            .with_encoding(Encoding::Packed);
        let conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        Fixture {
            store,
            conn,
            _server: server,
        }
    }

    async fn check(&self, c: Counter<'_>, at: Timestamp) -> Decision {
        let mut out = Vec::new();
        let time = SuppliedTime {
            at,
            key_ttl: Duration::from_secs(60),
        };
        self.store
            .check_batch_at(&[c], time, &mut out)
            .await
            .expect("Redis answers");
        out[0]
    }

    fn get(&mut self, key: &[u8]) -> Vec<u8> {
        self.conn.get(redis_key(TAG, key)).unwrap()
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        let () = self.conn.set(redis_key(TAG, key), value).unwrap();
    }
}

#[tokio::test]
async fn a_token_bucket_writes_and_reads_its_tat_as_two_or_four_doubles() {
    let mut f = Fixture::start().await;
    // 5 per hour: a token every 720 s.
    let tb: AnyAlgorithm = TokenBucket::new(5, 5, HOUR).unwrap().into();
    let t0 = Timestamp::from_secs(1_000_000_000).saturating_add(Duration::from_nanos(250));
    let d = f.check(counter(b"new", tb), t0).await;
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 4);
    // The TAT one interval ahead: whole seconds, then nanoseconds.
    assert_eq!(f.get(b"new"), doubles(&[1_000_000_720.0, 250.0]));

    // A bucket left empty by the previous release (TAT 5 intervals ahead):
    // denied now, a token back one interval later.
    f.set(b"old", &doubles(&[1_000_003_600.0, 250.0]));
    assert!(!f.check(counter(b"old", tb), t0).await.is_allowed());
    let later = t0.saturating_add(Duration::from_secs(720));
    let d = f.check(counter(b"old", tb), later).await;
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!(d.remaining(), 0);
    assert_eq!(f.get(b"old"), doubles(&[1_000_004_320.0, 250.0]));

    // With a lease floor (lease.lua's last grant): two pairs, the floor
    // kept as it was by the check's write.
    f.set(
        b"leased",
        &doubles(&[1_000_000_720.0, 250.0, 1_000_000_500.0, 7.0]),
    );
    let d = f.check(counter(b"leased", tb), t0).await;
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 3);
    assert_eq!(
        f.get(b"leased"),
        doubles(&[1_000_001_440.0, 250.0, 1_000_000_500.0, 7.0])
    );
}

#[tokio::test]
async fn a_fixed_window_writes_and_reads_its_window_and_count() {
    let mut f = Fixture::start().await;
    let fw: AnyAlgorithm = FixedWindow::new(3, HOUR).unwrap().into();
    // 10 s into window number 400 000 (of an hour, counted from the epoch).
    let at = Timestamp::from_secs(3600 * 400_000 + 10);
    let d = f.check(counter(b"new", fw), at).await;
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 2);
    assert_eq!(f.get(b"new"), doubles(&[400_000.0, 1.0]));

    // Two taken in this window by the previous release: one left.
    f.set(b"old", &doubles(&[400_000.0, 2.0]));
    let d = f.check(counter(b"old", fw), at).await;
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    let d = f.check(counter(b"old", fw), at).await;
    assert!(!d.is_allowed(), "{d:?}");
    // A denial counts up to limit + 1, as envoyproxy/ratelimit does.
    assert_eq!(f.get(b"old"), doubles(&[400_000.0, 4.0]));

    // A count from the window before is no longer counted.
    f.set(b"stale", &doubles(&[399_999.0, 3.0]));
    assert_eq!(f.check(counter(b"stale", fw), at).await.remaining(), 2);

    // With a lease floor (window and units leased in it): kept by the write.
    f.set(b"leased", &doubles(&[400_000.0, 1.0, 400_000.0, 1.0]));
    assert_eq!(f.check(counter(b"leased", fw), at).await.remaining(), 1);
    assert_eq!(f.get(b"leased"), doubles(&[400_000.0, 2.0, 400_000.0, 1.0]));
}

impl Fixture {
    /// A check at Redis `TIME` (the path most calls take), as serving makes it.
    async fn check_now(&self, c: Counter<'_>) -> Decision {
        let mut out = Vec::new();
        // The time handed to the store is not used on Redis: TIME decides.
        self.store
            .check_batch(&[c], Timestamp::from_secs(0), &mut out)
            .await
            .expect("Redis answers");
        out[0]
    }

    /// Redis `TIME` in whole seconds and microseconds.
    fn time(&mut self) -> (u64, u64) {
        redis::cmd("TIME").query(&mut self.conn).unwrap()
    }

    fn pttl(&mut self, key: &[u8]) -> i64 {
        redis::cmd("PTTL")
            .arg(redis_key(TAG, key))
            .query(&mut self.conn)
            .unwrap()
    }
}

/// The same layouts at Redis `TIME`, where one consuming counter takes its
/// own path through the code: a TAT ahead of now moves by exactly one
/// interval, a window ahead of now (the Redis host's clock stepped back
/// since it was written) is held and counts the denial, and a lease floor
/// is kept by every write.
#[tokio::test]
async fn at_redis_time_one_counter_keeps_the_layout_and_its_lease_floor() {
    let mut f = Fixture::start().await;
    let tb: AnyAlgorithm = TokenBucket::new(5, 5, HOUR).unwrap().into();
    let (secs, _) = f.time();
    // Two intervals (720 s each) of backlog, and a floor.
    let tat = (secs + 1440) as f64;
    f.set(b"bucket", &doubles(&[tat, 250.0, tat - 100.0, 7.0]));
    let d = f.check_now(counter(b"bucket", tb)).await;
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!(d.remaining(), 2);
    assert_eq!(
        f.get(b"bucket"),
        doubles(&[tat + 720.0, 250.0, tat - 100.0, 7.0])
    );
    // The key lives as long as its backlog, three intervals now.
    let ttl = f.pttl(b"bucket");
    assert!(ttl > 2_100_000 && ttl <= 2_161_000, "{ttl}");

    let fw: AnyAlgorithm = FixedWindow::new(3, HOUR).unwrap().into();
    let (secs, _) = f.time();
    let ahead = (secs / 3600 + 5) as f64;
    // Written as a check writes it, with its TTL to its window's end.
    let () = f
        .conn
        .pset_ex(
            redis_key(TAG, b"window"),
            doubles(&[ahead, 3.0, ahead, 1.0]),
            6 * 3_600_000,
        )
        .unwrap();
    let d = f.check_now(counter(b"window", fw)).await;
    assert!(
        !d.is_allowed(),
        "a used-up window ahead stays used up: {d:?}"
    );
    assert_eq!(f.get(b"window"), doubles(&[ahead, 4.0, ahead, 1.0]));
    // The key's TTL (to the end of the window it holds) stays.
    let ttl = f.pttl(b"window");
    assert!(ttl > 5 * 3_600_000, "{ttl}");
}
