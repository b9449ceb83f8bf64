//! An engine on inline YAML limits and a manual clock, for the tests that run the servers in-process.

use std::path::Path;
use std::sync::Arc;

use tollgate_core::{ManualClock, Timestamp};
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_server::{Engine, EngineOptions};

use crate::minute::MINUTE_START;

/// An engine on the inline YAML `limits` (which must load without errors) and its
/// clock, set `millis_into_minute` after [`MINUTE_START`].
pub fn engine(limits: &str, millis_into_minute: u64) -> (Arc<Engine<ManualClock>>, ManualClock) {
    let loaded = load_sources([(Path::new("test.yaml"), limits)], LoadOptions::default());
    assert!(!loaded.diagnostics.has_errors(), "{}", loaded.diagnostics);
    let clock = ManualClock::new(Timestamp::from_millis(
        MINUTE_START * 1000 + millis_into_minute,
    ));
    let engine = Arc::new(Engine::new(
        Arc::new(loaded.rule_set),
        EngineOptions::default(),
        clock.clone(),
    ));
    (engine, clock)
}
