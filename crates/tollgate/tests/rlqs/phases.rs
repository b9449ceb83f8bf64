//! Shares following demand with two real Envoys: the phases (a demand flip, a death) printed second by second and held to the targets, and two services on one Redis with asymmetric Envoys split max-min between them.

use super::*;

/// The rate of the phases' tenants, per second.
const PHASE_RATE: u64 = 40;

/// How long each phase runs, and the first seconds of it left out as
/// settling: Envoy 1.40 reports every 5 s, and a larger share's fresh
/// bucket is paid from what the shares in force leave of the rate
/// (measured: the split settles 4 to 10 s into a phase).
const PHASE: Duration = Duration::from_secs(20);
const SETTLE: usize = 10;

/// The seconds left out of phase 1, where both Envoys start together, the
/// issue's target: their buckets' first reports carry no usage (an equal
/// part each), their second ones come 5 s later, and the split is in force
/// (within a tenth) at the round after them (docs/quota.md, a cold start).
const COLD_SETTLE: usize = 5;

/// The seconds left out of the phase after an Envoy's death, the issue's
/// target: its share stays reserved until its last assignment lapses (the
/// default time to live, 3 s, renewed at every round: at most 5 s after
/// its death), then the survivor grows at that round (in the bucket paid
/// so far; docs/quota.md, the rule for a growth).
const DEAD_SETTLE: usize = 7;

/// The seconds after a demand flip by which the split is within 10 % of
/// max-min fair, the target: one report interval of Envoy 1.40's
/// (5 s) and 2 s. The flips come just after a report (or up to a second
/// before one, read at the next): the service learns them 5 to 6 s in, and
/// the grown share goes out at the next round (before, 2 to 3 rounds
/// later, waiting for its full bucket: 7 to 9 s).
const FLIP_SETTLE: usize = 7;

/// Admitted requests per Envoy per second of a phase.
pub(super) struct Seconds {
    counts: Vec<[AtomicU64; 2]>,
}

impl Seconds {
    pub(super) fn new(seconds: usize) -> Self {
        Seconds {
            counts: (0..seconds)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
        }
    }

    pub(super) fn get(&self, second: usize, envoy: usize) -> u64 {
        self.counts[second][envoy].load(Ordering::Relaxed)
    }

    /// The mean admitted per second of `envoy` (None: both) over `seconds`.
    pub(super) fn mean(&self, seconds: std::ops::Range<usize>, envoy: Option<usize>) -> f64 {
        let n = seconds.len() as f64;
        let sum: u64 = seconds
            .map(|s| match envoy {
                Some(e) => self.get(s, e),
                None => self.get(s, 0) + self.get(s, 1),
            })
            .sum();
        sum as f64 / n
    }
}

/// Open-loop paced traffic: `per_second[i]` requests a second for `tenant`
/// through the Envoy on `ports[i]` (none where 0), each on its own schedule
/// from `start` for `length` whatever the answers (threads of 25 a second
/// each); the admitted ones counted per second into `seconds`.
pub(super) fn paced(
    ports: [u16; 2],
    tenant: &str,
    per_second: [u64; 2],
    length: Duration,
    seconds: &Seconds,
) {
    let start = CLOCK.now();
    std::thread::scope(|scope| {
        for (envoy, (&port, &rate)) in ports.iter().zip(&per_second).enumerate() {
            let threads = rate.div_ceil(25);
            for thread in 0..threads {
                scope.spawn(move || {
                    let tally = Tally::default();
                    // Request n of this thread goes at (n × threads + thread) / rate seconds.
                    for n in 0.. {
                        let slot =
                            Duration::from_nanos((n * threads + thread) * 1_000_000_000 / rate);
                        if slot >= length {
                            break;
                        }
                        let wait = slot.saturating_sub(CLOCK.now().saturating_since(start));
                        std::thread::sleep(wait);
                        let before = tally.admitted.load(Ordering::Relaxed);
                        request(port, tenant, &tally);
                        if tally.admitted.load(Ordering::Relaxed) > before {
                            let second = (CLOCK.now().saturating_since(start).as_secs() as usize)
                                .min(seconds.counts.len() - 1);
                            seconds.counts[second][envoy].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        }
    });
}

/// Prints a phase's per-second table (`--nocapture`).
pub(super) fn print_table(name: &str, seconds: &Seconds) {
    eprintln!("{name}: second, Envoy A, Envoy B, both");
    for s in 0..seconds.counts.len() {
        let (a, b) = (seconds.get(s, 0), seconds.get(s, 1));
        eprintln!("  {s:>2} {a:>4} {b:>4} {:>4}", a + b);
    }
}

/// The demands of the phases, A's and B's a second in phase 1: the
/// issue's 100 and 10, or `TOLLGATE_RLQS_PHASES=A,B` (a run with other
/// demands: the targets below hold for any).
fn demands() -> (u64, u64) {
    let Ok(pair) = std::env::var("TOLLGATE_RLQS_PHASES") else {
        return (100, 10);
    };
    let read = |pair: &str| -> Option<(u64, u64)> {
        let (a, b) = pair.split_once(',')?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    };
    read(&pair).unwrap_or_else(|| {
        panic!("TOLLGATE_RLQS_PHASES={pair}: expected A,B, requests a second (e.g. 60,15)")
    })
}

/// The phases for one tenant of 40 a second (`tenant`'s rule):
/// A 100/s and B 10/s, then A 10/s and B 100/s, then A killed and B
/// 100/s (or the demands [`demands`] reads); per phase the first 5 s are
/// left out as settling.
fn phases(tenant: &str, limits: &Path, dir: &Path) {
    let (high, low) = demands();
    let upstream = Upstream::spawn();
    // The default time to live (3 s, renewed at every round): a dead
    // Envoy's share stays reserved until its last assignment lapses.
    let tollgate = serve_with(limits, 0, 0, &[], dir.join("tollgate.log"));
    let (mut a, a_port) = start_envoy(dir, "a", upstream.addr, tollgate.addr);
    let (b, b_port) = start_envoy(dir, "b", upstream.addr, tollgate.addr);
    let ports = [a_port, b_port];
    let a_log = a.log.clone();
    let logs = || {
        format!(
            "tollgate:\n{}\nEnvoy A:\n{}\nEnvoy B:\n{}",
            log_tail(&tollgate.log),
            log_tail(&a_log),
            log_tail(&b.log)
        )
    };
    let r = PHASE_RATE as f64;
    let n = PHASE.as_secs() as usize;
    let started = CLOCK.now();
    let mut total = 0;

    // Phase 1: A 100/s, B 10/s (the demands). Max-min fair: B its
    // 10, A the other 30.
    let one = Seconds::new(n);
    paced(ports, tenant, [high, low], PHASE, &one);
    print_table(&format!("{tenant}, phase 1 (A {high}/s, B {low}/s)"), &one);
    // Phase 2: the demands flip. Max-min fair: A its 10, B the other 30.
    let two = Seconds::new(n);
    paced(ports, tenant, [low, high], PHASE, &two);
    print_table(&format!("{tenant}, phase 2 (A {low}/s, B {high}/s)"), &two);
    // Phase 3: A dies; B alone at 100/s gets the rate.
    a.child.stop();
    let three = Seconds::new(n);
    paced(ports, tenant, [0, high], PHASE, &three);
    print_table(&format!("{tenant}, phase 3 (A killed, B {high}/s)"), &three);
    let took = CLOCK.now().saturating_since(started);
    for seconds in [&one, &two, &three] {
        total += (0..n)
            .map(|s| seconds.get(s, 0) + seconds.get(s, 1))
            .sum::<u64>();
    }
    let settled = SETTLE..n;
    // After A's death its share stays reserved until its last assignment
    // lapses (3 s and a round after its last renewal), then B's growth is
    // paid; phase 1 counts from the second reports of both new buckets.
    let settled_in = |phase: usize| match phase {
        1 => COLD_SETTLE..n,
        3 => DEAD_SETTLE..n,
        _ => settled.clone(),
    };
    for (phase, seconds) in [(1, &one), (2, &two), (3, &three)] {
        let mean = seconds.mean(settled_in(phase), None);
        eprintln!(
            "{tenant}, phase {phase}: {mean:.1} a second after settling ({:.2} R)",
            mean / r
        );
    }
    eprintln!(
        "{tenant}: {total} admitted in {took:?}, R × t = {:.0}",
        r * took.as_secs_f64()
    );

    // After settling, each phase's aggregate within [0.9 R, 1.05 R]
    // (where the demands sum to R or more; else at least 0.9 of them).
    let (high_f, low_f) = (high as f64, low as f64);
    for (phase, seconds, demand) in [
        (1, &one, high_f + low_f),
        (2, &two, high_f + low_f),
        (3, &three, high_f),
    ] {
        let floor = r.min(demand);
        let mean = seconds.mean(settled_in(phase), None);
        assert!(
            (0.9 * floor..=1.05 * r).contains(&mean),
            "{tenant}, phase {phase}: {mean:.1} a second after settling; {}",
            logs()
        );
        for s in settled_in(phase) {
            let both = seconds.get(s, 0) + seconds.get(s, 1);
            assert!(
                (0.5 * floor..=1.5 * r).contains(&(both as f64)),
                "{tenant}, phase {phase}, second {s}: {both} admitted; {}",
                logs()
            );
        }
    }
    // The low-demand Envoy, below R / 2, gets at least 90 % of its demand.
    if low_f < r / 2.0 {
        let low_one = one.mean(settled.clone(), Some(1));
        let low_two = two.mean(settled.clone(), Some(0));
        assert!(
            low_one >= 0.9 * low_f,
            "{tenant}: B got {low_one:.1} of {low} a second; {}",
            logs()
        );
        assert!(
            low_two >= 0.9 * low_f,
            "{tenant}: A got {low_two:.1} of {low} a second; {}",
            logs()
        );
    }
    // From 7 s after the flip on, the split is within 10 % of max-min
    // fair: B at least 90 % of its fair share, 27 of 30 with the issue's
    // demands (on average: a grown share sent in the middle of second 7
    // leaves B short in that second alone). The rounds are held exactly by
    // `tollgate-server`'s `rlqs_ramp`; real time only bounds them: the code
    // before the rule for a growth (fair from second 7 and 8 in a run,
    // 09:28 UTC 2026-11-28) passed this too.
    let fair_high = high_f.min(r - low_f.min(r / 2.0));
    let high_two = two.mean(FLIP_SETTLE..n, Some(1));
    assert!(
        high_two >= 0.9 * fair_high,
        "{tenant}: B got {high_two:.1} of a fair {fair_high} a second from {FLIP_SETTLE} s after the flip; {}",
        logs()
    );
    // From 7 s after A's death on (its last assignment lapsed, at most 3 s
    // and two rounds after it, and B's growth paid: 7 to 8 s measured),
    // B gets at least 0.9 R a second.
    let alone = three.mean(DEAD_SETTLE..n, Some(1));
    let alone_fair = r.min(high_f);
    assert!(
        alone >= 0.9 * alone_fair,
        "{tenant}: B alone got {alone:.1} a second from {DEAD_SETTLE} s on; {}",
        logs()
    );
    let reached = (0..n).find(|&s| three.get(s, 1) as f64 >= 0.9 * alone_fair);
    eprintln!("{tenant}, phase 3: B at 0.9 R from second {reached:?}");
    let fair =
        (0..n).find(|&s| two.get(s, 0) <= low + 1 && two.get(s, 1) as f64 >= 0.9 * fair_high);
    eprintln!("{tenant}, phase 2: split within 10 % of max-min fair from second {fair:?}");
    // The whole run: within R × t and the bound docs/quota.md states
    // (R × t + 3 R: a window's burst and the two ticks paid ahead; nothing
    // passes before the first assignment, the example's fallback denies).
    let bound = (r * took.as_secs_f64()).ceil() as u64 + 3 * PHASE_RATE;
    assert!(
        total <= bound,
        "{tenant}: {total} admitted in {took:?}, over {bound}; {}",
        logs()
    );
}

/// A limits directory under `dir` with the phases' rule: `fixed*` tenants
/// on a fixed window, `bucket*` on a token bucket, both at [`PHASE_RATE`] a second.
fn phase_limits(dir: &Path) -> std::path::PathBuf {
    let limits = dir.join("limits");
    std::fs::create_dir_all(&limits).expect("a limits directory");
    std::fs::write(
        limits.join("quota.yaml"),
        format!(
            "domain: quota\ndescriptors:\n  - key: name\n    value: api\n    descriptors:\n      - key: tenant\n        value: fixed*\n        rate_limit: {{unit: second, requests_per_unit: {PHASE_RATE}}}\n      - key: tenant\n        value: bucket*\n        rate_limit: {{unit: second, requests_per_unit: {PHASE_RATE}, algorithm: token_bucket}}\n"
        ),
    )
    .expect("the limits file is written");
    limits
}

#[test]
fn two_envoys_follow_max_min_fair_shares_through_demand_flips_and_a_death() {
    let dir = TempDir::new("rlqs-phases");
    let limits = phase_limits(&dir.0);
    for (tenant, sub) in [("fixed-window", "fw"), ("bucket", "tb")] {
        let dir = dir.0.join(sub);
        std::fs::create_dir_all(&dir).expect("a directory per run");
        phases(tenant, &limits, &dir);
    }
}

/// Two `tollgate serve` instances on one Redis, each serving its own Envoy
/// on one rule of `R` = 40 a second: A's Envoy offering 100 a second holds
/// the whole rate alone first, then B's Envoy comes with 10 a second. The
/// fleet split is max-min fair between the instances by their Envoys'
/// claims (docs/quota.md): once settled B gets at least 7 of its 10 a
/// second (A's growth no longer takes B's refills: before, B was cut to 3
/// for 3 s in every run; what is left are short dips when a round misses
/// its window on a loaded machine, docs/quota.md gives the figures), the
/// aggregate stays within [0.5 R, 1.05 R], and the whole run within
/// `R × t` and the bound. First come, first served (before the claims
/// board) left B what A's instance did not hold: nothing.
#[test]
fn two_services_on_one_redis_with_asymmetric_envoys_split_max_min_fairly() {
    let redis = tollgate_testkit::redis::RedisServer::start();
    let dir = TempDir::new("rlqs-two-services-fair");
    let limits = phase_limits(&dir.0);
    let upstream = Upstream::spawn();
    let store = redis.url();
    let services = [0, 1].map(|i| {
        serve_with(
            &limits,
            0,
            0,
            &["--store", &store, "--store-timeout", "1s"],
            dir.0.join(format!("tollgate-{i}.log")),
        )
    });
    let (a, a_port) = start_envoy(&dir.0, "a", upstream.addr, services[0].addr);
    let (b, b_port) = start_envoy(&dir.0, "b", upstream.addr, services[1].addr);
    let ports = [a_port, b_port];
    let logs = || {
        format!(
            "tollgate 0:\n{}\ntollgate 1:\n{}\nEnvoy A:\n{}\nEnvoy B:\n{}",
            log_tail(&services[0].log),
            log_tail(&services[1].log),
            log_tail(&a.log),
            log_tail(&b.log)
        )
    };
    let r = PHASE_RATE as f64;
    let n = PHASE.as_secs() as usize;
    let started = CLOCK.now();
    // A alone first: its instance takes the whole rate.
    let alone = Seconds::new(8);
    paced(
        ports,
        "fixed-fleet",
        [100, 0],
        Duration::from_secs(8),
        &alone,
    );
    print_table("two services, A alone (A 100/s)", &alone);
    // Then B's Envoy, on the other instance, asks for 10 a second.
    let both = Seconds::new(n);
    paced(ports, "fixed-fleet", [100, 10], PHASE, &both);
    print_table("two services (A 100/s, B 10/s)", &both);
    let took = CLOCK.now().saturating_since(started);
    let total: u64 = [(&alone, 8), (&both, n)]
        .iter()
        .map(|(seconds, len)| {
            (0..*len)
                .map(|s| seconds.get(s, 0) + seconds.get(s, 1))
                .sum::<u64>()
        })
        .sum();
    let settled = SETTLE..n;
    let mean = both.mean(settled.clone(), None);
    let small = both.mean(settled.clone(), Some(1));
    eprintln!(
        "two services: {mean:.1} a second after settling ({:.2} R), B {small:.1} of its 10; {total} admitted in {took:?}, R × t = {:.0}",
        mean / r,
        r * took.as_secs_f64()
    );
    assert!(
        small >= 7.0,
        "B got {small:.1} of its 10 a second from {SETTLE} s on; {}",
        logs()
    );
    assert!(
        (0.5 * r..=1.05 * r).contains(&mean),
        "{mean:.1} a second after settling; {}",
        logs()
    );
    // The whole run: R × t + 4 R (docs/quota.md's bound, fleet-wide;
    // nothing passes before an Envoy's first assignment, the example's
    // fallback denies).
    let bound = (r * took.as_secs_f64()).ceil() as u64 + 4 * PHASE_RATE;
    assert!(
        total <= bound,
        "{total} admitted in {took:?}, over {bound}; {}",
        logs()
    );
}
