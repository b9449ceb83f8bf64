//! One load of limits files: its options, its findings, the domains built so far, and its result.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::diagnostics::Diagnostics;
use crate::model::{DomainRules, RuleSet};
use crate::tree::{Position, YamlLimits};

/// Switches that change how files are read and combined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Merge files that name the same domain (upstream's `MERGE_DOMAIN_CONFIG`)
    /// instead of rejecting the second one; duplicate descriptors are still errors.
    pub merge_domains: bool,
    /// Accept a configuration that reads no limits file or defines no rate
    /// limit (so every request is unlimited) instead of rejecting it.
    pub allow_empty: bool,
    /// How much YAML one file may hold.
    pub yaml: YamlLimits,
}

/// The result of loading: the rules that loaded, and everything found wrong.
///
/// When `diagnostics` has errors, `rule_set` holds only what could be read
/// and must not replace a running configuration.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// The rules.
    pub rule_set: RuleSet,
    /// Errors and warnings, sorted by file and position.
    pub diagnostics: Diagnostics,
    /// How many files were read.
    pub file_count: usize,
}

impl Loaded {
    /// The rules and their warnings if there were no errors, else all diagnostics.
    pub fn into_result(self) -> Result<(RuleSet, Diagnostics), Diagnostics> {
        if self.diagnostics.has_errors() {
            Err(self.diagnostics)
        } else {
            Ok((self.rule_set, self.diagnostics))
        }
    }
}

/// Stack for the loading thread per level of YAML nesting allowed, with room to spare in a debug build.
const STACK_PER_YAML_LEVEL: usize = 64 << 10;

/// Stack for the loading thread besides the nesting.
const BASE_STACK: usize = 1 << 20;

/// Loads limits files given as `(file name, text)` pairs, in order.
///
/// The YAML reader and the loader recurse once per level of nesting, so
/// the work runs on a thread of its own whose stack fits
/// [`YamlLimits::max_depth`](crate::YamlLimits::max_depth) levels, whatever
/// thread calls (a reload runs on a 2 MiB blocking thread).
pub fn load_sources<'a>(
    sources: impl IntoIterator<Item = (&'a Path, &'a str)>,
    options: LoadOptions,
) -> Loaded {
    let sources: Vec<(&Path, &str)> = sources.into_iter().collect();
    let stack = options
        .yaml
        .max_depth
        .saturating_mul(STACK_PER_YAML_LEVEL)
        .saturating_add(BASE_STACK);
    std::thread::scope(|scope| {
        let loading = std::thread::Builder::new()
            .name("tollgate-load".to_owned())
            .stack_size(stack)
            .spawn_scoped(scope, || load_on_this_thread(&sources, options));
        match loading {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // No thread to be had: load here, as deep as this stack goes.
            Err(_) => load_on_this_thread(&sources, options),
        }
    })
}

/// [`load_sources`] on the calling thread.
fn load_on_this_thread(sources: &[(&Path, &str)], options: LoadOptions) -> Loaded {
    let mut loader = Loader {
        options,
        diagnostics: Diagnostics::new(),
        domains: HashMap::new(),
        replaces: Vec::new(),
    };
    for (file, text) in sources {
        loader.load_file(file, text);
    }
    loader.check_replaces();
    let mut diagnostics = loader.diagnostics;
    diagnostics.sort();
    Loaded {
        rule_set: RuleSet {
            domains: loader
                .domains
                .into_iter()
                .map(|(name, d)| (name, d.rules))
                .collect(),
        },
        diagnostics,
        file_count: sources.len(),
    }
}

/// A domain being built, with where it was first named.
pub(super) struct DomainUnderConstruction {
    pub(super) rules: DomainRules,
    pub(super) file: PathBuf,
    pub(super) position: Position,
}

/// A `replaces` name waiting to be checked against every name in its domain.
pub(super) struct PendingReplace {
    pub(super) domain: String,
    pub(super) file: PathBuf,
    pub(super) position: Position,
    pub(super) name: String,
}

/// The state of one load: options, findings, and the domains built so far.
pub(super) struct Loader {
    pub(super) options: LoadOptions,
    pub(super) diagnostics: Diagnostics,
    pub(super) domains: HashMap<String, DomainUnderConstruction>,
    pub(super) replaces: Vec<PendingReplace>,
}

/// Where a descriptor sits, for messages and for the rule's path.
pub(super) struct Context<'a> {
    pub(super) file: &'a Path,
    pub(super) domain: &'a str,
}

impl Loader {
    /// Reports every `replaces` name that no limit in its domain has.
    fn check_replaces(&mut self) {
        let pending = std::mem::take(&mut self.replaces);
        for replace in pending {
            let known = self.domains.get(&replace.domain).is_some_and(|d| {
                d.rules
                    .nodes
                    .iter()
                    .filter_map(|n| n.rule.as_ref())
                    .flat_map(|r| r.limits.iter())
                    .any(|l| l.name.as_deref() == Some(replace.name.as_str()))
            });
            if !known {
                self.diagnostics.error(
                    &replace.file,
                    replace.position,
                    format!(
                        "`replaces` names `{}`, but no rate limit in domain `{}` has that name",
                        replace.name, replace.domain
                    ),
                );
            }
        }
    }
}
