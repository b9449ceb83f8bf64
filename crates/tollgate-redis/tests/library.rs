//! How the store calls its Lua code: one Functions library (FCALL), loaded again when a node lost it, or scripts (EVALSHA) for a user not allowed FUNCTION, with the same answers.

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, Decision, FixedWindow, TokenBucket};
use tollgate_redis::{Encoding, RedisStore, SuppliedTime};
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;

mod one_counter;
use one_counter::counter;

const HOUR: Duration = Duration::from_secs(3600);

async fn one(store: &RedisStore, c: Counter<'_>) -> Decision {
    let mut out = Vec::new();
    store
        .check_batch(&[c], tollgate_core::Timestamp::from_secs(0), &mut out)
        .await
        .expect("Redis answers");
    out[0]
}

/// The calls of `command` (e.g. `fcall`) the server has run, from `INFO commandstats`.
fn calls_of(server: &RedisServer, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// 3 per hour (token bucket and fixed window): three pass, the fourth is
/// denied, and a lease of the bucket finds nothing left.
async fn three_then_denied(store: &RedisStore, server: &RedisServer, flush: &[&str]) {
    let tb: AnyAlgorithm = TokenBucket::new(3, 3, HOUR).unwrap().into();
    let fw: AnyAlgorithm = FixedWindow::new(3, HOUR).unwrap().into();
    // (The engine's keys name the algorithm; these raw keys must too.)
    for (key, algorithm) in [(&b"tb"[..], tb), (b"fw", fw)] {
        for i in 0..4 {
            // The code lost between calls (as after a restart) costs no decision.
            server.cli(flush);
            let d = one(store, counter(key, algorithm)).await;
            assert_eq!(d.is_allowed(), i < 3, "call {i}: {d:?}");
        }
    }
    server.cli(flush);
    let grant = store
        .grant_lease(&counter(b"tb", tb), 1, 1)
        .await
        .expect("Redis answers");
    assert_eq!(grant.units, 0, "a used-up bucket grants nothing");
}

#[tokio::test]
async fn checks_and_leases_are_function_calls_and_a_lost_library_is_loaded_again() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .unwrap();
    for encoding in [Encoding::Hash, Encoding::Packed] {
        server.cli(&["FLUSHALL"]);
        server.cli(&["CONFIG", "RESETSTAT"]);
        let store = store.with_encoding(encoding);
        three_then_denied(&store, &server, &["FUNCTION", "FLUSH"]).await;
        assert_eq!(calls_of(&server, "evalsha"), 0, "no script call");
        // 8 checks and a grant, each after a flush: one failed call and one retry each.
        assert_eq!(calls_of(&server, "fcall"), 18, "{encoding:?}");
    }
    assert!(
        server.cli(&["FUNCTION", "LIST"]).contains("tollgate_"),
        "the library is loaded again"
    );
}

#[tokio::test]
async fn a_user_not_allowed_functions_gets_the_same_answers_from_scripts() {
    let server = RedisServer::start();
    server.cli(&[
        "ACL",
        "SETUSER",
        "scripts",
        "on",
        ">pw",
        "~*",
        "+@all",
        "-function",
        "-fcall",
    ]);
    let url = server.url().replace("redis://", "redis://scripts:pw@");
    let store = RedisStore::connect(&url, Duration::from_secs(2))
        .await
        .expect("a user without FUNCTION still connects");
    for encoding in [Encoding::Hash, Encoding::Packed] {
        server.cli(&["FLUSHALL"]);
        server.cli(&["CONFIG", "RESETSTAT"]);
        let store = store.with_encoding(encoding);
        three_then_denied(&store, &server, &["SCRIPT", "FLUSH"]).await;
        assert_eq!(calls_of(&server, "fcall"), 0, "no function call");
        assert_eq!(calls_of(&server, "evalsha"), 18, "{encoding:?}");
    }
}

/// The library remembers each counter's parameters by their text (a
/// bounded table, emptied at 256 entries): 300 limits, each taken whole in
/// one call and then once more, twice over, are each decided by their own
/// figures, whether their text was remembered, forgotten or read anew. (At
/// a supplied time, so the wait is exact.)
#[tokio::test]
async fn parameters_past_the_remembered_ones_are_read_anew() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .unwrap();
    let time = SuppliedTime {
        at: tollgate_core::Timestamp::from_secs(1_000_000_000),
        key_ttl: Duration::from_secs(60),
    };
    let mut out = Vec::new();
    for encoding in [Encoding::Hash, Encoding::Packed] {
        let store = store.with_encoding(encoding);
        for round in 0..2 {
            for limit in 1..=300_u64 {
                let key = format!("{encoding:?}-{round}-{limit}");
                let bucket = TokenBucket::new(limit, limit, HOUR).unwrap();
                let mut c = counter(key.as_bytes(), bucket.into());
                c.hits = limit;
                store.check_batch_at(&[c], time, &mut out).await.unwrap();
                assert!(out[0].is_allowed(), "{key}: {:?}", out[0]);
                assert_eq!(out[0].remaining(), 0, "{key}");
                c.hits = 1;
                store.check_batch_at(&[c], time, &mut out).await.unwrap();
                assert!(!out[0].is_allowed(), "{key}: {:?}", out[0]);
                // The wait is one token's interval.
                assert_eq!(out[0].retry_after(), Some(bucket.token_interval()), "{key}");
            }
        }
    }
}
