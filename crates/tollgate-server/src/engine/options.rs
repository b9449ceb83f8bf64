//! [`EngineOptions`]: how an engine runs (shadow and quota modes, stopped increments, and the sizes of its stores).

use tollgate_store::{DEFAULT_MAX_RETIRED_STORES, StoreConfig};

/// How an [`Engine`](super::Engine) runs: shadow mode and store sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// Answer OK overall whatever the statuses say (upstream's `SHADOW_MODE`).
    pub global_shadow_mode: bool,
    /// Treat every descriptor as `quota_mode` (upstream's `QUOTA_MODE`).
    pub global_quota_mode: bool,
    /// When a descriptor of a request is over its limit, give back what the
    /// request's other descriptors consumed, so a rejected request spends no
    /// other quota (upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub stop_increment_when_over_limit: bool,
    /// The size of each rule store (one per distinct algorithm).
    pub store_config: StoreConfig,
    /// The size of each store created for descriptor `limit` overrides.
    pub override_store_config: StoreConfig,
    /// The most override stores kept (one per distinct override limit).
    /// When one more is needed, the store used longest ago is dropped only
    /// if every key in it is fresh; otherwise the new limit's requests are
    /// denied until one is. This bounds memory against callers sending many
    /// distinct limits, and no counter in use ever starts again.
    pub max_override_stores: usize,
    /// The most stores kept after a reload left their algorithm without a
    /// rule, so a rule that drops out (a half-written file) and comes back
    /// keeps its counts; each is dropped once all its keys are fresh. Each
    /// holds at most `store_config.max_keys` keys.
    pub max_retired_stores: usize,
}

impl Default for EngineOptions {
    /// No shadow or quota mode, every descriptor counted, default-sized rule stores, 100 000-key override stores, at most 1024 of them,
    /// and up to [`DEFAULT_MAX_RETIRED_STORES`] retired stores.
    fn default() -> Self {
        EngineOptions {
            global_shadow_mode: false,
            global_quota_mode: false,
            stop_increment_when_over_limit: false,
            store_config: StoreConfig::default(),
            override_store_config: StoreConfig::with_max_keys(100_000),
            max_override_stores: 1024,
            max_retired_stores: DEFAULT_MAX_RETIRED_STORES,
        }
    }
}
