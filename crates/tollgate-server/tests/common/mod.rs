//! Setup shared by the tests that run the servers in-process on loopback.
//!
//! Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpListener;
use tollgate_core::{ManualClock, Timestamp};
use tollgate_rules::{LoadOptions, load_sources};
use tollgate_server::{Engine, EngineOptions};

/// A minute boundary: a whole number of minutes since the epoch.
pub const MINUTE_START: u64 = 1_699_999_980;

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

/// A listener on an ephemeral port of 127.0.0.1.
pub async fn bind_loopback() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback")
}
