//! The priority shedder's waiting line on tokio's paused time: waiting instead of a 503, order by class and age, bounds, deadlines, and no starvation.

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use proptest::prelude::*;
use tokio::task::JoinHandle;
use tollgate_core::{Clock, Timestamp};
use tollgate_shed::priority::{PriorityConfig, PriorityLayer, QueueConfig};
use tollgate_shed::{BoxError, Shed, ShedReason};
use tower::{Layer, Service, ServiceExt};

/// A clock that reads tokio's (paused) time, so the line and the test agree on it.
struct TokioClock(tokio::time::Instant);

impl TokioClock {
    #[expect(
        clippy::disallowed_methods,
        reason = "the test's clock is tokio's paused time, which the test itself drives"
    )]
    fn start() -> Arc<Self> {
        Arc::new(TokioClock(tokio::time::Instant::now()))
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000 + self.0.elapsed().as_nanos() as u64)
    }
}

/// What a finished request reports: its name and when it completed, in ms since the start.
type Outcome = Result<(String, u64), ShedReason>;

struct Bench {
    clock: Arc<TokioClock>,
    layer: PriorityLayer,
    service_time: Duration,
}

impl Bench {
    fn new(config: &PriorityConfig, service_time: Duration) -> Self {
        let clock = TokioClock::start();
        let layer = PriorityLayer::with_clock(config, clock.clone()).unwrap();
        Bench {
            clock,
            layer,
            service_time,
        }
    }

    fn ms(&self) -> u64 {
        (self.clock.now().as_nanos() - 1_000_000_000) / 1_000_000
    }

    /// Sends one request of `class` named `name`; the upstream takes `service_time`.
    async fn send(&self, name: &str, class: &str) -> JoinHandle<Outcome> {
        let service_time = self.service_time;
        let upstream = tower::service_fn(move |request: Request<()>| async move {
            tokio::time::sleep(service_time).await;
            let name = request.headers()["x-name"].to_str().unwrap().to_owned();
            Ok::<_, BoxError>(name)
        });
        let mut service = self.layer.layer(upstream);
        let request = Request::builder()
            .header("x-priority", class)
            .header("x-name", name)
            .body(())
            .unwrap();
        let call = service.ready().await.unwrap().call(request);
        let clock = Arc::clone(&self.clock);
        // Let the call enter the line before the next one is sent.
        let handle = tokio::spawn(async move {
            let done = call.await;
            let at = (clock.now().as_nanos() - 1_000_000_000) / 1_000_000;
            done.map(|name| (name, at)).map_err(|error| {
                Shed::find(error.as_ref())
                    .expect("only shed errors")
                    .reason()
                    .clone()
            })
        });
        tokio::task::yield_now().await;
        handle
    }
}

fn config(max_in_flight: usize, queue: QueueConfig) -> PriorityConfig {
    PriorityConfig {
        critical_reserved_percent: 0,
        default_reserved_percent: 0,
        queue: Some(queue),
        ..PriorityConfig::new(max_in_flight)
    }
}

fn queue(max_queued: usize, max_wait_ms: u64, aging_ms: u64) -> QueueConfig {
    QueueConfig {
        max_queued,
        max_wait: Duration::from_millis(max_wait_ms),
        aging: Duration::from_millis(aging_ms),
    }
}

async fn finish(handles: Vec<JoinHandle<Outcome>>) -> Vec<Outcome> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_request_over_capacity_waits_its_turn_instead_of_a_503() {
    let bench = Bench::new(
        &config(1, queue(4, 10_000, 1_000)),
        Duration::from_millis(100),
    );
    let mut handles = Vec::new();
    for name in ["a", "b", "c"] {
        handles.push(bench.send(name, "default").await);
    }
    assert_eq!(bench.layer.queued(), 2);
    assert_eq!(
        finish(handles).await,
        [
            Ok(("a".to_owned(), 100)),
            Ok(("b".to_owned(), 200)),
            Ok(("c".to_owned(), 300))
        ]
    );
    assert_eq!(bench.layer.queued(), 0);
    assert_eq!(bench.layer.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_line_serves_classes_in_order_and_age_raises_a_waiter() {
    // aging 50 ms: a sheddable waiter that arrived at 0 ranks with a critical one arriving at 100 ms.
    let bench = Bench::new(&config(1, queue(8, 10_000, 50)), Duration::from_millis(200));
    let mut handles = vec![bench.send("busy", "critical").await];
    handles.push(bench.send("sheddable", "sheddable").await);
    handles.push(bench.send("default", "default").await);
    tokio::time::sleep(Duration::from_millis(90)).await;
    handles.push(bench.send("critical at 90", "critical").await);
    tokio::time::sleep(Duration::from_millis(60)).await;
    handles.push(bench.send("critical at 150", "critical").await);
    let mut done: Vec<(u64, String)> = finish(handles)
        .await
        .into_iter()
        .map(|o| o.map(|(name, at)| (at, name)).unwrap())
        .collect();
    done.sort();
    let order: Vec<String> = done.into_iter().map(|(_, name)| name).collect();
    // Keys (arrival + (2 − class) × 50): default 50, critical@90 90, sheddable 100, critical@150 150.
    assert_eq!(
        order,
        [
            "busy",
            "default",
            "critical at 90",
            "sheddable",
            "critical at 150"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_line_sheds_whoever_would_go_last_and_a_deadline_sheds_a_waiter() {
    let bench = Bench::new(
        &config(1, queue(1, 300, 1_000)),
        Duration::from_millis(1_000),
    );
    let busy = bench.send("busy", "default").await;
    let waiter = bench.send("waiter", "default").await;
    let later = bench.send("later", "default").await;
    assert_eq!(
        later.await.unwrap(),
        Err(ShedReason::QueueFull {
            priority: tollgate_shed::priority::Priority::Default,
            max_queued: 1
        })
    );
    let critical = bench.send("critical", "critical").await;
    assert_eq!(
        waiter.await.unwrap(),
        Err(ShedReason::QueueFull {
            priority: tollgate_shed::priority::Priority::Default,
            max_queued: 1
        }),
        "the critical request goes first, so the default one leaves the full line"
    );
    assert_eq!(
        critical.await.unwrap(),
        Err(ShedReason::QueueTimeout {
            priority: tollgate_shed::priority::Priority::Critical,
            max_wait: Duration::from_millis(300)
        })
    );
    assert_eq!(bench.ms(), 300, "shed at its deadline, not later");
    assert_eq!(bench.layer.queued(), 0);
    assert_eq!(busy.await.unwrap(), Ok(("busy".to_owned(), 1_000)));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_the_line() {
    let bench = Bench::new(
        &config(1, queue(4, 10_000, 100)),
        Duration::from_millis(100),
    );
    let busy = bench.send("busy", "default").await;
    let quitter = bench.send("quitter", "default").await;
    assert_eq!(bench.layer.queued(), 1);
    quitter.abort();
    let _ = quitter.await;
    assert_eq!(bench.layer.queued(), 0);
    let next = bench.send("next", "default").await;
    assert_eq!(busy.await.unwrap(), Ok(("busy".to_owned(), 100)));
    assert_eq!(next.await.unwrap(), Ok(("next".to_owned(), 200)));
    assert_eq!(bench.layer.in_flight(), 0);
}

/// A steady critical load at exactly the capacity, with `backlog` critical
/// requests always waiting, and one sheddable request sent at `sent_ms`:
/// when it is served (ms after it was sent), or why it was not by `horizon_ms`.
async fn sheddable_under_critical_load(
    max_in_flight: usize,
    service_ms: u64,
    aging_ms: u64,
    backlog: usize,
    sent_ms: u64,
    horizon_ms: u64,
) -> Result<u64, ShedReason> {
    let bench = Bench::new(
        &config(max_in_flight, queue(backlog + 16, 60_000, aging_ms)),
        Duration::from_millis(service_ms),
    );
    let mut handles = Vec::new();
    for i in 0..max_in_flight + backlog {
        handles.push(bench.send(&format!("c{i}"), "critical").await);
    }
    // One critical request per slot release: arrivals equal the capacity.
    let step = Duration::from_micros(service_ms * 1_000 / max_in_flight as u64);
    let horizon = horizon_ms;
    let mut sheddable = None;
    let mut sent_at = 0;
    while bench.ms() < horizon {
        tokio::time::sleep(step).await;
        if sheddable.is_none() && bench.ms() >= sent_ms {
            sent_at = bench.ms();
            sheddable = Some(bench.send("sheddable", "sheddable").await);
        }
        handles.push(bench.send("c", "critical").await);
        handles.retain(|h| !h.is_finished());
    }
    let sheddable = sheddable.expect("sent before the horizon");
    if !sheddable.is_finished() {
        return Err(ShedReason::QueueTimeout {
            priority: tollgate_shed::priority::Priority::Sheddable,
            max_wait: Duration::from_millis(horizon - sent_ms),
        });
    }
    sheddable.await.unwrap().map(|(_, at)| at - sent_at)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// No starvation: under a steady critical load that keeps every slot
    /// busy and `backlog` critical requests waiting, a sheddable request is
    /// served within 2·aging + (backlog + 3)·service/N + service: after
    /// 2·aging nothing that arrives goes before it, and what is ahead of it
    /// then (the backlog, the critical requests of those 2·aging, one in
    /// transit, one release period) leaves at N per service time.
    #[test]
    fn a_sheddable_request_is_served_within_the_aging_bound(
        max_in_flight in 1usize..4,
        service_ms in 10u64..100,
        aging_ms in 10u64..300,
        backlog in 0usize..6,
        sent_ms in 0u64..500,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let bound = 2 * aging_ms
            + (backlog as u64 + 3) * service_ms / max_in_flight as u64
            + service_ms;
        let waited = runtime.block_on(sheddable_under_critical_load(
            max_in_flight, service_ms, aging_ms, backlog, sent_ms, sent_ms + 2 * bound,
        ));
        let waited = waited.map_err(|e| TestCaseError::fail(format!("shed: {e:?}")))?;
        prop_assert!(waited <= bound, "waited {waited} ms, bound {bound} ms");
    }
}

#[tokio::test(start_paused = true)]
async fn without_aging_the_same_load_starves_the_sheddable_request() {
    // The property above with aging of an hour: the sheddable request is
    // never served (it waits, or is pushed out of the full line by critical ones).
    let outcome = sheddable_under_critical_load(2, 50, 3_600_000, 2, 100, 3_000).await;
    assert!(outcome.is_err(), "{outcome:?}");
}
