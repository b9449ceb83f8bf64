//! Tollgate's limits files: loading, validation with file:line:column messages, and the descriptor matcher.
//!
//! Must not know (the README's layout table): how counters are stored ([`Rule::counter_key`] only names them), networking, reloading.
//!
//! A limits file in envoyproxy/ratelimit's format loads unchanged into a
//! [`RuleSet`]; Tollgate's extensions (`algorithm`, `burst`, `delay`,
//! `unit_multiplier`, `window`, `rate_limits`, and on a descriptor
//! `on_store_error`, `lease`, `stagger`) ride on the same tree. Every
//! problem becomes a [`Diagnostic`] naming its file, line and column, and all
//! of them are collected before loading fails.
//!
//! ```
//! use std::path::Path;
//! use tollgate_rules::{LoadOptions, load_sources};
//!
//! let yaml = "\
//! domain: api
//! descriptors:
//!   - key: user
//!     rate_limit:
//!       unit: minute
//!       requests_per_unit: 10
//! ";
//! let file = Path::new("limits.yaml");
//! let (rules, warnings) = load_sources([(file, yaml)], LoadOptions::default())
//!     .into_result()
//!     .expect("a valid file");
//! assert!(warnings.is_empty());
//! let rule = rules.find("api", &[("user", "alice")]).expect("alice's rule");
//! assert_eq!(rule.limits[0].requests_per_unit, 10);
//! assert!(rules.find("api", &[("tenant", "acme")]).is_none());
//!
//! // A typo fails the load with the file, line and column of the problem.
//! let typo = yaml.replace("minute", "minnute");
//! let errors = load_sources([(file, typo.as_str())], LoadOptions::default())
//!     .into_result()
//!     .unwrap_err();
//! assert!(errors.to_string().starts_with("limits.yaml:5:"), "{errors}");
//! ```

#![forbid(unsafe_code)]

mod algorithm;
mod diagnostics;
mod load;
mod model;
mod overlay;
mod tree;

pub use algorithm::AlgorithmKind;
pub use diagnostics::{Diagnostic, Diagnostics, Severity};
pub use load::{
    LoadOptions, Loaded, limits_files, load_one_rule, load_path, load_path_observed, load_sources,
};
pub use model::{Applied, LevelOptions, Limit, Rule, RuleSet, StoreErrorPolicy, WindowLength};
pub use tree::{DEFAULT_MAX_YAML_DEPTH, DEFAULT_MAX_YAML_NODES, Position, YamlLimits};
