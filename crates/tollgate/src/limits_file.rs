//! Reading the limits at start, for `tollgate serve` and `tollgate proxy --limits`: every diagnostic on stderr, a summary in the log.

use std::path::Path;

use tollgate_rules::{LoadOptions, RuleSet};
use tollgate_server::reload::read_config;

use crate::CommandError;

/// The rules read at start and the hash of what was read.
pub struct StartRules {
    /// The rules.
    pub rules: RuleSet,
    /// The hash of the files read (`/rlconfig`, reloads).
    pub hash: u64,
}

/// Reads the limits file or directory at `path` with `options`; a
/// configuration with any error prints each diagnostic as
/// `file:line:col: …` and is refused, naming the path.
pub fn read_at_start(path: &Path, options: LoadOptions) -> Result<StartRules, CommandError> {
    let read = read_config(path, options).map_err(|error| {
        CommandError::Failed(format!("cannot read {}: {error}", path.display()))
    })?;
    let hash = read.hash;
    let loaded = read.loaded;
    let file_count = loaded.file_count;
    let (rules, warnings) = match loaded.into_result() {
        Ok(ok) => ok,
        Err(diagnostics) => {
            for diagnostic in diagnostics.all() {
                crate::logging::diagnostic(diagnostic);
            }
            return Err(CommandError::Failed(format!(
                "{} has errors; not starting",
                path.display()
            )));
        }
    };
    for diagnostic in warnings.all() {
        crate::logging::diagnostic(diagnostic);
    }
    tracing::info!(
        config = %path.display(),
        files = file_count,
        domains = rules.domain_count(),
        rules = rules.rule_count(),
        hash = %format_args!("{hash:016x}"),
        "limits loaded"
    );
    Ok(StartRules { rules, hash })
}
