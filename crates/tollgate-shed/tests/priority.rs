//! Priority shedding: the admission rule, the header, and slots coming back.

use std::time::Duration;

use http::Request;
use proptest::prelude::*;
use tollgate_shed::priority::{
    Priority, PriorityConfig, PriorityLayer, PriorityShed, ResponseFuture,
};
use tollgate_shed::{Shed, ShedReason};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

type Mock = mock::Mock<Request<()>, &'static str>;
type Call = ResponseFuture<mock::future::ResponseFuture<&'static str>>;

/// Calls once with the given class (the service is always ready) and returns the pending response.
async fn admit(service: &mut PriorityShed<Mock>, class: Option<&str>) -> Call {
    service.ready().await.unwrap().call(request(class))
}

fn request(class: Option<&str>) -> Request<()> {
    let mut builder = Request::builder().uri("/");
    if let Some(class) = class {
        builder = builder.header("x-priority", class);
    }
    builder.body(()).unwrap()
}

fn config(max: usize, critical: u32, default: u32) -> PriorityConfig {
    PriorityConfig {
        critical_reserved_percent: critical,
        default_reserved_percent: default,
        ..PriorityConfig::new(max)
    }
}

#[tokio::test(start_paused = true)]
async fn reserved_slots_go_only_to_critical_requests() {
    // N = 10, c = 20 %, d = 30 %: sheddable up to 5, default up to 8, critical up to 10.
    let layer = PriorityLayer::new(&config(10, 20, 30)).unwrap();
    let (mock, _handle) = mock::pair::<Request<()>, &'static str>();
    let mut service = layer.layer(mock);
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(admit(&mut service, Some("sheddable")).await);
    }
    let refused = admit(&mut service, Some("sheddable"))
        .await
        .await
        .unwrap_err();
    let shed = Shed::find(refused.as_ref()).unwrap().clone();
    assert_eq!(
        shed.reason(),
        &ShedReason::PriorityCapacity {
            priority: Priority::Sheddable,
            limit: 5
        }
    );
    assert_eq!(shed.retry_after(), Duration::from_secs(1));
    for _ in 0..3 {
        held.push(admit(&mut service, None).await);
    }
    assert_eq!(layer.in_flight(), 8);
    assert!(admit(&mut service, Some("default")).await.await.is_err());
    assert!(admit(&mut service, Some("sheddable")).await.await.is_err());
    for _ in 0..2 {
        held.push(admit(&mut service, Some("critical")).await);
    }
    assert_eq!(layer.in_flight(), 10);
    let refused = admit(&mut service, Some("critical"))
        .await
        .await
        .unwrap_err();
    assert_eq!(
        Shed::find(refused.as_ref()).unwrap().reason(),
        &ShedReason::PriorityCapacity {
            priority: Priority::Critical,
            limit: 10
        }
    );
    // Dropping (cancelling) frees the slots for everyone again.
    held.truncate(4);
    assert_eq!(layer.in_flight(), 4);
    held.push(admit(&mut service, Some("sheddable")).await);
    assert_eq!(layer.in_flight(), 5);
}

#[tokio::test(start_paused = true)]
async fn completion_and_inner_errors_free_slots() {
    let layer = PriorityLayer::new(&config(2, 50, 0)).unwrap();
    let (mock, mut handle) = mock::pair::<Request<()>, &'static str>();
    let mut service = layer.layer(mock);
    let ok = service.ready().await.unwrap().call(request(None));
    let (_, send) = handle.next_request().await.unwrap();
    assert!(
        service
            .ready()
            .await
            .unwrap()
            .call(request(None))
            .await
            .is_err()
    );
    send.send_response("done");
    assert_eq!(ok.await.unwrap(), "done");
    assert_eq!(layer.in_flight(), 0);

    let failing = service.ready().await.unwrap().call(request(None));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error("connect refused");
    assert!(failing.await.is_err());
    assert_eq!(layer.in_flight(), 0);
}

#[test]
fn the_header_names_the_class_and_anything_else_is_default() {
    let class = |v: &str| Priority::from_header(Some(&http::HeaderValue::from_str(v).unwrap()));
    assert_eq!(class("critical"), Priority::Critical);
    assert_eq!(class("CRITICAL"), Priority::Critical);
    assert_eq!(class("Sheddable"), Priority::Sheddable);
    assert_eq!(class("default"), Priority::Default);
    assert_eq!(class("urgent!!"), Priority::Default);
    assert_eq!(class(""), Priority::Default);
    assert_eq!(Priority::from_header(None), Priority::Default);
}

#[tokio::test(start_paused = true)]
async fn a_custom_header_is_read() {
    // N = 5, c = 20 %, d = 20 %: default requests stop at 4 in flight.
    let layer = PriorityLayer::new(&PriorityConfig {
        header: "x-criticality".into(),
        ..config(5, 20, 20)
    })
    .unwrap();
    let (mock, _handle) = mock::pair::<Request<()>, &'static str>();
    let mut service = layer.layer(mock);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(service.ready().await.unwrap().call(request(None)));
    }
    // The class in the wrong header does not count: this one is a default request.
    let wrong_header = service
        .ready()
        .await
        .unwrap()
        .call(request(Some("critical")));
    assert!(wrong_header.await.is_err());
    let right_header = Request::builder()
        .header("x-criticality", "critical")
        .body(())
        .unwrap();
    held.push(service.ready().await.unwrap().call(right_header));
    assert_eq!(layer.in_flight(), 5);
    drop(held);
    assert_eq!(layer.in_flight(), 0);
}

#[test]
fn bad_settings_name_the_field() {
    let error = |c: PriorityConfig| PriorityLayer::new(&c).unwrap_err().to_string();
    assert_eq!(
        error(config(0, 20, 20)),
        "max_in_flight: must be at least 1"
    );
    assert_eq!(
        error(config(10, 120, 0)),
        "critical_reserved_percent: is a percentage, 0 to 100, got 120"
    );
    assert_eq!(
        error(config(1, 20, 0)),
        "critical_reserved_percent: 20% of max_in_flight 1 leaves no slot for default requests"
    );
    assert!(error(config(10, 50, 50)).starts_with("default_reserved_percent:"));
    assert!(
        error(PriorityConfig {
            header: "bad header".into(),
            ..config(10, 20, 20)
        })
        .starts_with("header: `bad header` is not a valid header name")
    );
}

#[test]
fn config_reads_from_yaml_with_defaults() {
    let config: PriorityConfig =
        serde_saphyr::from_str("max_in_flight: 100\nretry_after: 2s\n").unwrap();
    assert_eq!(config.header, "x-priority");
    assert_eq!(config.critical_reserved_percent, 20);
    assert_eq!(config.default_reserved_percent, 20);
    assert_eq!(config.retry_after, Duration::from_secs(2));
    assert!(serde_saphyr::from_str::<PriorityConfig>("max_in_flight: 1\nreserve: 3\n").is_err());
}

proptest! {
    #[test]
    fn admission_follows_the_documented_rule(
        max in 1usize..40,
        critical in 0u32..60,
        default in 0u32..40,
        classes in proptest::collection::vec(0u8..3, 1..80),
    ) {
        let config = config(max, critical, default);
        let reserve = |p: u32| (max * p as usize).div_ceil(100);
        // A config is refused exactly when its reserves leave no slot for sheddable requests.
        let leaves_a_slot = reserve(critical) + reserve(default) < max;
        let built = PriorityLayer::new(&config);
        prop_assert_eq!(built.is_ok(), leaves_a_slot, "{:?}", built.as_ref().err());
        prop_assume!(leaves_a_slot);
        let layer = built.expect("checked above");
        let limits = [max - reserve(critical) - reserve(default), max - reserve(critical), max];
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        runtime.block_on(async move {
            let (mock, _handle) = mock::pair::<Request<()>, &'static str>();
            let mut service = layer.layer(mock);
            let mut held = Vec::new();
            for class in classes {
                let name = ["sheddable", "default", "critical"][usize::from(class)];
                let before = layer.in_flight();
                let call = service.ready().await.unwrap().call(request(Some(name)));
                if before < limits[usize::from(class)] {
                    prop_assert_eq!(layer.in_flight(), before + 1);
                    held.push(call);
                } else {
                    prop_assert!(call.await.is_err());
                    prop_assert_eq!(layer.in_flight(), before);
                }
            }
            drop(held);
            prop_assert_eq!(layer.in_flight(), 0);
            Ok(())
        })?;
    }
}
