//! The client layer on tokio's paused time, against in-process servers whose answers each test scripts:
//! never early, jitter bounds, the retry budget, the breaker, pacing near 0, adaptive throttling, and
//! the same retries as a `tower::retry::Policy`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use parking_lot::Mutex;
use tollgate_client::{
    BackoffLayer, ClientError, ClientPolicy, ExponentialBackoff, RetryJitter, RetryPolicy,
    TokioClock,
};
use tollgate_core::breaker::BreakerPolicy;
use tollgate_core::{Clock, Timestamp};
use tower::retry::RetryLayer;
use tower::retry::budget::TpsBudget;
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};

type Server = BoxCloneService<Request<String>, Response<String>, Infallible>;

/// What the server saw: the arrival time of each request (since the test's clock started).
#[derive(Clone, Default)]
struct Arrivals(Arc<Mutex<Vec<Duration>>>);

impl Arrivals {
    fn times(&self) -> Vec<Duration> {
        self.0.lock().clone()
    }
}

/// A server that answers request number `n` (from 0), arriving at `at`, with `answer(n, at)`.
fn server(
    clock: TokioClock,
    arrivals: &Arrivals,
    answer: impl Fn(usize, Duration) -> Response<String> + Send + Sync + 'static,
) -> Server {
    let log = arrivals.clone();
    let answer = Arc::new(answer);
    BoxCloneService::new(tower::service_fn(move |_request: Request<String>| {
        let at = clock.now().saturating_since(Timestamp::EPOCH);
        let n = {
            let mut times = log.0.lock();
            times.push(at);
            times.len() - 1
        };
        let response = answer(n, at);
        async move { Ok::<_, Infallible>(response) }
    }))
}

/// A server that refuses the first request with `Retry-After: retry_after` (seconds) and accepts the rest.
fn refuses_once(clock: TokioClock, arrivals: &Arrivals, retry_after: &'static str) -> Server {
    server(clock, arrivals, move |n, _| match n {
        0 => reply(429, &[("retry-after", retry_after.into())]),
        _ => reply(200, &[]),
    })
}

fn reply(status: u16, headers: &[(&str, String)]) -> Response<String> {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    builder.body(String::new()).unwrap()
}

fn policy(clock: TokioClock, seed: u64) -> ClientPolicy {
    ClientPolicy::default()
        .with_clock(Arc::new(clock))
        .with_seed(seed)
        .with_adaptive(None)
}

fn get() -> Request<String> {
    Request::get("http://test/").body(String::new()).unwrap()
}

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// The gap between a first try refused with `Retry-After: 2` and its retry, for a client with `jitter`.
async fn retry_gap(jitter: RetryJitter, seed: u64) -> Duration {
    let clock = TokioClock::new();
    let arrivals = Arrivals::default();
    let srv = refuses_once(clock, &arrivals, "2");
    let client = BackoffLayer::new(policy(clock, seed).with_jitter(jitter)).layer(srv);
    let response = client.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let times = arrivals.times();
    assert_eq!(times.len(), 2);
    times[1] - times[0]
}

#[tokio::test(start_paused = true)]
async fn a_retry_never_leaves_before_retry_after_and_at_most_twice_it() {
    for seed in 0..20 {
        let gap = retry_gap(RetryJitter::default(), seed).await;
        assert!(gap >= 2 * SEC && gap <= 4 * SEC, "seed {seed}: {gap:?}");
    }
    // The additive jitter, as an option: never early either, at most one jitter cap later.
    let backoff = ExponentialBackoff::default();
    for seed in 0..20 {
        let gap = retry_gap(RetryJitter::additive(backoff), seed).await;
        assert!(
            gap >= 2 * SEC && gap <= 2 * SEC + backoff.cap(0),
            "seed {seed}: {gap:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn clients_told_the_same_retry_after_come_back_over_the_wait_not_as_a_wave() {
    let clock = TokioClock::new();
    let arrivals = Arrivals::default();
    // Every client's first request is refused with Retry-After: 10; its retry passes.
    let srv = server(clock, &arrivals, |_, at| {
        if at < SEC {
            reply(429, &[("retry-after", "10".into())])
        } else {
            reply(200, &[])
        }
    });
    let mut tasks = Vec::new();
    for seed in 0..50 {
        let client = BackoffLayer::new(policy(clock, seed)).layer(srv.clone());
        tasks.push(tokio::spawn(client.oneshot(get())));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    let retries: Vec<Duration> = arrivals.times().into_iter().filter(|t| *t >= SEC).collect();
    assert_eq!(retries.len(), 50);
    // None before the wait, none after twice it ...
    assert!(retries.iter().all(|t| *t >= 10 * SEC && *t <= 20 * SEC));
    // ... and spread over it, not a second wave: no second of the ten
    // holds more than a quarter of them (a tenth on average).
    let mut seconds = [0usize; 11];
    for t in &retries {
        seconds[(*t - 10 * SEC).as_secs() as usize] += 1;
    }
    assert!(seconds.iter().all(|n| *n <= 12), "{seconds:?}");
}

#[tokio::test(start_paused = true)]
async fn retries_stop_when_the_budget_is_spent() {
    // Millisecond backoffs, so every retry falls inside the budget's window.
    let quick = ExponentialBackoff::new(MS, MS);
    for (ttl_secs, reserve) in [(10, 10), (1, 1)] {
        let clock = TokioClock::new();
        let arrivals = Arrivals::default();
        let srv = server(clock, &arrivals, |_, _| reply(429, &[]));
        // `reserve` retries (1 per second over the ttl), none earned by first tries.
        let budget = Arc::new(TpsBudget::new(Duration::from_secs(ttl_secs), 1, 0.0));
        let client = BackoffLayer::new(
            policy(clock, 1)
                .with_budget(budget)
                .with_jitter(RetryJitter::additive(quick))
                .with_max_retries(10),
        )
        .layer(srv);
        for _ in 0..5 {
            let response = client.clone().oneshot(get()).await.unwrap();
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        }
        assert_eq!(
            arrivals.times().len(),
            5 + reserve,
            "5 first tries plus the budget's retries, not 10 retries each"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn consecutive_503s_open_the_breaker_and_it_refuses_until_a_probe() {
    let clock = TokioClock::new();
    let arrivals = Arrivals::default();
    let srv = server(clock, &arrivals, |n, _| {
        if n < 3 {
            reply(503, &[])
        } else {
            reply(200, &[])
        }
    });
    let mut client = BackoffLayer::new(
        policy(clock, 3)
            .with_breaker(BreakerPolicy {
                failure_threshold: 3,
                open_duration: 5 * SEC,
                max_open_duration: 5 * SEC,
                half_open_probes: 1,
            })
            .with_max_retries(10),
    )
    .layer(srv);
    // Three 503s (the first try and two retries) open it: the third 503 comes back.
    let response = client.ready().await.unwrap().call(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(arrivals.times().len(), 3);
    match client.ready().await.unwrap().call(get()).await {
        Err(ClientError::CircuitOpen { retry_in }) => assert!(retry_in <= 5 * SEC),
        other => panic!("expected the open breaker, got {other:?}"),
    }
    assert_eq!(arrivals.times().len(), 3, "nothing sent while open");
    tokio::time::sleep(5 * SEC).await;
    let response = client.ready().await.unwrap().call(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "the probe closes it");
}

/// A fixed window of `limit` per second on the test clock, with the IETF `RateLimit` field.
fn fixed_window(limit: u64) -> impl Fn(usize, Duration) -> Response<String> + Send + Sync {
    let used = Arc::new(Mutex::new((0u64, 0u64)));
    move |_, at| {
        let window = at.as_secs();
        let mut used = used.lock();
        if used.0 != window {
            *used = (window, 0);
        }
        let reset = (Duration::from_secs(window + 1) - at).as_secs_f64().ceil() as u64;
        if used.1 >= limit {
            return reply(429, &[("retry-after", reset.to_string())]);
        }
        used.1 += 1;
        let item = format!("\"w\";r={};t={reset}", limit - used.1);
        reply(200, &[("ratelimit", item)])
    }
}

#[tokio::test(start_paused = true)]
async fn near_zero_it_spaces_requests_and_is_never_refused() {
    let clock = TokioClock::new();
    let arrivals = Arrivals::default();
    let srv = server(clock, &arrivals, fixed_window(5));
    let client = BackoffLayer::new(policy(clock, 4)).layer(srv);
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(client.clone().oneshot(get()).await.unwrap().status());
    }
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(arrivals.times().len(), 20, "no retries were needed");
    // Never more than 5 in any one-second window. `t` is whole seconds rounded
    // up, so a window's last request waits for a reset up to 1 s late: about
    // 1.75 s per window of 5, not 1 s.
    for second in 0..10 {
        let n = arrivals
            .times()
            .iter()
            .filter(|t| t.as_secs() == second)
            .count();
        assert!(n <= 5, "{n} in second {second}");
    }
    assert!(*arrivals.times().last().unwrap() < 8 * SEC);
}

#[tokio::test(start_paused = true)]
async fn adaptive_throttling_sends_about_k_times_what_is_accepted() {
    for k in [2.0, 3.0] {
        let clock = TokioClock::new();
        let arrivals = Arrivals::default();
        // The backend accepts 10 requests per second and refuses the rest, with no hints.
        let accepted = Arc::new(Mutex::new(Vec::<Duration>::new()));
        let log = Arc::clone(&accepted);
        let srv = server(clock, &arrivals, move |_, at| {
            let mut log = log.lock();
            if log.last().is_none_or(|last| at >= *last + 100 * MS) {
                log.push(at);
                reply(200, &[])
            } else {
                reply(429, &[])
            }
        });
        let client = BackoffLayer::new(
            policy(clock, 5)
                .with_adaptive(Some((k, 10 * SEC)))
                .with_max_retries(0),
        )
        .layer(srv);
        // The application tries 100 requests per second for 60 s.
        let (mut throttled, mut p_seen) = (0, 0.0f64);
        for _ in 0..6_000 {
            match client.clone().oneshot(get()).await {
                Ok(_) => {}
                Err(ClientError::Throttled { probability }) => {
                    throttled += 1;
                    p_seen = p_seen.max(probability);
                }
                Err(other) => panic!("{other:?}"),
            }
            tokio::time::sleep(10 * MS).await;
        }
        let late = |times: &[Duration]| times.iter().filter(|t| **t >= 30 * SEC).count() as f64;
        let sent = late(&arrivals.times()) / 30.0;
        let accepts = late(&accepted.lock()) / 30.0;
        // p → 1 − K·A/R: the backend sees about K times its accept rate.
        assert!(
            (sent / accepts - k).abs() < 0.15 * k,
            "K={k}: {sent}/s sent, {accepts}/s accepted"
        );
        assert!(throttled > 3_000 && p_seen > 0.5, "{throttled} {p_seen}");
        let p = client.rejection_probability();
        let expected = 1.0 - k * 10.0 / 100.0;
        assert!(
            (p - expected).abs() < 0.1,
            "K={k}: p = {p}, book {expected}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_answered_by_a_retry_does_not_make_the_throttle_reject() {
    for seed in 0..20 {
        let clock = TokioClock::new();
        let arrivals = Arrivals::default();
        let srv = refuses_once(clock, &arrivals, "1");
        let client =
            BackoffLayer::new(policy(clock, seed).with_adaptive(Some((2.0, 10 * SEC)))).layer(srv);
        for _ in 0..5 {
            let response = client.clone().oneshot(get()).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "seed {seed}");
        }
        assert_eq!(client.rejection_probability(), 0.0);
        assert_eq!(arrivals.times().len(), 6);
    }
}

#[tokio::test(start_paused = true)]
async fn as_a_tower_retry_policy_it_waits_the_same_and_stops_at_max_retries() {
    for seed in 0..10 {
        let clock = TokioClock::new();
        let arrivals = Arrivals::default();
        let srv = refuses_once(clock, &arrivals, "2");
        let retry = RetryLayer::new(RetryPolicy::new(policy(clock, seed)));
        let response = retry.layer(srv).oneshot(get()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let times = arrivals.times();
        assert_eq!(times.len(), 2);
        let gap = times[1] - times[0];
        assert!(gap >= 2 * SEC && gap <= 4 * SEC, "seed {seed}: {gap:?}");
    }
    // Refused every time: one try and `max_retries` retries, then the 429 itself.
    let clock = TokioClock::new();
    let arrivals = Arrivals::default();
    let srv = server(clock, &arrivals, |_, _| {
        reply(429, &[("retry-after", "1".into())])
    });
    let retry = RetryLayer::new(RetryPolicy::new(policy(clock, 1).with_max_retries(2)));
    let response = retry.layer(srv).oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let times = arrivals.times();
    assert_eq!(times.len(), 3);
    assert!(times.windows(2).all(|w| w[1] - w[0] >= SEC), "{times:?}");
}
