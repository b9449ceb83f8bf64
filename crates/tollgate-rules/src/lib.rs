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
