//! The flags that say how limits files are read, shared by `tollgate serve` and `tollgate validate`.

use clap::Args;
use clap::builder::BoolishValueParser;
use tollgate_rules::{DEFAULT_MAX_YAML_DEPTH, DEFAULT_MAX_YAML_NODES, LoadOptions, YamlLimits};

/// How the limits files are read and combined.
#[derive(Args, Debug, Clone)]
pub struct LimitsArgs {
    /// Merge files that name the same domain instead of rejecting the second
    /// (upstream's MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS", value_parser = BoolishValueParser::new())]
    pub merge_domains: bool,
    /// Accept a configuration that reads no limits file (an empty directory,
    /// only dangling links) or defines no rate limit, and serve every request
    /// unlimited. Without it such a configuration is an error at start, in
    /// `validate` and on reload (which keeps the running rules).
    #[arg(long, env = "TOLLGATE_ALLOW_EMPTY_CONFIG", value_parser = BoolishValueParser::new())]
    pub allow_empty_config: bool,
    /// The most YAML nodes (scalars, lists, mappings) one limits file may
    /// hold, about 8 per rule; loading costs roughly 300 bytes per node
    /// while the file is read.
    #[arg(long, env = "TOLLGATE_CONFIG_MAX_NODES", value_name = "N", default_value_t = DEFAULT_MAX_YAML_NODES)]
    pub config_max_nodes: usize,
    /// The deepest nesting of YAML lists and mappings in one limits file;
    /// each level of nested `descriptors` takes two.
    #[arg(long, env = "TOLLGATE_CONFIG_MAX_DEPTH", value_name = "N", default_value_t = DEFAULT_MAX_YAML_DEPTH)]
    pub config_max_depth: usize,
}

impl LimitsArgs {
    /// The loader's options these flags ask for.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            merge_domains: self.merge_domains,
            allow_empty: self.allow_empty_config,
            yaml: YamlLimits {
                max_nodes: self.config_max_nodes,
                max_depth: self.config_max_depth,
            },
        }
    }
}
