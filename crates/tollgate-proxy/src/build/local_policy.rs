//! A local rate limit policy of the listener or of a route: inline, or read from its own file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::envoy::LocalRateLimitConfig;
use crate::config::{self, ConfigError, ConfigPath};
use crate::local_ratelimit::LocalRateLimitPolicy;

/// The local rate limit policy at `at` in `file`: inline (`local_ratelimit`) or read from its own file (`local_ratelimit_file`, relative to `base`, added to `watched`); `None` when neither is set.
pub(super) fn local_policy(
    file: &Path,
    base: &Path,
    inline: Option<&LocalRateLimitConfig>,
    from_file: Option<&PathBuf>,
    per_route: bool,
    at: &ConfigPath,
    watched: &mut Vec<PathBuf>,
) -> Result<Option<Arc<LocalRateLimitPolicy>>, ConfigError> {
    let (config, origin, source) = match (inline, from_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::field(
                file,
                at.error("set local_ratelimit or local_ratelimit_file, not both"),
            ));
        }
        (Some(c), None) => (
            config::unwrap_typed(file, at, c.clone())?,
            at.key("local_ratelimit"),
            file.to_path_buf(),
        ),
        (None, Some(path)) => {
            let path = base.join(path);
            watched.push(path.clone());
            match config::load_local_ratelimit_file(&path)? {
                Some(loaded) => (loaded.config, loaded.origin, path),
                None => return Ok(None),
            }
        }
        (None, None) => return Ok(None),
    };
    LocalRateLimitPolicy::compile(&config, per_route, &origin)
        .map(|p| Some(Arc::new(p)))
        .map_err(|e| ConfigError::field(&source, e))
}
