//! `tollgate serve`'s flags of the overrides API: who may use it, where overrides are kept, and their bounds.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tollgate_server::overrides::{
    DEFAULT_MAX_OVERRIDE_BYTES, DEFAULT_MAX_OVERRIDES, OverrideBounds,
};

use super::args::{parse_cap, parse_timeout};

/// The overrides API (`/v1/overrides`, `/v1/usage`) on the HTTP listener.
#[derive(Args, Debug, Clone)]
pub struct OverridesArgs {
    /// A file of bearer tokens the overrides API accepts, one a line
    /// (`ID:TOKEN`, or a bare token named `line-N`; at least 16 bytes
    /// each); changes are logged with the token's ID. Without it (and
    /// without mutual TLS on the HTTP listener) the API answers only on a
    /// loopback listener.
    #[arg(long, env = "TOLLGATE_OVERRIDES_TOKEN_FILE", value_name = "PATH")]
    pub overrides_token_file: Option<PathBuf>,
    /// Keep a single instance's overrides in this file (JSON, rewritten by a
    /// rename on every change, read at start: a bad file stops the start).
    /// With a Redis store the overrides are kept in Redis instead.
    #[arg(long, env = "TOLLGATE_OVERRIDES_FILE", value_name = "PATH")]
    pub overrides_file: Option<PathBuf>,
    /// The most overrides held; setting one more is refused with 409.
    #[arg(long, env = "TOLLGATE_MAX_OVERRIDES", value_name = "N", default_value_t = DEFAULT_MAX_OVERRIDES, value_parser = parse_cap)]
    pub max_overrides: usize,
    /// The most bytes of one override's text; a larger one is refused with 413.
    #[arg(long, env = "TOLLGATE_MAX_OVERRIDE_BYTES", value_name = "BYTES", default_value_t = DEFAULT_MAX_OVERRIDE_BYTES, value_parser = parse_cap)]
    pub max_override_bytes: usize,
    /// With a Redis store: how often each instance checks the overrides'
    /// version in Redis and applies a change (at most 1s).
    #[arg(long, env = "TOLLGATE_OVERRIDES_POLL_INTERVAL", value_name = "DURATION", default_value = "250ms", value_parser = parse_poll_interval)]
    pub overrides_poll_interval: Duration,
}

impl OverridesArgs {
    /// The bounds the flags set.
    pub fn bounds(&self) -> OverrideBounds {
        OverrideBounds {
            max_overrides: self.max_overrides,
            max_bytes: self.max_override_bytes,
        }
    }
}

/// A poll interval: above zero and at most a second.
fn parse_poll_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_timeout(text)?;
    if interval > Duration::from_secs(1) {
        return Err(format!(
            "{text:?} is longer than 1s: every instance applies a change within a second"
        ));
    }
    Ok(interval)
}
