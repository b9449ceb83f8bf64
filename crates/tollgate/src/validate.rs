//! `tollgate validate PATH`: checks limits files and reports every problem with its file, line and column.

use std::path::PathBuf;

use clap::Args;
use tollgate_rules::load_path;

use crate::CommandError;
use crate::limits_args::LimitsArgs;

/// The arguments of `tollgate validate`.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// A limits file, or a directory of `*.yaml` / `*.yml` limits files.
    pub path: PathBuf,
    /// How the files are read.
    #[command(flatten)]
    pub limits: LimitsArgs,
    /// How diagnostics and errors are written.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
}

/// Loads the limits at `args.path`, prints each diagnostic on stderr and a summary on stdout.
///
/// Succeeds when there are no errors (warnings are allowed); a path that
/// cannot be read is a usage error, and a configuration that reads no file
/// or defines no rate limit is an error unless `--allow-empty-config`.
pub fn run(args: &ValidateArgs) -> Result<(), CommandError> {
    let options = args.limits.load_options();
    let loaded = load_path(&args.path, options).map_err(|error| {
        CommandError::Usage(format!("cannot read {}: {error}", args.path.display()))
    })?;
    for diagnostic in loaded.diagnostics.all() {
        crate::logging::diagnostic(diagnostic);
    }
    let errors = loaded.diagnostics.error_count();
    let warnings = loaded.diagnostics.warning_count();
    let counts = format!(
        "{}, {}, {}",
        counted(loaded.file_count, "file"),
        counted(loaded.rule_set.domain_count(), "domain"),
        counted(loaded.rule_set.rule_count(), "rule"),
    );
    let verdict = match (errors, warnings) {
        (0, 0) => "OK".to_owned(),
        (0, w) => format!("OK, {}", counted(w, "warning")),
        (e, 0) => counted(e, "error"),
        (e, w) => format!("{}, {}", counted(e, "error"), counted(w, "warning")),
    };
    crate::stdout_text::print(&format!("{counts}: {verdict}\n"))
        .map_err(|error| CommandError::Failed(format!("cannot write the verdict: {error}")))?;
    if errors > 0 {
        return Err(CommandError::Failed(format!(
            "{} has {}",
            args.path.display(),
            counted(errors, "error")
        )));
    }
    Ok(())
}

/// `1 file`, `2 files`.
fn counted(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}
