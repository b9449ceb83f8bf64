//! The quota service's claims board on a real Redis: each instance hears the other instances' Envoys' live claims on a counter, never its own, a claim lapses once it is not published again within its time to live, and an instance of the earlier release (one total per counter) is heard and hears as one claimant.

use std::time::Duration;

use tollgate_redis::RedisStore;
use tollgate_testkit::budget::poll_until_async;
use tollgate_testkit::redis::RedisServer;

#[tokio::test]
async fn instances_hear_each_others_claims_and_a_claim_not_published_again_lapses() {
    let server = RedisServer::start();
    let redis = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .expect("connects");
    let long = Duration::from_secs(60);
    let (api, web) = (b"quota:api".to_vec(), b"quota:web".to_vec());
    // Instance 1 alone: nobody else claims anything.
    let heard = redis
        .exchange_claims(1, long, &[(api.clone(), vec![30]), (web.clone(), vec![4])])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![Vec::<u64>::new(), Vec::new()]);
    // Instance 2 hears instance 1's claim on the counter they share, not its own.
    let heard = redis
        .exchange_claims(2, long, &[(api.clone(), vec![11])])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![vec![30]]);
    // Instance 1 publishes again and hears 2 on one counter, nobody on the other.
    let heard = redis
        .exchange_claims(1, long, &[(api.clone(), vec![28]), (web.clone(), vec![4])])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![vec![11], vec![]]);
    // A claim published for 50 ms is gone once they have passed on Redis' clock.
    redis
        .exchange_claims(3, Duration::from_millis(50), &[(web.clone(), vec![7])])
        .await
        .expect("the board answers");
    let heard = redis
        .exchange_claims(1, long, &[(web.clone(), vec![4])])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![vec![7]], "live for 50 ms");
    let (board, counter) = (&redis, &web);
    let lapsed = poll_until_async(Duration::from_secs(5), || async move {
        let heard = board
            .exchange_claims(1, long, &[(counter.clone(), vec![4])])
            .await
            .expect("the board answers");
        (heard == vec![Vec::<u64>::new()]).then_some(())
    })
    .await;
    assert!(lapsed.is_some(), "a 50 ms claim still heard after 5 s");
    // More counters than one script call carries: every answer in order.
    let many: Vec<(Vec<u8>, Vec<u64>)> = (0..600u64)
        .map(|i| (format!("quota:{i}").into_bytes(), vec![i]))
        .collect();
    redis
        .exchange_claims(4, long, &many)
        .await
        .expect("the board answers");
    let heard = redis
        .exchange_claims(5, long, &many)
        .await
        .expect("the board answers");
    assert_eq!(heard.len(), 600);
    assert!(heard.iter().enumerate().all(|(i, h)| *h == vec![i as u64]));
}

/// Reads `field` of `key` on `server` (the board as an instance of the
/// earlier release reads it).
async fn field(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    ::redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn each_envoys_claim_is_heard_and_an_earlier_release_counts_as_one_claimant() {
    let server = RedisServer::start();
    let redis = RedisStore::connect(&server.url(), Duration::from_secs(2))
        .await
        .expect("connects");
    let long = Duration::from_secs(60);
    let api = b"quota:api".to_vec();
    // Instance 1 has three Envoys on the counter, instance 2 two: each
    // hears every Envoy of the other, one claim each.
    redis
        .exchange_claims(1, long, &[(api.clone(), vec![5, 40, 70])])
        .await
        .expect("the board answers");
    let mut heard = redis
        .exchange_claims(2, long, &[(api.clone(), vec![12, 300])])
        .await
        .expect("the board answers");
    heard[0].sort_unstable();
    assert_eq!(heard, vec![vec![5, 40, 70]]);
    // An instance of the earlier release reads the totals board: instance
    // 1's three Envoys as one claim of 115, instance 2's as 312.
    let total = |f| field(&server, "tg{rlqs}:quota:api", f);
    let (one, two) = (total("1").await, total("2").await);
    assert!(
        one.as_deref().is_some_and(|v| v.starts_with("115:"))
            && two.as_deref().is_some_and(|v| v.starts_with("312:")),
        "the totals board holds {one:?} and {two:?}"
    );
    // One writing its total the earlier way (`total:lapses at`, ms of
    // Redis TIME) is heard as one claimant beside the Envoys of instance 2.
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (seconds, _): (u64, u64) = ::redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let _: () = ::redis::cmd("HSET")
        .arg("tg{rlqs}:quota:api")
        .arg("9")
        .arg(format!("77:{}", (seconds + 60) * 1000))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut heard = redis
        .exchange_claims(1, long, &[(api.clone(), vec![5, 40, 70])])
        .await
        .expect("the board answers");
    heard[0].sort_unstable();
    assert_eq!(heard, vec![vec![12, 77, 300]]);
    // An instance with no Envoy on a counter left publishes none.
    redis
        .exchange_claims(2, long, &[(api.clone(), vec![])])
        .await
        .expect("the board answers");
    let mut heard = redis
        .exchange_claims(1, long, &[(api.clone(), vec![5, 40, 70])])
        .await
        .expect("the board answers");
    heard[0].sort_unstable();
    assert_eq!(heard, vec![vec![77]]);
}
