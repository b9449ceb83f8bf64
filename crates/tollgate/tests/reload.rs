//! `tollgate serve` reloads its limits when they are written in place, renamed over or swapped by a ConfigMap `..data` link, and on SIGHUP.
//!
//! Every wait reads the server's log lines with a bounded timeout; no test
//! sleeps and hopes. Counters are checked on a per-day rule whose limit never
//! changes, so they cannot roll over during a test (short of midnight UTC).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use tollgate_protocol::rls::{RlsClient, wire};

use tollgate_testkit::process::forward_lines;
use tollgate_testkit::tollgate::tollgate;
use tollgate_testkit::window::{self, DAY, DAY_MARGIN, HOUR};

/// How long one log line may take to arrive.
const LINE_BUDGET: Duration = Duration::from_secs(10);

/// The most log lines read while waiting for one.
const MAX_LINES: usize = 200;

/// The limits file with `/login` allowing `login` requests an hour; `/keep` never changes.
fn limits(login: u32) -> String {
    format!(
        "domain: edge
descriptors:
  - key: path
    value: /login
    rate_limit:
      unit: hour
      requests_per_unit: {login}
  - key: path
    value: /keep
    rate_limit:
      unit: day
      requests_per_unit: 100
"
    )
}

/// A limits file with a wrong type at line 7.
const BROKEN: &str = "domain: edge
descriptors:
  - key: path
    value: /login
    rate_limit:
      unit: hour
      requests_per_unit: lots
";

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("tollgate-reload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the scratch directory is created");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a test replaces the limits file.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// `write` over the same file.
    InPlace,
    /// Write a temporary file, then rename it over the old one.
    RenameReplace,
    /// Kubernetes' ConfigMap layout: `limits.yaml -> ..data/limits.yaml`,
    /// `..data -> ..VERSION`, updated by swapping `..data`.
    ConfigMap,
}

impl Style {
    /// Lays out the first version of the limits in `dir`.
    fn install(self, dir: &Path, text: &str) {
        match self {
            Style::InPlace | Style::RenameReplace => {
                std::fs::write(dir.join("limits.yaml"), text).expect("written");
            }
            Style::ConfigMap => {
                let version = dir.join("..2026_01_01_00_00_00.1");
                std::fs::create_dir(&version).expect("created");
                std::fs::write(version.join("limits.yaml"), text).expect("written");
                symlink("..2026_01_01_00_00_00.1", &dir.join("..data"));
                symlink("..data/limits.yaml", &dir.join("limits.yaml"));
            }
        }
    }

    /// Replaces the limits in `dir` with `text`; `version` names a ConfigMap's new directory.
    fn update(self, dir: &Path, text: &str, version: u32) {
        match self {
            Style::InPlace => std::fs::write(dir.join("limits.yaml"), text).expect("written"),
            Style::RenameReplace => {
                let tmp = dir.join("limits.yaml.tmp");
                std::fs::write(&tmp, text).expect("written");
                std::fs::rename(&tmp, dir.join("limits.yaml")).expect("renamed");
            }
            Style::ConfigMap => {
                let old = std::fs::read_link(dir.join("..data")).expect("..data is a link");
                let name = format!("..2026_01_01_00_00_0{version}.1");
                let new = dir.join(&name);
                std::fs::create_dir(&new).expect("created");
                std::fs::write(new.join("limits.yaml"), text).expect("written");
                symlink(&name, &dir.join("..data_tmp"));
                std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swapped");
                std::fs::remove_dir_all(dir.join(old)).expect("the old version is removed");
            }
        }
    }
}

fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink created");
}

/// A `tollgate serve` child, killed and reaped when dropped, whose log lines arrive on a channel.
struct Server {
    child: Child,
    addr: String,
    lines: Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn spawn(config: &Path) -> Server {
        Server::spawn_with(config, &[])
    }

    /// [`Server::spawn`] with `extra` flags.
    fn spawn_with(config: &Path, extra: &[&str]) -> Server {
        Server::spawn_in(None, config, extra)
    }

    /// [`Server::spawn_with`], run in the working directory `dir` when one is given.
    fn spawn_in(dir: Option<&Path>, config: &Path, extra: &[&str]) -> Server {
        let config = config.to_str().expect("a UTF-8 path");
        let mut args = vec![
            "serve",
            "--config",
            config,
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--log-level",
            "info",
        ];
        args.extend_from_slice(extra);
        let mut command = tollgate(&args);
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the tollgate binary starts");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        forward_lines(stdout, tx.clone());
        forward_lines(stderr, tx);
        let mut server = Server {
            child,
            addr: String::new(),
            lines,
        };
        let seen = server.wait_for("listening on ");
        let last = seen.last().cloned().unwrap_or_default();
        server.addr = last
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("no address in {seen:?}"))
            .to_owned();
        server
    }

    /// The lines up to and including the first that contains `needle`, each awaited at most [`LINE_BUDGET`].
    fn wait_for(&self, needle: &str) -> Vec<String> {
        let mut seen = Vec::new();
        for _ in 0..MAX_LINES {
            match self.lines.recv_timeout(LINE_BUDGET) {
                Ok(line) => {
                    let found = line.contains(needle);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(error) => panic!("no line with {needle:?} ({error}); saw {seen:#?}"),
            }
        }
        panic!("no line with {needle:?} in {MAX_LINES} lines: {seen:#?}");
    }

    fn hup(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }
}

/// A gRPC client on its own single-threaded runtime.
struct Client {
    runtime: tokio::runtime::Runtime,
    channel: tonic::transport::Channel,
}

impl Client {
    fn connect(addr: &str) -> Client {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let url = format!("http://{addr}");
        let channel = runtime
            .block_on(async {
                tonic::transport::Channel::from_shared(url)
                    .expect("a valid URL")
                    .connect_timeout(LINE_BUDGET)
                    .timeout(LINE_BUDGET)
                    .connect()
                    .await
            })
            .expect("connected");
        Client { runtime, channel }
    }

    /// One hit on `path=VALUE`: its status.
    fn hit(&self, value: &str) -> wire::DescriptorStatus {
        let request = wire::RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![wire::RateLimitDescriptor {
                entries: vec![wire::Entry {
                    key: "path".to_owned(),
                    value: value.to_owned(),
                }],
                limit: None,
                hits_addend: None,
                is_negative_hits: false,
            }],
            hits_addend: 1,
        };
        let response = self
            .runtime
            .block_on(RlsClient::new(self.channel.clone()).should_rate_limit(request))
            .expect("the call succeeds");
        response.statuses.into_iter().next().expect("one status")
    }
}

fn limit_of(status: &wire::DescriptorStatus) -> u32 {
    status
        .current_limit
        .as_ref()
        .map_or(0, |limit| limit.requests_per_unit)
}

/// Raises `/login` from 3 to 5 an hour, checks both counters carried on, then breaks the file and checks the old config keeps serving.
///
/// With `single_file`, `--config` names `limits.yaml` rather than its directory.
fn reload_with(style: Style, name: &str, single_file: bool) {
    // Every count below is in one hour's window (and one day's: a day ends on an hour's end).
    window::wait_clear_of_window_end(HOUR, Duration::from_secs(60));
    let scratch = Scratch::new(name);
    let dir = &scratch.0;
    style.install(dir, &limits(3));
    let config = if single_file {
        dir.join("limits.yaml")
    } else {
        dir.clone()
    };
    let server = Server::spawn(&config);
    let client = Client::connect(&server.addr);

    for expected in [99, 98] {
        let keep = client.hit("/keep");
        assert_eq!(keep.code, wire::CODE_OK);
        assert_eq!(keep.limit_remaining, expected);
    }
    for _ in 0..3 {
        let login = client.hit("/login");
        assert_eq!(login.code, wire::CODE_OK);
        assert_eq!(limit_of(&login), 3);
    }

    style.update(dir, &limits(5), 2);
    let seen = server.wait_for("config reloaded");
    assert!(
        seen.iter()
            .all(|l| !l.contains("keeping the running config")),
        "{seen:#?}"
    );

    // The fourth login in the hour passes now: the limit is 5, and its
    // counter kept the 3 already counted (issue 13: a change of the rate
    // alone keeps the count, as upstream's does).
    let login = client.hit("/login");
    assert_eq!(login.code, wire::CODE_OK, "{login:?}");
    assert_eq!(limit_of(&login), 5);
    assert_eq!(login.limit_remaining, 1, "{login:?}");
    // The unchanged rule kept its count through the reload.
    let keep = client.hit("/keep");
    assert_eq!(keep.limit_remaining, 97, "{keep:?}");

    // A broken file: the error is logged at file:line:col and the running config stays.
    style.update(dir, BROKEN, 3);
    let seen = server.wait_for("keeping the running config");
    assert!(
        seen.iter().any(|l| l.contains("limits.yaml:7:")),
        "no file:line:col in {seen:#?}"
    );
    let login = client.hit("/login");
    assert_eq!(limit_of(&login), 5, "{login:?}");
    let keep = client.hit("/keep");
    assert_eq!(keep.limit_remaining, 96, "{keep:?}");
}

#[test]
fn a_file_written_in_place_reloads_and_a_bad_one_keeps_the_running_config() {
    reload_with(Style::InPlace, "in-place", false);
}

#[test]
fn a_file_renamed_over_reloads_and_a_bad_one_keeps_the_running_config() {
    reload_with(Style::RenameReplace, "rename", false);
}

#[test]
fn a_configmap_data_swap_reloads_and_a_bad_one_keeps_the_running_config() {
    reload_with(Style::ConfigMap, "configmap", false);
}

#[test]
fn a_single_file_config_follows_rename_replace_and_a_configmap_swap() {
    reload_with(Style::RenameReplace, "file-rename", true);
    reload_with(Style::ConfigMap, "file-configmap", true);
}

/// Issue 21: `--config` relative to the working directory (the README's
/// `--config examples/limits`) is watched like an absolute path: a lowered
/// limit is in force after the write, with no signal.
#[test]
fn a_relative_config_path_reloads_on_a_file_change() {
    window::wait_clear_of_window_end(HOUR, Duration::from_secs(60));
    let scratch = Scratch::new("relative");
    let dir = scratch.0.join("limits");
    std::fs::create_dir(&dir).expect("created");
    Style::InPlace.install(&dir, &limits(5));
    let server = Server::spawn_in(Some(&scratch.0), Path::new("limits"), &[]);
    let client = Client::connect(&server.addr);
    for _ in 0..2 {
        assert_eq!(client.hit("/login").code, wire::CODE_OK);
    }

    Style::InPlace.update(&dir, &limits(1), 2);
    // The two logins already counted are over the lowered limit of 1.
    tollgate_testkit::budget::eventually("the lowered limit is in force", LINE_BUDGET, || {
        let login = client.hit("/login");
        limit_of(&login) == 1 && login.code == wire::CODE_OVER_LIMIT
    });
}

#[test]
fn sighup_forces_a_reload_and_counters_survive() {
    window::wait_clear_of_window_end(HOUR, Duration::from_secs(60));
    let scratch = Scratch::new("sighup");
    Style::InPlace.install(&scratch.0, &limits(3));
    let server = Server::spawn(&scratch.0);
    let client = Client::connect(&server.addr);
    assert_eq!(client.hit("/keep").limit_remaining, 99);

    // The files did not change: only the signal can cause this reload.
    server.hup();
    let seen = server.wait_for("config reloaded");
    assert!(
        seen.iter().any(|l| l.contains("SIGHUP received")),
        "{seen:#?}"
    );
    assert!(
        seen.last().is_some_and(|l| l.contains("forced=true")),
        "{seen:#?}"
    );
    assert_eq!(client.hit("/keep").limit_remaining, 98);
}

/// How many filler rules the large file holds before `/login` and `/last`.
const FILLER_RULES: usize = 400;

/// How many bytes one small write of the large file puts down.
const CHUNK: usize = 512;

/// The pause between two small writes: well inside the watcher's 100 ms quiet period.
const PAUSE: Duration = Duration::from_millis(2);

/// A gap between two writes this long could let the watcher load the file half-written.
const QUIET_PERIOD: Duration = tollgate_runtime::DEFAULT_DEBOUNCE;

/// A large limits file: the fillers, `/login` (`login` a day, if any),
/// and `/last` (1000 a day) at the very end; `round` marks the content apart.
fn large_limits(login: Option<u32>, round: u32) -> String {
    let mut text = String::from("domain: edge\ndescriptors:\n");
    for i in 0..FILLER_RULES {
        text.push_str(&format!(
            "  - key: path\n    value: /filler/{i}\n    rate_limit: {{unit: day, requests_per_unit: 100}}\n"
        ));
    }
    if let Some(login) = login {
        text.push_str(&format!(
            "  - key: path\n    value: /login\n    rate_limit: {{unit: day, requests_per_unit: {login}}}\n"
        ));
    }
    text.push_str(&format!(
        "  - key: path\n    value: /last\n    rate_limit: {{unit: day, requests_per_unit: 1000}}\n# round {round}\n"
    ));
    text
}

/// Rewrites `file` in place with `text` in [`CHUNK`]-byte writes [`PAUSE`] apart; the longest gap between two writes.
fn write_slowly(file: &Path, text: &str) -> Duration {
    use std::io::Write;
    let mut out = std::fs::File::create(file).expect("truncated");
    let mut longest = Duration::ZERO;
    let mut since = tollgate_testkit::budget::Stopwatch::start();
    for chunk in text.as_bytes().chunks(CHUNK) {
        longest = longest.max(since.elapsed());
        out.write_all(chunk).expect("written");
        since = tollgate_testkit::budget::Stopwatch::start();
        std::thread::sleep(PAUSE);
    }
    longest
}

/// The `rules=N` of a `config reloaded` log line.
fn reloaded_rules(line: &str) -> Option<usize> {
    let rest = &line[line.find(" rules=")? + " rules=".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The most reloads one rewrite may set off (a writer pausing past the quiet period causes more than one).
const MAX_RELOADS: usize = 20;

/// How many times one rewrite is tried before the test gives up on a writer that keeps pausing past the quiet period.
const MAX_ATTEMPTS: u32 = 4;

/// How long the probe may take to answer once more.
const PROBE_BUDGET: Duration = Duration::from_secs(10);

/// The probe's answers so far, and how many of them came from rules without `/last`.
#[derive(Default)]
struct ProbeCounts {
    answers: std::sync::atomic::AtomicU64,
    unlimited: std::sync::atomic::AtomicU64,
}

impl ProbeCounts {
    /// The answers from rules without `/last` so far, once the answer in
    /// flight now (which may come from rules replaced since) is counted.
    fn unlimited_settled(&self) -> u64 {
        use std::sync::atomic::Ordering::SeqCst;
        let answers = self.answers.load(SeqCst);
        let waited = tollgate_testkit::budget::Stopwatch::start();
        while self.answers.load(SeqCst) <= answers {
            assert!(
                waited.elapsed() < PROBE_BUDGET,
                "the probe answered nothing in {PROBE_BUDGET:?}"
            );
            std::thread::yield_now();
        }
        self.unlimited.load(SeqCst)
    }
}

/// Writes `text` (marked `round`) slowly and waits for the reload that
/// loads its `rules` rules, again (newly marked) while a write paused past
/// the quiet period; then asserts that only whole files were loaded: every
/// reload had all the rules the file held, and no probe answer lacked
/// `/last`. A writer paused past the quiet period may get a half-written
/// file loaded for a moment: that attempt is not judged, the next is.
fn rewrite_and_check(
    server: &Server,
    probe: &ProbeCounts,
    file: &Path,
    text: impl Fn(u32) -> String,
    rules: usize,
) {
    for attempt in 0..MAX_ATTEMPTS {
        let unlimited_before = probe.unlimited_settled();
        let gap = write_slowly(file, &text(attempt));
        let mut logged = Vec::new();
        for _ in 0..MAX_RELOADS {
            let seen = server.wait_for("config reloaded");
            logged.extend(seen.iter().filter_map(|l| reloaded_rules(l)));
            if logged.last() == Some(&rules) {
                break;
            }
        }
        assert_eq!(
            logged.last(),
            Some(&rules),
            "no reload with {rules} rules in {MAX_RELOADS}: {logged:?}"
        );
        let unlimited = probe.unlimited_settled() - unlimited_before;
        if gap >= QUIET_PERIOD {
            eprintln!("a write paused {gap:?}, past the quiet period: written again");
            continue;
        }
        // A whole file holds every rule, `/login` or not.
        let whole = FILLER_RULES + 1..=FILLER_RULES + 2;
        assert!(logged.iter().all(|r| whole.contains(r)), "{logged:?}");
        assert_eq!(unlimited, 0, "{unlimited} answers had no `/last` rule");
        return;
    }
    panic!("every one of {MAX_ATTEMPTS} rewrites paused past the quiet period {QUIET_PERIOD:?}");
}

#[test]
fn a_large_file_written_slowly_is_never_served_half_written_and_no_counter_restarts() {
    // Counts per day: clear of the day's end by more than the test takes.
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = Scratch::new("slow-writer");
    let file = scratch.0.join("limits.yaml");
    std::fs::write(&file, large_limits(Some(3), 0)).expect("written");
    let server = Server::spawn(&scratch.0);
    let client = Client::connect(&server.addr);
    let full = FILLER_RULES + 2;

    // Requests go on all along: `/last`, the file's last rule, must always
    // be limited; a half-written file would leave it out.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let counts = std::sync::Arc::new(ProbeCounts::default());
    let probe = {
        let (stop, counts) = (std::sync::Arc::clone(&stop), std::sync::Arc::clone(&counts));
        let addr = server.addr.clone();
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering::SeqCst;
            let client = Client::connect(&addr);
            while !stop.load(SeqCst) {
                if limit_of(&client.hit("/last")) != 1000 {
                    counts.unlimited.fetch_add(1, SeqCst);
                }
                counts.answers.fetch_add(1, SeqCst);
            }
        })
    };

    // Every `/login` attempt of the test: exactly 3 may pass in the day,
    // whatever its rate (3, 2 or 1 a day) and however the rewrites were read.
    let mut admitted = 0;
    let mut login = |client: &Client, rate: u32| {
        let status = client.hit("/login");
        assert_eq!(
            limit_of(&status),
            rate,
            "the login rule is in service: {status:?}"
        );
        if status.code == wire::CODE_OK {
            admitted += 1;
        }
    };
    for _ in 0..4 {
        login(&client, 3);
    }

    // Several rewrites, each in many small writes: the same rules, or
    // `/login` alone lowered to 2 a day and raised back (issue 21: a
    // rate-only change caught half-written reset the count).
    for round in 1..=4 {
        let rate = if round % 2 == 0 { 2 } else { 3 };
        let text = |attempt| large_limits(Some(rate), round * 10 + attempt);
        rewrite_and_check(&server, &counts, &file, text, full);
        login(&client, rate);
    }
    // A rewrite that drops `/login`, then one that restores it at a rate it
    // never had (1 a day): its count comes from the rates before.
    let text = |attempt| large_limits(None, 50 + attempt);
    rewrite_and_check(&server, &counts, &file, text, full - 1);
    let text = |attempt| large_limits(Some(1), 60 + attempt);
    rewrite_and_check(&server, &counts, &file, text, full);
    for _ in 0..3 {
        login(&client, 1);
    }

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    probe.join().expect("the probe thread");
    // Whatever the writes' gaps: no count restarted.
    assert_eq!(admitted, 3, "a 3-a-day rule admitted {admitted}");
}

#[test]
fn on_redis_a_rule_that_drops_out_and_comes_back_keeps_its_count() {
    // Counts per day: clear of the day's end by more than the test takes.
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let redis = tollgate_testkit::redis::RedisServer::start();
    let scratch = Scratch::new("redis-comeback");
    let file = scratch.0.join("limits.yaml");
    std::fs::write(&file, large_limits(Some(3), 0)).expect("written");
    let server = Server::spawn_with(
        &scratch.0,
        &["--store", &redis.url(), "--store-timeout", "1s"],
    );
    let client = Client::connect(&server.addr);
    let admitted = |client: &Client| {
        (0..4)
            .filter(|_| client.hit("/login").code == wire::CODE_OK)
            .count()
    };
    assert_eq!(admitted(&client), 3);
    std::fs::write(&file, large_limits(None, 1)).expect("written");
    server.wait_for("config reloaded");
    std::fs::write(&file, large_limits(Some(3), 2)).expect("written");
    server.wait_for("config reloaded");
    assert_eq!(
        admitted(&client),
        0,
        "the counters are in Redis and survive"
    );
}

/// Upstream's FORCE_START_WITHOUT_INITIAL_CONFIG: the service starts with
/// no limits file, takes the rules a reload brings, and a later reload to
/// no file is refused like any empty configuration (limits stay on).
#[test]
fn force_start_without_initial_config_starts_empty_and_never_empties_later() {
    window::wait_clear_of_window_end(HOUR, Duration::from_secs(60));
    let scratch = Scratch::new("force-start");
    let server = Server::spawn_with(&scratch.0, &["--force-start-without-initial-config"]);
    let client = Client::connect(&server.addr);
    let unlimited = client.hit("/login");
    assert!(unlimited.current_limit.is_none(), "{unlimited:?}");

    Style::InPlace.install(&scratch.0, &limits(3));
    server.hup();
    server.wait_for("config reloaded");
    assert_eq!(client.hit("/login").limit_remaining, 2);

    std::fs::remove_file(scratch.0.join("limits.yaml")).expect("the file is removed");
    server.hup();
    server.wait_for("keeping the running config");
    assert_eq!(client.hit("/login").limit_remaining, 1);
}
