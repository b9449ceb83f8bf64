//! Overrides: limits for a domain and descriptor path set while serving (`/v1/overrides`), laid over the limits files' rules.
//!
//! An override is one descriptor of a limits file, sent as YAML or JSON
//! (`key`, `value` — exact or a `prefix*` pattern — the `rate_limit` and the
//! rule's options, and a nested `descriptors` entry per deeper level), and
//! is read by tollgate-rules' [`load_one_rule`](tollgate_rules::load_one_rule) so that its errors are the
//! limits file's. The rules in service are the files' with every override
//! put at its path ([`RuleSet::put_rule`](tollgate_rules::RuleSet::put_rule)): it replaces the file's rule
//! there, or adds one. [`OverrideSet`] holds them, bounded in count and in
//! the size of each; [`control`] changes them, keeps them (in a file, or in
//! Redis for a fleet, [`fleet`]) and puts them in service as a reload does;
//! [`api`] serves them over HTTP, with [`access`] deciding who may;
//! [`gauges`] shows them beside their bounds.

pub mod access;
pub mod api;
pub mod control;
pub mod file;
pub mod fleet;
pub mod gauges;
pub mod model;

pub use control::{ChangeError, Overrides};
pub use model::{
    DEFAULT_MAX_OVERRIDE_BYTES, DEFAULT_MAX_OVERRIDES, DescriptorPath, InvalidOverride,
    OVERRIDE_SOURCE, Override, OverrideBounds, OverrideKey, OverrideRecord, OverrideSet,
};
