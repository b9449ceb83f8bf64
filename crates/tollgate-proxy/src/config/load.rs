//! Reading configuration files: [`load_proxy_file`] for the proxy's YAML, [`load_local_ratelimit_file`] for an Istio `EnvoyFilter` or a bare `LocalRateLimit`.

use std::path::Path;

use super::envoy::{
    EnvoyFilter, LOCAL_RATELIMIT_FILTER, LOCAL_RATELIMIT_TYPE, LocalRateLimitConfig,
    TYPED_STRUCT_TYPES,
};
use super::error::ConfigError;
use super::path::ConfigPath;
use super::proxy::ProxyConfig;

/// Reads a file as text.
fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|error| ConfigError::new(path, format!("cannot read the file: {error}")))
}

/// Reads and parses the proxy's YAML (no semantic checks; see `crate::build`).
pub fn load_proxy_file(path: &Path) -> Result<ProxyConfig, ConfigError> {
    let text = read(path)?;
    serde_saphyr::from_str::<ProxyConfig>(&text).map_err(|e| ConfigError::from_yaml(path, &e))
}

/// What a local rate limit file held.
#[derive(Clone, Debug)]
pub struct LocalRateLimitFile {
    /// The effective `LocalRateLimit` (unwrapped).
    pub config: LocalRateLimitConfig,
    /// Where it came from inside the file, for messages (`spec.configPatches[0]…`).
    pub origin: ConfigPath,
}

/// Reads an Istio `EnvoyFilter` or a bare `LocalRateLimit` from `path`.
///
/// In an EnvoyFilter, the `HTTP_FILTER` patch inserting
/// `envoy.filters.http.local_ratelimit` gives the filter's config; an
/// `HTTP_ROUTE` / `VIRTUAL_HOST` patch with a `typed_per_filter_config` for
/// that filter replaces it (as a per-route config does in Envoy; the proxy
/// applies it to every route it covers). `Ok(None)` when an EnvoyFilter has
/// no local rate limit at all.
pub fn load_local_ratelimit_file(path: &Path) -> Result<Option<LocalRateLimitFile>, ConfigError> {
    let text = read(path)?;
    let probe: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|e| ConfigError::from_yaml(path, &e))?;
    if probe.get("kind").is_some() || probe.get("apiVersion").is_some() {
        let filter: EnvoyFilter =
            serde_saphyr::from_str(&text).map_err(|e| ConfigError::from_yaml(path, &e))?;
        return local_ratelimit_from_envoy_filter(path, &filter);
    }
    let config: LocalRateLimitConfig =
        serde_saphyr::from_str(&text).map_err(|e| ConfigError::from_yaml(path, &e))?;
    let origin = ConfigPath::from("the file");
    let config = unwrap_typed(path, &origin, config)?;
    Ok(Some(LocalRateLimitFile { config, origin }))
}

fn local_ratelimit_from_envoy_filter(
    path: &Path,
    filter: &EnvoyFilter,
) -> Result<Option<LocalRateLimitFile>, ConfigError> {
    if filter.kind != "EnvoyFilter" {
        return Err(ConfigError::new(
            path,
            format!("kind is `{}`; expected `EnvoyFilter`", filter.kind),
        ));
    }
    let mut listener_level = None;
    let mut route_level = None;
    for (i, patch) in filter.spec.config_patches.iter().enumerate() {
        let Some(value) = &patch.patch.value else {
            continue;
        };
        let at = ConfigPath::root()
            .key("spec")
            .key("configPatches")
            .index(i)
            .key("patch")
            .key("value");
        match patch.apply_to.as_str() {
            "HTTP_FILTER" => {
                if value.get("name").and_then(|n| n.as_str()) != Some(LOCAL_RATELIMIT_FILTER) {
                    continue;
                }
                let Some(typed) = value.get("typed_config") else {
                    return Err(ConfigError::field(
                        path,
                        at.error(format!(
                            "the {LOCAL_RATELIMIT_FILTER} filter has no typed_config"
                        )),
                    ));
                };
                let origin = at.key("typed_config");
                listener_level = Some(LocalRateLimitFile {
                    config: from_value(path, &origin, typed)?,
                    origin,
                });
            }
            "HTTP_ROUTE" | "VIRTUAL_HOST" | "ROUTE_CONFIGURATION" => {
                let Some(typed) = value
                    .get("typed_per_filter_config")
                    .and_then(|m| m.get(LOCAL_RATELIMIT_FILTER))
                else {
                    continue;
                };
                let origin = at
                    .key("typed_per_filter_config")
                    .key(LOCAL_RATELIMIT_FILTER);
                let config = from_value(path, &origin, typed)?;
                if config.token_bucket.is_none() {
                    return Err(ConfigError::field(
                        path,
                        origin.error("a per-route local rate limit needs a token_bucket"),
                    ));
                }
                route_level = Some(LocalRateLimitFile { config, origin });
            }
            _ => {}
        }
    }
    Ok(route_level.or(listener_level))
}

fn from_value(
    path: &Path,
    origin: &ConfigPath,
    value: &serde_json::Value,
) -> Result<LocalRateLimitConfig, ConfigError> {
    let config: LocalRateLimitConfig = serde_json::from_value(value.clone())
        .map_err(|error| ConfigError::field(path, origin.error(error.to_string())))?;
    unwrap_typed(path, origin, config)
}

/// Resolves the `@type` / TypedStruct wrappers around a `LocalRateLimit`.
pub fn unwrap_typed(
    path: &Path,
    origin: &ConfigPath,
    mut config: LocalRateLimitConfig,
) -> Result<LocalRateLimitConfig, ConfigError> {
    match config.type_url_at.take() {
        Some(t) if TYPED_STRUCT_TYPES.contains(&t.as_str()) => {
            match config.type_url.take().as_deref() {
                Some(LOCAL_RATELIMIT_TYPE) => {}
                Some(other) => {
                    return Err(ConfigError::field(
                        path,
                        origin.error(format!(
                            "type_url is `{other}`; expected `{LOCAL_RATELIMIT_TYPE}`"
                        )),
                    ));
                }
                None => {
                    return Err(ConfigError::field(
                        path,
                        origin.error("a TypedStruct needs a type_url"),
                    ));
                }
            }
            let Some(value) = config.value.take() else {
                return Err(ConfigError::field(
                    path,
                    origin.error("a TypedStruct needs a value"),
                ));
            };
            if config.stat_prefix.is_some() || config.token_bucket.is_some() {
                return Err(ConfigError::field(
                    path,
                    origin.error("LocalRateLimit fields belong inside the TypedStruct's value"),
                ));
            }
            let inner = *value;
            if inner.type_url_at.is_some() || inner.type_url.is_some() || inner.value.is_some() {
                return Err(ConfigError::field(
                        path,
                        origin.key("value").error("@type, type_url and value are TypedStruct fields, not LocalRateLimit fields"),
                    ));
            }
            Ok(inner)
        }
        Some(t) if t == LOCAL_RATELIMIT_TYPE => no_wrapper_fields(path, origin, config),
        Some(other) => Err(ConfigError::field(
            path,
            origin.error(format!(
                "@type `{other}` is neither {LOCAL_RATELIMIT_TYPE} nor a udpa.type.v1.TypedStruct"
            )),
        )),
        None => no_wrapper_fields(path, origin, config),
    }
}

fn no_wrapper_fields(
    path: &Path,
    origin: &ConfigPath,
    config: LocalRateLimitConfig,
) -> Result<LocalRateLimitConfig, ConfigError> {
    if config.type_url.is_some() || config.value.is_some() {
        return Err(ConfigError::field(
            path,
            origin.error(
                "type_url and value need \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct",
            ),
        ));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn file(name: &str, text: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tollgate-proxy-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const FILTER: &str = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: f}\nspec:\n  workloadSelector: {labels: {app: a}}\n  configPatches:\n    - applyTo: HTTP_FILTER\n      match: {context: SIDECAR_INBOUND}\n      patch:\n        operation: INSERT_BEFORE\n        value:\n          name: envoy.filters.http.local_ratelimit\n          typed_config:\n            \"@type\": type.googleapis.com/udpa.type.v1.TypedStruct\n            type_url: type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n            value: {stat_prefix: listener}\n";

    #[test]
    fn an_envoy_filter_gives_its_filter_config_and_a_route_patch_replaces_it() {
        let only_filter = load_local_ratelimit_file(&file("a.yaml", FILTER))
            .unwrap()
            .unwrap();
        assert_eq!(only_filter.config.stat_prefix.as_deref(), Some("listener"));
        let with_route = format!(
            "{FILTER}    - applyTo: HTTP_ROUTE\n      patch:\n        operation: MERGE\n        value:\n          typed_per_filter_config:\n            envoy.filters.http.local_ratelimit:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n              stat_prefix: route\n              token_bucket: {{max_tokens: 4, fill_interval: 60s}}\n"
        );
        let loaded = load_local_ratelimit_file(&file("b.yaml", &with_route))
            .unwrap()
            .unwrap();
        assert_eq!(loaded.config.stat_prefix.as_deref(), Some("route"));
        assert!(
            loaded
                .origin
                .to_string()
                .contains("typed_per_filter_config")
        );
    }

    #[test]
    fn a_bare_config_loads_typed_or_wrapped_and_a_typo_names_line_and_column() {
        let typed = file(
            "c.yaml",
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\nstat_prefix: t\n",
        );
        assert!(load_local_ratelimit_file(&typed).unwrap().is_some());
        let typo = file(
            "d.yaml",
            "stat_prefix: t\ntoken_bucket:\n  max_tokens: 1\n  fil_interval: 1s\n",
        );
        let error = load_local_ratelimit_file(&typo).unwrap_err();
        assert_eq!(error.position.map(|p| p.0), Some(4), "{error}");
        assert!(error.to_string().contains("fil_interval"), "{error}");
        let none = file(
            "e.yaml",
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nspec:\n  configPatches: []\n",
        );
        assert!(load_local_ratelimit_file(&none).unwrap().is_none());
    }

    /// Every duration field of the proxy's YAML, in one order.
    fn durations(config: &ProxyConfig) -> Vec<std::time::Duration> {
        let priority = config.routes[0].priority_shedding.as_ref().unwrap();
        let queue = priority.queue.as_ref().unwrap();
        let local = config.local_ratelimit.as_ref().unwrap();
        let global = config.global_ratelimit.as_ref().unwrap();
        let cluster = &config.clusters[0];
        let outlier = cluster.outlier_detection.as_ref().unwrap();
        let breaker = cluster.circuit_breaker.as_ref().unwrap();
        let health = cluster.health_check.as_ref().unwrap();
        let route = &config.routes[0];
        vec![
            local.token_bucket.as_ref().unwrap().fill_interval,
            local.descriptors[0]
                .token_bucket
                .as_ref()
                .unwrap()
                .fill_interval,
            global.timeout.unwrap(),
            config
                .rate_limit_response
                .as_ref()
                .unwrap()
                .retry_after_jitter
                .unwrap(),
            cluster.connect_timeout.unwrap(),
            outlier.interval,
            outlier.base_ejection_time,
            outlier.max_ejection_time,
            breaker.open_duration,
            breaker.max_open_duration,
            health.interval,
            health.timeout,
            route.timeout.unwrap(),
            route
                .concurrency_limit
                .as_ref()
                .unwrap()
                .retry_after
                .unwrap(),
            priority.retry_after,
            queue.max_wait,
            queue.aging,
        ]
    }

    fn every_duration(d: &str) -> String {
        format!(
            "listeners: [{{address: '127.0.0.1:0'}}]\n\
             local_ratelimit:\n  stat_prefix: l\n  token_bucket: {{max_tokens: 1, fill_interval: {d}}}\n  descriptors: [{{entries: [{{key: k}}], token_bucket: {{max_tokens: 1, fill_interval: {d}}}}}]\n\
             global_ratelimit: {{domain: d, rate_limit_service: {{address: '127.0.0.1:1'}}, timeout: {d}}}\n\
             rate_limit_response: {{retry_after_jitter: {d}}}\n\
             clusters:\n  - name: c\n    endpoints: [{{address: '127.0.0.1:2'}}]\n    connect_timeout: {d}\n\
             \x20   outlier_detection: {{interval: {d}, base_ejection_time: {d}, max_ejection_time: {d}}}\n\
             \x20   circuit_breaker: {{open_duration: {d}, max_open_duration: {d}}}\n\
             \x20   health_check: {{interval: {d}, timeout: {d}, path: /healthz}}\n\
             routes:\n  - cluster: c\n    timeout: {d}\n\
             \x20   concurrency_limit: {{max_in_flight: 1, retry_after: {d}}}\n\
             \x20   priority_shedding: {{max_in_flight: 10, retry_after: {d}, queue: {{max_queued: 5, max_wait: {d}, aging: {d}}}}}\n"
        )
    }

    #[test]
    fn every_duration_field_reads_the_same_forms_and_a_bad_one_names_its_place() {
        for (text, expected) in [
            ("0.5s", std::time::Duration::from_millis(500)),
            ("500ms", std::time::Duration::from_millis(500)),
            ("1m", std::time::Duration::from_secs(60)),
        ] {
            let path = file(&format!("durations-{text}.yaml"), &every_duration(text));
            let config = load_proxy_file(&path).unwrap_or_else(|e| panic!("{text}: {e}"));
            let read = durations(&config);
            assert_eq!(read.len(), 17);
            assert!(read.iter().all(|d| *d == expected), "{text}: {read:?}");
        }
        let path = file(
            "durations-bad.yaml",
            &every_duration("1m").replace(
                "retry_after: 1m}\n\x20   priority",
                "retry_after: 5 parsecs}\n    priority",
            ),
        );
        let error = load_proxy_file(&path).unwrap_err();
        assert_eq!(error.position.map(|p| p.0), Some(18), "{error}");
        assert!(error.to_string().contains("`5 parsecs`"), "{error}");
    }
}
