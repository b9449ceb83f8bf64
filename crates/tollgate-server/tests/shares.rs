//! Engines sharing one real Redis in the shares mode (`shares: true`): never more than the limit under 256 requests in flight, a few Redis calls per thousand checks, serving through an outage within the shares held, back after a restart, and a leaving instance's share handed over at once (or after its TTL when the leave cannot reach Redis).
//!
//! Each engine is one instance with its own holder (its own
//! `RemoteStore`). Limits are per hour, so at most a few tokens refill
//! during a test: what passes is bounded by the burst plus that refill.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::{ManualClock, Timestamp};
use tollgate_protocol::rls::{Code, Descriptor, RateLimitRequest};
use tollgate_redis::RedisStore;
use tollgate_rules::{LoadOptions, RuleSet, load_sources};
use tollgate_server::store::{RemoteOptions, RemoteStore};
use tollgate_server::{Engine, EngineOptions};
use tollgate_testkit::budget::{BUDGET, Stopwatch, poll_until_async};
use tollgate_testkit::limits::exact_rate_limit;
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::redis_cluster::RedisCluster;

/// The algorithms the shares mode splits.
const SHARED: [&str; 2] = ["token_bucket", "gcra"];

/// One `shares: true` rule per algorithm, `limit` per hour, `on_store_error: deny`.
fn rules(limit: u64) -> Arc<RuleSet> {
    rules_per(limit, "hour")
}

/// One `shares: true` rule per algorithm, `limit` per `unit`, `on_store_error: deny`.
fn rules_per(limit: u64, unit: &str) -> Arc<RuleSet> {
    let mut yaml = String::from("domain: shares\ndescriptors:\n");
    for algorithm in SHARED {
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    on_store_error: deny\n    shares: true\n    rate_limit: {}\n",
            exact_rate_limit(limit, unit, algorithm)
        ));
    }
    let loaded = load_sources(
        [(Path::new("shares.yaml"), yaml.as_str())],
        LoadOptions::default(),
    );
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    Arc::new(loaded.rule_set)
}

fn request(key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "shares".to_owned(),
        descriptors: vec![Descriptor::new([(key, value)])],
        hits_addend: 0,
    }
}

/// `instances` engines on `url`, each its own instance.
async fn engines(url: &str, instances: u64, rules: &Arc<RuleSet>) -> Vec<Arc<Engine<ManualClock>>> {
    engines_with(url, instances, rules, RemoteOptions::default()).await
}

/// [`engines`] with `options`.
async fn engines_with(
    url: &str,
    instances: u64,
    rules: &Arc<RuleSet>,
    options: RemoteOptions,
) -> Vec<Arc<Engine<ManualClock>>> {
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    let mut out = Vec::new();
    for _ in 0..instances {
        let redis = RedisStore::connect(url, Duration::from_secs(2))
            .await
            .expect("Redis answers");
        let remote = RemoteStore::new(redis, options);
        out.push(Arc::new(Engine::with_remote(
            Arc::clone(rules),
            EngineOptions::default(),
            clock.clone(),
            remote,
        )));
    }
    out
}

async fn admitted(engine: &Engine<ManualClock>, request: &RateLimitRequest) -> bool {
    engine.decide(request).await.expect("valid").overall == Code::Ok
}

/// 64 callers per engine checking `request` for `lasting` (at most 2000
/// checks each: a key's shares follow demand measured over a fraction of a
/// second, so a key's first moments see only the newcomers' floor); (admitted, checks).
async fn load(
    engines: &[Arc<Engine<ManualClock>>],
    request: &RateLimitRequest,
    lasting: Duration,
) -> (u64, u64) {
    let passed = Arc::new(AtomicU64::new(0));
    let checks = Arc::new(AtomicU64::new(0));
    let watch = Arc::new(Stopwatch::start());
    let mut callers = Vec::new();
    for engine in engines {
        for _ in 0..64 {
            let (engine, request) = (Arc::clone(engine), request.clone());
            let (passed, checks, watch) =
                (Arc::clone(&passed), Arc::clone(&checks), Arc::clone(&watch));
            callers.push(tokio::spawn(async move {
                for _ in 0..2000 {
                    if watch.exceeded(lasting) {
                        break;
                    }
                    checks.fetch_add(1, Ordering::Relaxed);
                    if admitted(&engine, &request).await {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                    // A check decided from shares awaits nothing: let the
                    // holder's sync task run, as network I/O would.
                    tokio::task::yield_now().await;
                }
            }));
        }
    }
    for caller in callers {
        caller.await.expect("the caller finishes");
    }
    (
        passed.load(Ordering::Relaxed),
        checks.load(Ordering::Relaxed),
    )
}

/// 4 instances at `url`, 256 in flight, each shared algorithm with 2000 per hour.
async fn four_instances_on(url: &str) -> u64 {
    let limit = 2000;
    let rules = rules(limit);
    let engines = engines(url, 4, &rules).await;
    let mut all_checks = 0;
    for algorithm in SHARED {
        let watch = Stopwatch::start();
        let (passed, checks) = load(
            &engines,
            &request(algorithm, "hot"),
            Duration::from_millis(600),
        )
        .await;
        all_checks += checks;
        // An exact bucket full at the start admits at most the burst plus what refilled.
        let refilled = limit * watch.elapsed().as_secs().saturating_add(1) / 3600;
        assert!(
            passed <= limit + refilled,
            "{algorithm}: {passed} admitted for a limit of {limit} (+{refilled} refilled)"
        );
        assert!(
            passed >= limit - limit / 10,
            "{algorithm}: the shares admit most of the limit: {passed} of {limit}"
        );
        eprintln!("{algorithm}: {passed} of {limit} admitted in {checks} checks");
    }
    let decided: u64 = engines
        .iter()
        .map(|e| {
            let shares = e.remote().expect("Redis").shares().expect("connected");
            shares.counts().decided.load(Ordering::Relaxed)
        })
        .sum();
    assert!(decided > 0, "requests were decided from shares");
    all_checks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_in_the_shares_mode_admit_no_more_than_the_limit() {
    let redis = RedisServer::start();
    let before = redis.script_calls();
    let checks = four_instances_on(&redis.url()).await;
    let calls = redis.script_calls() - before;
    let per_check = calls as f64 / checks as f64;
    eprintln!("{calls} script calls, {per_check:.4} per check");
    assert!(per_check <= 0.05, "{per_check} Redis calls per check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_in_the_shares_mode_on_a_cluster_admit_no_more_than_the_limit() {
    let cluster = RedisCluster::start();
    four_instances_on(&cluster.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_serve_through_an_outage_new_keys_get_on_store_error_then_a_restart_resumes() {
    let mut redis = RedisServer::start();
    let rules = rules(1000);
    let engines = engines(&redis.url(), 1, &rules).await;
    let engine = &engines[0];
    let held = request("token_bucket", "held");
    for _ in 0..10 {
        assert!(admitted(engine, &held).await, "a lone instance has shares");
    }
    redis.kill();
    // Within the shares held (half the burst for a lone instance): decided locally.
    assert!(
        admitted(engine, &held).await,
        "shares serve while Redis is down"
    );
    // A key with no share yet cannot get one: on_store_error (deny) answers.
    let fresh = request("token_bucket", "fresh");
    assert!(!admitted(engine, &fresh).await, "no share without Redis");
    let remote = engine.remote().expect("Redis");
    assert!(remote.stats().fallback.load(Ordering::Relaxed) > 0);
    redis.restart();
    // The restarted Redis has no registration: the holder is told it lapsed,
    // drops its shares and registers again.
    let fresh = &fresh;
    let back = poll_until_async(BUDGET, || async move {
        admitted(engine, fresh).await.then_some(())
    })
    .await;
    assert!(back.is_some(), "the shares mode resumed after the restart");
}

/// 4 instances share a token bucket of 400/s; each reloads, one at a time,
/// to 100/s while 256 callers go on. Once every instance has the new
/// limit (and a sync interval has passed), what passes over any span
/// conforms to the new bucket: at most its burst plus its rate × the span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_lowering_a_limit_while_shares_are_held_admits_no_more_than_the_new_one() {
    let redis = RedisServer::start();
    let high = rules_per(400, "second");
    let mut fleet = engines(&redis.url(), 4, &high).await;
    let hot = request("token_bucket", "reload");
    let (before, _) = load(&fleet, &hot, Duration::from_millis(800)).await;
    assert!(before > 400, "the old limit was in use: {before}");
    let low = rules_per(100, "second");
    for engine in &mut fleet {
        *engine = Arc::new(engine.with_rules(Arc::clone(&low)));
        load(
            std::slice::from_ref(engine),
            &hot,
            Duration::from_millis(150),
        )
        .await;
    }
    // Every instance has the new limit: one more sync interval for the shrinks.
    load(&fleet, &hot, Duration::from_millis(200)).await;
    let watch = Stopwatch::start();
    let (after, _) = load(&fleet, &hot, Duration::from_secs(1)).await;
    let span = watch.elapsed().as_secs_f64();
    let bound = 100.0 + 100.0 * span;
    assert!(
        after as f64 <= bound,
        "{after} admitted in {span:.2}s after the reloads to 100/s (bound {bound:.0})"
    );
    assert!(after >= 50, "the new limit is used: {after}");
}

/// Two instances share a token bucket; one stops without a word (its
/// engine dropped: no release, as a SIGKILL). After its registration's
/// TTL the other holds the whole limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_share_returns_to_the_others_after_its_ttl() {
    let redis = RedisServer::start();
    let rules = rules_per(200, "second");
    let mut options = RemoteOptions::default();
    options.shares.holder.ttl = Duration::from_secs(1);
    options.shares.holder.ttl_margin = Duration::from_millis(100);
    options.shares.authority.ttl = Duration::from_secs(1);
    let mut fleet = engines_with(&redis.url(), 2, &rules, options).await;
    let hot = request("token_bucket", "killed");
    let key = rules
        .find("shares", &[("token_bucket", "killed")])
        .expect("the rule")
        .counter_key("shares", &[("token_bucket", "killed")], 0);
    load(&fleet, &hot, Duration::from_millis(600)).await;
    let survivor = Arc::clone(&fleet[1]);
    let whole = tollgate_core::share::Share::per_second(200, 200);
    let held = survivor
        .remote()
        .expect("Redis")
        .shares()
        .expect("connected")
        .in_force(&key);
    assert!(
        held.rate < whole.rate,
        "two busy instances split the key: {held:?}"
    );
    drop(fleet.remove(0));
    // Bounded: 30 rounds of 100 ms of demand.
    let watch = Stopwatch::start();
    let mut rounds = 0;
    while survivor
        .remote()
        .expect("Redis")
        .shares()
        .expect("connected")
        .in_force(&key)
        != whole
        && rounds < 30
    {
        load(
            std::slice::from_ref(&survivor),
            &hot,
            Duration::from_millis(100),
        )
        .await;
        rounds += 1;
    }
    let waited = watch.elapsed();
    assert_eq!(
        survivor
            .remote()
            .expect("Redis")
            .shares()
            .expect("connected")
            .in_force(&key),
        whole,
        "the whole limit after {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(800),
        "not before the TTL: {waited:?}"
    );
}

/// Two instances share a token bucket of 200/s; one shuts down gracefully
/// (it leaves: one call gives back its shares). The other holds the whole
/// limit after its next call or two, long before the registration's TTL
/// (10 s), and the two together never pass the bucket across the handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_instances_share_goes_to_the_others_at_their_next_call() {
    let redis = RedisServer::start();
    let rules = rules_per(200, "second");
    let options = RemoteOptions::default();
    let ttl = options.shares.authority.ttl;
    let fleet = engines_with(&redis.url(), 2, &rules, options).await;
    let hot = request("token_bucket", "leaving");
    let key = rules
        .find("shares", &[("token_bucket", "leaving")])
        .expect("the rule")
        .counter_key("shares", &[("token_bucket", "leaving")], 0);
    let books: Vec<_> = fleet
        .iter()
        .map(|e| e.remote().expect("Redis").shares().expect("connected"))
        .collect();
    let whole = tollgate_core::share::Share::per_second(200, 200);
    let watch = Stopwatch::start();
    let (mut passed, _) = load(&fleet, &hot, Duration::from_millis(600)).await;
    assert!(
        books[1].in_force(&key).rate < whole.rate,
        "two busy instances split the key: {:?}",
        books[1].in_force(&key)
    );
    let leaving = Arc::clone(&fleet[0]);
    let given_back = leaving
        .remote()
        .expect("Redis")
        .leave_shares()
        .await
        .expect("Redis answers the leave");
    assert_eq!(given_back, 1, "the one key held is given back");
    assert_eq!(books[0].in_force(&key), tollgate_core::share::Share::ZERO);
    // Bounded: 30 rounds of 50 ms of demand on the survivor.
    let handover = Stopwatch::start();
    let mut rounds = 0;
    while books[1].in_force(&key) != whole && rounds < 30 {
        passed += load(&fleet[1..], &hot, Duration::from_millis(50)).await.0;
        rounds += 1;
    }
    let took = handover.elapsed();
    assert_eq!(
        books[1].in_force(&key),
        whole,
        "the whole limit after {took:?}"
    );
    assert!(took < ttl / 4, "within a few calls, not the TTL: {took:?}");
    // The leaver decides nothing more from shares; the survivor goes on.
    passed += load(&fleet[1..], &hot, Duration::from_millis(300)).await.0;
    let span = watch.elapsed().as_secs_f64();
    let bound = 200.0 + 200.0 * span;
    assert!(
        passed as f64 <= bound,
        "{passed} admitted in {span:.2}s across the handover (an exact bucket: {bound:.0})"
    );
    eprintln!(
        "the survivor held the whole limit {took:?} after the leave; {passed} admitted in {span:.2}s"
    );
}

/// A leave that cannot reach Redis (hung: SIGSTOP) gives up within the
/// call timeout, and changes nothing: the other instance gets the leaver's
/// share once its registration lapses, as after a crash, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_that_cannot_reach_redis_gives_up_in_time_and_the_share_lapses() {
    let redis = RedisServer::start();
    let rules = rules_per(200, "second");
    let mut options = RemoteOptions::default();
    let ttl = Duration::from_secs(1);
    options.shares.holder.ttl = ttl;
    options.shares.holder.ttl_margin = Duration::from_millis(100);
    options.shares.authority.ttl = ttl;
    let call_timeout = options.shares.holder.call_timeout;
    let fleet = engines_with(&redis.url(), 2, &rules, options).await;
    let hot = request("token_bucket", "hung-leave");
    let key = rules
        .find("shares", &[("token_bucket", "hung-leave")])
        .expect("the rule")
        .counter_key("shares", &[("token_bucket", "hung-leave")], 0);
    let survivor = fleet[1]
        .remote()
        .expect("Redis")
        .shares()
        .expect("connected");
    let whole = tollgate_core::share::Share::per_second(200, 200);
    load(&fleet, &hot, Duration::from_millis(600)).await;
    assert!(survivor.in_force(&key).rate < whole.rate, "split");
    redis.signal("STOP");
    let leaving = Stopwatch::start();
    let left = fleet[0].remote().expect("Redis").leave_shares().await;
    let took = leaving.elapsed();
    redis.signal("CONT");
    assert!(left.is_err(), "a hung Redis took the leave: {left:?}");
    assert!(
        took < call_timeout + Duration::from_millis(250),
        "the leave gave up after {took:?} (call timeout {call_timeout:?})"
    );
    // The survivor grows only once the leaver's registration lapses.
    let handover = Stopwatch::start();
    let mut rounds = 0;
    // Bounded: 40 rounds of 100 ms of demand.
    while survivor.in_force(&key) != whole && rounds < 40 {
        load(&fleet[1..], &hot, Duration::from_millis(100)).await;
        rounds += 1;
    }
    let waited = leaving.elapsed();
    assert_eq!(
        survivor.in_force(&key),
        whole,
        "the whole limit {:?} after the failed leave",
        handover.elapsed()
    );
    assert!(
        waited >= ttl - Duration::from_millis(100),
        "not before the leaver's registration lapsed: {waited:?}"
    );
}

/// With starter slots, once an instance owns one, requests for keys it has
/// never seen are decided at once: none waits for a call, and the calls
/// carry none of them (their demand fits in the slot's part).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_starter_slots_new_keys_are_decided_without_waiting_for_a_call() {
    let redis = RedisServer::start();
    let rules = rules_per(1_000_000, "second");
    let mut options = RemoteOptions::default();
    options.shares.authority.starter = tollgate_core::share::StarterPolicy {
        slots: 4,
        divisor: 16,
    };
    let fleet = engines_with(&redis.url(), 2, &rules, options).await;
    let books: Vec<_> = fleet
        .iter()
        .map(|e| e.remote().expect("Redis").shares().expect("connected"))
        .collect();
    // The first request registers each instance (it waits for that call).
    for engine in &fleet {
        assert!(admitted(engine, &request("token_bucket", "first")).await);
    }
    let owners = poll_until_async(Duration::from_secs(5), || async {
        books.iter().all(|b| b.starter().is_some()).then_some(())
    })
    .await;
    assert!(owners.is_some(), "both instances own a slot");
    let waited: u64 = books
        .iter()
        .map(|b| b.counts().waited.load(Ordering::Relaxed))
        .sum();
    let calls_before = redis.script_calls();
    for (i, engine) in fleet.iter().enumerate() {
        for k in 0..200 {
            let key = format!("new-{i}-{k}");
            assert!(
                admitted(engine, &request("token_bucket", &key)).await,
                "{key}"
            );
            assert!(admitted(engine, &request("gcra", &key)).await, "{key}");
        }
    }
    let waited_after: u64 = books
        .iter()
        .map(|b| b.counts().waited.load(Ordering::Relaxed))
        .sum();
    assert_eq!(
        waited_after, waited,
        "a new key's first use waited for a call"
    );
    let calls = redis.script_calls() - calls_before;
    assert!(calls < 100, "{calls} script calls for 800 first uses");
}

/// The number of arguments of a `SLOWLOG GET` entry's command (Redis shows
/// the first 31 and then `... (N more arguments)`).
fn slowlog_arguments(entry: &redis::Value) -> Option<(String, usize, u64)> {
    let redis::Value::Array(fields) = entry else {
        return None;
    };
    let micros: u64 = redis::from_redis_value_ref(fields.get(2)?).ok()?;
    let args: Vec<Vec<u8>> = redis::from_redis_value_ref(fields.get(3)?).ok()?;
    let command = String::from_utf8_lossy(args.first()?).to_ascii_uppercase();
    let more = std::str::from_utf8(args.last()?)
        .ok()
        .and_then(|last| last.strip_prefix("... ("))
        .and_then(|rest| rest.strip_suffix(" more arguments)"))
        .and_then(|n| n.parse::<usize>().ok());
    let count = match more {
        Some(more) => args.len() - 1 + more,
        None => args.len(),
    };
    Some((command, count, micros))
}

/// An instance holding thousands of keys leaves in calls of a bounded
/// size, one after the other, so no script of the leave holds the other
/// clients of that Redis up for long (a Redis script is atomic): every
/// script call of the leave carries at most a few hundred keys, and the
/// leave puts nothing in the graveyard (every key was given back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_of_thousands_of_keys_goes_in_calls_of_a_few_hundred() {
    use tollgate_core::share::LEAVE_KEYS_PER_CALL;
    const KEYS: usize = 3_000;
    let redis = RedisServer::start();
    let rules = rules_per(1_000, "second");
    let fleet = engines_with(&redis.url(), 1, &rules, RemoteOptions::default()).await;
    let book = fleet[0]
        .remote()
        .expect("Redis")
        .shares()
        .expect("connected");
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(300) {
        let checks = chunk.iter().map(|k| {
            let engine = Arc::clone(&fleet[0]);
            async move { admitted(&engine, &request("token_bucket", &format!("k{k}"))).await }
        });
        let passed = futures_util::future::join_all(checks).await;
        assert!(
            passed.iter().all(|&p| p),
            "every key's first use is admitted"
        );
    }
    assert_eq!(book.keys(), KEYS);
    // Every command from here on is logged (those a script runs too), with
    // its arguments and duration.
    for set in [
        ["slowlog-log-slower-than", "0"],
        ["slowlog-max-len", "200000"],
    ] {
        assert_eq!(redis.cli(&["CONFIG", "SET", set[0], set[1]]).trim(), "OK");
    }
    assert_eq!(redis.cli(&["SLOWLOG", "RESET"]).trim(), "OK");
    let given_back = fleet[0]
        .remote()
        .expect("Redis")
        .leave_shares()
        .await
        .expect("Redis answers the leave");
    assert_eq!(given_back, KEYS, "every key is given back");
    let mut connection = redis::Client::open(redis.url())
        .expect("a URL")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connects");
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut connection)
        .expect("SLOWLOG");
    let scripts: Vec<(usize, u64)> = entries
        .iter()
        .filter_map(slowlog_arguments)
        .filter(|(command, _, _)| command.starts_with("EVAL") || command.starts_with("FCALL"))
        .map(|(_, args, micros)| (args, micros))
        .collect();
    let parts = KEYS.div_ceil(LEAVE_KEYS_PER_CALL);
    assert!(
        scripts.len() >= 2 * parts,
        "{} script calls for a leave of {KEYS} keys in {parts} parts",
        scripts.len()
    );
    // A read names each key once; a write has 5 arguments per operation:
    // per key its book and its held-set entry, plus a sample of the graveyard.
    let bound = 8 + 5 * (4 * LEAVE_KEYS_PER_CALL);
    let widest = scripts.iter().map(|&(args, _)| args).max().unwrap_or(0);
    assert!(
        widest <= bound,
        "a script call of the leave carried {widest} arguments (bound {bound})"
    );
    let longest = scripts.iter().map(|&(_, micros)| micros).max().unwrap_or(0);
    eprintln!(
        "leave of {KEYS} keys: {} script calls, at most {widest} arguments, the longest {longest} µs",
        scripts.len()
    );
    assert_eq!(
        redis.cli(&["SCARD", "tg{shares}:g"]).trim(),
        "0",
        "a graceful leave leaves nothing to tidy"
    );
    assert_eq!(redis.cli(&["KEYS", "tg{shares}:h:*"]).trim(), "");
}
