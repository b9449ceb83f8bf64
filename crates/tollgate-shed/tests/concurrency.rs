//! The per-key concurrency limit, on tower-test mocks and paused time.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_shed::concurrency::ConcurrencyLimitLayer;
use tollgate_shed::{BoxError, Shed, ShedReason};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

/// Requests are `(tenant, id)`; the key is the tenant.
type Req = (&'static str, u32);

fn layer(limit: usize) -> ConcurrencyLimitLayer<&'static str, fn(&Req) -> &'static str> {
    ConcurrencyLimitLayer::new(limit, (|r: &Req| r.0) as fn(&Req) -> &'static str)
        .retry_after(Duration::from_millis(250))
}

fn shed_of(error: BoxError) -> Shed {
    Shed::find(error.as_ref()).cloned().expect("a Shed error")
}

#[tokio::test(start_paused = true)]
async fn over_the_limit_is_shed_per_key_and_slots_come_back_on_completion() {
    let (mock, mut handle) = mock::pair::<Req, &'static str>();
    let mut service = layer(2).layer(mock);

    let a1 = service.ready().await.unwrap().call(("alice", 1));
    let a2 = service.ready().await.unwrap().call(("alice", 2));
    let a3 = service.ready().await.unwrap().call(("alice", 3));
    let shed = shed_of(a3.await.unwrap_err());
    assert_eq!(shed.reason(), &ShedReason::ConcurrencyLimit { limit: 2 });
    assert_eq!(shed.retry_after(), Duration::from_millis(250));
    assert_eq!(service.in_flight(&"alice"), 2);

    // Another key has its own slots.
    let b1 = service.ready().await.unwrap().call(("bob", 1));
    assert_eq!(service.in_flight(&"bob"), 1);

    // The inner service saw exactly the admitted requests.
    for expected in [("alice", 1), ("alice", 2), ("bob", 1)] {
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(request, expected);
        send.send_response("ok");
    }
    assert_eq!(a1.await.unwrap(), "ok");
    assert_eq!(
        service.in_flight(&"alice"),
        1,
        "a completed request frees its slot"
    );
    let a4 = service.ready().await.unwrap().call(("alice", 4));
    assert_eq!(service.in_flight(&"alice"), 2);
    let (_, send) = handle.next_request().await.unwrap();
    send.send_response("ok");
    a4.await.unwrap();
    a2.await.unwrap();
    b1.await.unwrap();
    assert_eq!(service.in_flight(&"alice"), 0);
    assert_eq!(service.in_flight(&"bob"), 0);
}

#[tokio::test(start_paused = true)]
async fn an_inner_error_frees_the_slot() {
    let (mock, mut handle) = mock::pair::<Req, &'static str>();
    let mut service = layer(1).layer(mock);
    let call = service.ready().await.unwrap().call(("t", 1));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error("upstream reset");
    let error = call.await.unwrap_err();
    assert_eq!(error.to_string(), "upstream reset");
    assert!(
        Shed::find(error.as_ref()).is_none(),
        "an inner error is not a Shed"
    );
    assert_eq!(service.in_flight(&"t"), 0);
    let again = service.ready().await.unwrap().call(("t", 2));
    assert_eq!(service.in_flight(&"t"), 1);
    drop(again);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_response_future_frees_the_slot() {
    let (mock, _handle) = mock::pair::<Req, &'static str>();
    let mut service = layer(1).layer(mock);
    let call = service.ready().await.unwrap().call(("t", 1));
    assert!(
        service.ready().await.unwrap().call(("t", 2)).await.is_err(),
        "full while the first is in flight"
    );
    // The client goes away: the future is dropped mid-flight.
    let sleeper =
        tokio::spawn(async move { tokio::time::timeout(Duration::from_secs(30), call).await });
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert!(sleeper.await.unwrap().is_err(), "timed out and dropped");
    assert_eq!(service.in_flight(&"t"), 0);
}

#[tokio::test(start_paused = true)]
async fn services_of_one_layer_share_the_counts() {
    let layer = layer(1);
    let (mock_a, _ha) = mock::pair::<Req, &'static str>();
    let (mock_b, _hb) = mock::pair::<Req, &'static str>();
    let mut first = layer.layer(mock_a);
    let mut second = layer.layer(mock_b);
    let held = first.ready().await.unwrap().call(("t", 1));
    let refused = second.ready().await.unwrap().call(("t", 2)).await;
    assert!(matches!(
        shed_of(refused.unwrap_err()).reason(),
        ShedReason::ConcurrencyLimit { .. }
    ));
    drop(held);
    assert_eq!(second.in_flight(&"t"), 0);
}

#[derive(Debug, Clone)]
enum Step {
    Start(u8),
    Finish(usize),
    Fail(usize),
    Cancel(usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            (0u8..3).prop_map(Step::Start),
            any::<usize>().prop_map(Step::Finish),
            any::<usize>().prop_map(Step::Fail),
            any::<usize>().prop_map(Step::Cancel),
        ],
        1..60,
    )
}

proptest! {
    #[test]
    fn admits_exactly_while_the_key_is_under_its_limit(limit in 1usize..4, steps in steps()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        runtime.block_on(async move {
            let keys = ["a", "b", "c"];
            let (mock, mut handle) = mock::pair::<Req, &'static str>();
            let mut service = layer(limit).layer(mock);
            let mut live = Vec::new();
            let mut model = [0usize; 3];
            for (n, step) in steps.into_iter().enumerate() {
                match step {
                    Step::Start(k) => {
                        let k = usize::from(k);
                        let call = service.ready().await.unwrap().call((keys[k], n as u32));
                        if model[k] < limit {
                            model[k] += 1;
                            let (_, send) = handle.next_request().await.unwrap();
                            live.push((k, call, send));
                        } else {
                            prop_assert!(Shed::find(call.await.unwrap_err().as_ref()).is_some());
                        }
                    }
                    Step::Finish(i) | Step::Fail(i) | Step::Cancel(i) if !live.is_empty() => {
                        let (k, call, send) = live.remove(i % live.len());
                        match step {
                            Step::Finish(_) => { send.send_response("ok"); call.await.unwrap(); }
                            Step::Fail(_) => { send.send_error("boom"); call.await.unwrap_err(); }
                            _ => drop(call),
                        }
                        model[k] -= 1;
                    }
                    _ => {}
                }
                for (k, key) in keys.iter().enumerate() {
                    prop_assert_eq!(service.in_flight(key), model[k]);
                }
            }
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn a_layer_from_yaml_settings_uses_them() {
    use tollgate_shed::concurrency::ConcurrencyConfig;
    let config: ConcurrencyConfig =
        serde_saphyr::from_str("max_in_flight: 1\nretry_after: 3s\n").unwrap();
    let layer = ConcurrencyLimitLayer::from_config(&config, |r: &Req| r.0).unwrap();
    let (mock, _handle) = mock::pair::<Req, &'static str>();
    let mut service = layer.layer(mock);
    let held = service.ready().await.unwrap().call(("t", 1));
    let shed = shed_of(
        service
            .ready()
            .await
            .unwrap()
            .call(("t", 2))
            .await
            .unwrap_err(),
    );
    assert_eq!(shed.retry_after(), Duration::from_secs(3));
    drop(held);

    let zero: ConcurrencyConfig = serde_saphyr::from_str("max_in_flight: 0\n").unwrap();
    assert_eq!(
        ConcurrencyLimitLayer::from_config(&zero, |r: &Req| r.0)
            .unwrap_err()
            .to_string(),
        "max_in_flight: must be at least 1"
    );
    assert!(
        serde_saphyr::from_str::<ConcurrencyConfig>("max_in_flight: 1\nretry_after: later\n")
            .is_err()
    );
}
