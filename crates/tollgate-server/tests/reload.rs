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
    // The unchanged limit kept its count; the changed one starts over.
    assert_eq!(hit(&live, "/keep"), (100, 98));
    assert_eq!(hit(&live, "/login"), (5, 4));

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
