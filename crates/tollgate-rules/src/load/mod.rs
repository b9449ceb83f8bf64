//! Reading limits files into a [`crate::RuleSet`], checking everything on the way.
//!
//! `files` finds and reads the files at a path; `loader` holds one load's
//! state and result; `document` walks a file's top level into its domain;
//! `one_rule` loads a single descriptor on its own (an override); `descriptor` loads one descriptor and `rate_limit` one `rate_limit`
//! block; `sections` knows which keys belong where (and suggests the nearest
//! for a typo); `values` reads a scalar as the type its key wants.

mod descriptor;
mod document;
mod files;
mod loader;
mod one_rule;
mod rate_limit;
mod sections;
mod values;

pub use files::{limits_files, load_path, load_path_observed};
pub use loader::{LoadOptions, Loaded, load_sources};
pub use one_rule::load_one_rule;

use loader::{Context, DomainUnderConstruction, Loader, PendingReplace};
