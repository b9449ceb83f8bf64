//! `LiveEngine::reload` swaps in good configurations all at once, keeps counters, and keeps the running engine on any error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tollgate_core::{ManualClock, Timestamp};
use tollgate_protocol::rls::{Descriptor, RateLimitRequest};
use tollgate_rules::LoadOptions;
use tollgate_server::reload::read_config;
use tollgate_server::{Engine, EngineOptions, LiveEngine, ReloadError, ReloadOutcome};

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-server-reload-{}-{name}",
            std::process::id()
        ));
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

fn limits(login: u32) -> String {
    format!(
        "domain: edge
descriptors:
  - key: path
    value: /login
    rate_limit: {{unit: minute, requests_per_unit: {login}}}
  - key: path
    value: /keep
    rate_limit: {{unit: minute, requests_per_unit: 100}}
"
    )
}

fn live(dir: &Path) -> LiveEngine<ManualClock> {
    let read = read_config(dir, LoadOptions::default()).expect("readable");
    let (rules, _) = read.loaded.into_result().expect("valid");
    let engine = Engine::new(
        Arc::new(rules),
        EngineOptions::default(),
        ManualClock::new(Timestamp::from_secs(60 * 1000)),
    );
    LiveEngine::new(
        Arc::new(engine),
        dir.to_path_buf(),
        LoadOptions::default(),
        read.hash,
    )
}

/// One hit on `path=value`: (limit, remaining).
fn hit(live: &LiveEngine<ManualClock>, value: &str) -> (u32, u32) {
    let request = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![Descriptor::new([("path", value)])],
        hits_addend: 1,
    };
    let response = live.load().should_rate_limit(&request).expect("valid");
    let status = &response.statuses[0];
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    (limit, status.limit_remaining)
}

#[test]
fn a_good_reload_swaps_the_rules_and_keeps_the_counters() {
    let scratch = Scratch::new("good");
    std::fs::write(scratch.0.join("limits.yaml"), limits(3)).expect("written");
    let live = live(&scratch.0);
    let first_hash = live.config_hash();
    assert_eq!(hit(&live, "/keep"), (100, 99));
    assert_eq!(hit(&live, "/login"), (3, 2));

    // Nothing changed: nothing to do, unless forced.
    assert!(matches!(live.reload(false), Ok(ReloadOutcome::Unchanged)));
    assert_eq!(live.successes(), 0);

    std::fs::write(scratch.0.join("limits.yaml"), limits(5)).expect("written");
    match live.reload(false) {
        Ok(ReloadOutcome::Reloaded(summary)) => {
            assert_eq!((summary.files, summary.domains, summary.rules), (1, 1, 2));
            assert_ne!(summary.hash, first_hash);
        }
        other => panic!("expected a reload, got {other:?}"),
    }
    assert_eq!(live.successes(), 1);
    assert_ne!(live.config_hash(), first_hash);
    // The unchanged limit kept its count, and so did the one whose rate
    // alone changed (issue 13, as upstream): 1 of 3 used is 1 of 5 used.
    assert_eq!(hit(&live, "/keep"), (100, 98));
    assert_eq!(hit(&live, "/login"), (5, 3));

    assert!(matches!(live.reload(true), Ok(ReloadOutcome::Reloaded(_))));
    assert_eq!(live.successes(), 2);
    assert_eq!(hit(&live, "/keep"), (100, 97));
}

#[test]
fn one_bad_file_keeps_the_whole_running_config() {
    let scratch = Scratch::new("bad");
    std::fs::write(scratch.0.join("a.yaml"), limits(3)).expect("written");
    let live = live(&scratch.0);
    let hash = live.config_hash();
    assert_eq!(hit(&live, "/login"), (3, 2));

    std::fs::write(
        scratch.0.join("b.yaml"),
        "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .expect("written");
    match live.reload(false) {
        Err(ReloadError::Invalid(diagnostics)) => {
            let text = diagnostics
                .errors()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n");
            assert!(text.contains("b.yaml:4:"), "{text}");
        }
        other => panic!("expected diagnostics, got {other:?}"),
    }
    assert_eq!((live.successes(), live.failures()), (0, 1));
    assert_eq!(live.config_hash(), hash);
    assert_eq!(hit(&live, "/login"), (3, 1));
}

#[test]
fn an_unreadable_path_or_no_path_keeps_the_running_config() {
    let scratch = Scratch::new("gone");
    std::fs::write(scratch.0.join("limits.yaml"), limits(3)).expect("written");
    let live = live(&scratch.0);
    std::fs::remove_dir_all(&scratch.0).expect("removed");
    assert!(matches!(
        live.reload(true),
        Err(ReloadError::Unreadable { .. })
    ));
    assert_eq!(live.failures(), 1);
    assert_eq!(hit(&live, "/login"), (3, 2));

    let fixed = LiveEngine::fixed(live.engine());
    assert!(matches!(fixed.reload(true), Err(ReloadError::NoSource)));
    assert_eq!(fixed.path(), None);
}

/// The limits with only `/keep`: what a half-written file holds before `/login` is written.
fn only_keep() -> String {
    "domain: edge
descriptors:
  - key: path
    value: /keep
    rate_limit: {unit: minute, requests_per_unit: 100}
"
    .to_owned()
}

/// Reloads `live` after the files changed, panicking unless new rules went into service.
fn reloaded(live: &LiveEngine<ManualClock>) {
    match live.reload(false) {
        Ok(ReloadOutcome::Reloaded(_)) => {}
        other => panic!("expected a reload, got {other:?}"),
    }
}

#[test]
fn a_rule_that_drops_out_of_a_reload_and_comes_back_keeps_its_count() {
    let scratch = Scratch::new("comeback");
    let file = scratch.0.join("limits.yaml");
    std::fs::write(&file, limits(3)).expect("written");
    let live = live(&scratch.0);
    for remaining in [2, 1, 0] {
        assert_eq!(hit(&live, "/login"), (3, remaining));
    }

    // Half-written: `/login` is missing, so it has no limit meanwhile.
    std::fs::write(&file, only_keep()).expect("written");
    reloaded(&live);
    assert_eq!(hit(&live, "/login"), (0, 0), "no rule, no limit");

    // Whole again: the login store comes back with its three hits.
    std::fs::write(&file, limits(3)).expect("written");
    reloaded(&live);
    let request = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![Descriptor::new([("path", "/login")])],
        hits_addend: 1,
    };
    let response = live.load().should_rate_limit(&request).expect("valid");
    assert_eq!(
        response.statuses[0].code,
        tollgate_protocol::rls::Code::OverLimit,
        "the 4th login in the minute: {response:?}"
    );
}

#[test]
fn retired_stores_are_bounded_by_the_setting() {
    let scratch = Scratch::new("retired-bound");
    let file = scratch.0.join("limits.yaml");
    std::fs::write(&file, limits(3)).expect("written");
    let read = read_config(&scratch.0, LoadOptions::default()).expect("readable");
    let (rules, _) = read.loaded.into_result().expect("valid");
    let engine = Engine::new(
        Arc::new(rules),
        EngineOptions {
            max_retired_stores: 0,
            ..EngineOptions::default()
        },
        ManualClock::new(Timestamp::from_secs(60 * 1000)),
    );
    let live = LiveEngine::new(
        Arc::new(engine),
        scratch.0.clone(),
        LoadOptions::default(),
        read.hash,
    );
    assert_eq!(hit(&live, "/login"), (3, 2));
    std::fs::write(&file, only_keep()).expect("written");
    reloaded(&live);
    std::fs::write(&file, limits(3)).expect("written");
    reloaded(&live);
    // None kept: the login counter started again, as it did before retiring.
    assert_eq!(hit(&live, "/login"), (3, 2));
}

/// The error lines of a failed reload.
fn reload_errors(live: &LiveEngine<ManualClock>) -> String {
    match live.reload(true) {
        Err(ReloadError::Invalid(diagnostics)) => diagnostics
            .errors()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        other => panic!("expected diagnostics, got {other:?}"),
    }
}

#[test]
fn a_reload_that_reads_no_file_or_no_rule_keeps_the_running_config() {
    let scratch = Scratch::new("empty");
    let file = scratch.0.join("limits.yaml");
    std::fs::write(&file, limits(3)).expect("written");
    let live = live(&scratch.0);
    assert_eq!(hit(&live, "/login"), (3, 2));

    // A dangling link where the file was (a ConfigMap's `..data` swapped to an empty version).
    std::fs::remove_file(&file).expect("removed");
    std::os::unix::fs::symlink("..data/limits.yaml", &file).expect("linked");
    let text = reload_errors(&live);
    assert!(
        text.contains("limits.yaml:1:1: error: a dangling symbolic link"),
        "{text}"
    );

    // No file at all.
    std::fs::remove_file(&file).expect("removed");
    let text = reload_errors(&live);
    assert!(text.contains("error: no limits file"), "{text}");

    // A file that defines no rate limit.
    std::fs::write(&file, "domain: edge\ndescriptors: []\n").expect("written");
    let text = reload_errors(&live);
    assert!(text.contains("defines no rate limit"), "{text}");

    assert_eq!(live.failures(), 3);
    assert_eq!(
        hit(&live, "/login"),
        (3, 1),
        "the running rules still serve"
    );

    // Explicitly allowed, the empty configuration goes into service.
    let allowing = LiveEngine::new(
        live.engine(),
        scratch.0.clone(),
        LoadOptions {
            allow_empty: true,
            ..LoadOptions::default()
        },
        0,
    );
    match allowing.reload(false) {
        Ok(ReloadOutcome::Reloaded(summary)) => assert_eq!(summary.rules, 0),
        other => panic!("expected a reload, got {other:?}"),
    }
    assert_eq!(hit(&allowing, "/login"), (0, 0));
}

/// `/keep`, then `/login` at `login` a minute, in block style (the style
/// whose prefixes parse most often: every line ends a valid document).
fn block_limits(login: u32) -> String {
    format!(
        "domain: edge
descriptors:
  - key: path
    value: /keep
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: path
    value: /login
    rate_limit:
      unit: minute
      requests_per_unit: {login}
"
    )
}

/// Issue 21: a slow writer that truncates the file and writes it again can
/// leave any prefix of it on disk when a reload reads it. Every such
/// intermediate state is loaded in turn (each one that parses goes into
/// service, each that does not is refused), and then the whole file, which
/// changes only `/login`'s rate: the 4 logins of the minute still count.
#[test]
fn every_prefix_of_a_rate_only_rewrite_keeps_the_count() {
    let scratch = Scratch::new("prefixes");
    let file = scratch.0.join("limits.yaml");
    std::fs::write(&file, block_limits(10)).expect("written");
    let live = live(&scratch.0);
    for remaining in [9, 8, 7, 6] {
        assert_eq!(hit(&live, "/login"), (10, remaining));
    }
    assert_eq!(hit(&live, "/keep"), (100, 99));

    let whole = block_limits(20);
    let (mut served, mut refused) = (0, 0);
    for end in 0..whole.len() {
        std::fs::write(&file, &whole[..end]).expect("written");
        match live.reload(true) {
            Ok(_) => served += 1,
            Err(_) => refused += 1,
        }
    }
    // Some prefixes lack `/login`, others cut its rate short ("2" of "20").
    assert!(
        served > 0 && refused > 0,
        "{served} served, {refused} refused"
    );
    std::fs::write(&file, &whole).expect("written");
    reloaded(&live);
    assert_eq!(
        hit(&live, "/login"),
        (20, 15),
        "the 5th login of the minute under a limit of 20"
    );
    assert_eq!(
        hit(&live, "/keep"),
        (100, 98),
        "the unchanged rule kept its count"
    );
}
