//! A fixed window's key on Redis lives exactly as long as its count can matter: to its window's end, even when a reload turns `stagger` off within the window.
//!
//! The write that starts a window sets the key's TTL; the writes after it
//! in the same window keep it (`prelude.lua`, `check.lua`). So the TTL the
//! first write sets must hold for every later one: a staggered key's count
//! must not expire at its staggered end when a reload has turned `stagger`
//! off and the same window number now ends later.

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, Decision, FixedWindow, Timestamp};
use tollgate_redis::{Encoding, RedisStore, redis_key};
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;

/// Long enough that the test never runs across a window's end (a window
/// ends within the test's second once in 8.6 million runs).
const WINDOW: Duration = Duration::from_secs(100 * 86_400);
const TAG: u64 = 9;

fn counter(phase_ns: u64) -> Counter<'static> {
    Counter {
        group: 0,
        key: b"user",
        tag: TAG,
        algorithm: AnyAlgorithm::from(FixedWindow::new(3, WINDOW).unwrap()),
        hits: 1,
        give_back: false,
        phase_ns,
    }
}

async fn check(store: &RedisStore, c: Counter<'_>) -> Decision {
    let mut out = Vec::new();
    // On Redis the check decides at Redis TIME, not at the time passed.
    store
        .check_batch(&[c], Timestamp::from_secs(0), &mut out)
        .await
        .expect("Redis answers");
    out[0]
}

/// Milliseconds from Redis `TIME` to the end of the current window at
/// phase 0, and the key's PTTL.
fn to_window_end_and_pttl(conn: &mut redis::Connection) -> (u64, i64) {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    let window_us = WINDOW.as_micros() as u64;
    let now_us = secs * 1_000_000 + micros;
    let to_end_ms = (window_us - now_us % window_us) / 1000;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(redis_key(TAG, b"user"))
        .query(conn)
        .unwrap();
    (to_end_ms, pttl)
}

#[tokio::test]
async fn a_count_taken_staggered_outlives_its_window_when_stagger_is_turned_off() {
    for encoding in [Encoding::Packed, Encoding::Hash] {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), Duration::from_secs(2))
            .await
            .unwrap()
            .with_encoding(encoding);
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        // A phase of half what is left of this window: the staggered
        // window has the same number and ends halfway to the epoch-aligned
        // one's end.
        let (to_end_ms, _) = to_window_end_and_pttl(&mut conn);
        let phase_ns = to_end_ms / 2 * 1_000_000;
        let staggered = check(&store, counter(phase_ns)).await;
        assert_eq!(staggered.remaining(), 2, "{encoding:?}");
        // The reload: stagger off, the same window number, one more.
        let aligned = check(&store, counter(0)).await;
        assert_eq!(aligned.remaining(), 1, "{encoding:?}: the count carried on");
        let (to_end_ms, pttl) = to_window_end_and_pttl(&mut conn);
        // The count lives to the aligned window's end (TTLs are whole ms,
        // rounded up), and not past it.
        assert!(
            pttl >= to_end_ms as i64 - 1_000 && pttl <= to_end_ms as i64 + 2,
            "{encoding:?}: PTTL {pttl} ms, window ends in {to_end_ms} ms"
        );
    }
}
