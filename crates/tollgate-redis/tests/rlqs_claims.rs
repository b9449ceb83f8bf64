//! The quota service's claims board on a real Redis: each instance hears the other instances' live claims on a counter, never its own, and a claim lapses once it is not published again within its time to live.

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
        .exchange_claims(1, long, &[(api.clone(), 30), (web.clone(), 4)])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![Vec::<u64>::new(), Vec::new()]);
    // Instance 2 hears instance 1's claim on the counter they share, not its own.
    let heard = redis
        .exchange_claims(2, long, &[(api.clone(), 11)])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![vec![30]]);
    // Instance 1 publishes again and hears 2 on one counter, nobody on the other.
    let heard = redis
        .exchange_claims(1, long, &[(api.clone(), 28), (web.clone(), 4)])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![vec![11], vec![]]);
    // A claim published for 50 ms is gone once they have passed on Redis' clock.
    redis
        .exchange_claims(3, Duration::from_millis(50), &[(web.clone(), 7)])
        .await
        .expect("the board answers");
    let heard = redis
        .exchange_claims(1, long, &[(web.clone(), 4)])
        .await
        .expect("the board answers");
    assert_eq!(heard, vec![vec![7]], "live for 50 ms");
    let (board, counter) = (&redis, &web);
    let lapsed = poll_until_async(Duration::from_secs(5), || async move {
        let heard = board
            .exchange_claims(1, long, &[(counter.clone(), 4)])
            .await
            .expect("the board answers");
        (heard == vec![Vec::<u64>::new()]).then_some(())
    })
    .await;
    assert!(lapsed.is_some(), "a 50 ms claim still heard after 5 s");
    // More counters than one script call carries: every answer in order.
    let many: Vec<(Vec<u8>, u64)> = (0..600u64)
        .map(|i| (format!("quota:{i}").into_bytes(), i))
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
