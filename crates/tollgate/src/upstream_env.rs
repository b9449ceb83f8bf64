//! envoyproxy/ratelimit's environment variables: the one table of what Tollgate does with each.
//!
//! Every variable upstream reads is listed in [`VARIABLES`] (or, for a
//! family such as `MEMCACHE_*`, in [`FAMILIES`]) with its disposition:
//! * [`Disposition::Honoured`]: read with upstream's meaning and default by
//!   the code that builds the settings (`serve`, `upstream_redis`, …);
//! * [`Disposition::RefusedWhenTrue`] / [`Disposition::RefusedUnless`] /
//!   [`Disposition::RefusedWhenSet`]: a value that asks for something
//!   Tollgate does not do stops `serve` at start with a message naming the
//!   variable; upstream's default value is accepted;
//! * [`Disposition::NoEffect`]: accepted, and logged at start with why it
//!   changes nothing (a tuning knob of a part Tollgate does differently, or
//!   a variable read only together with one that is refused).
//!
//! [`UpstreamEnv::check`] applies the table before anything starts, so no
//! variable is ignored silently. To honour a refused variable, read it
//! where the setting is built and change its row to `Honoured`.

use std::collections::BTreeMap;

use crate::CommandError;

/// What Tollgate does with one upstream variable.
#[derive(Clone, Copy, Debug)]
pub enum Disposition {
    /// Read with upstream's meaning and default.
    Honoured,
    /// `true` (upstream's booleans: `1`, `t`, `true`, any case) is refused for the reason given.
    RefusedWhenTrue(&'static str),
    /// Any value for which the function is false is refused for the reason given.
    RefusedUnless(fn(&str) -> bool, &'static str),
    /// Any non-empty value is refused for the reason given.
    RefusedWhenSet(&'static str),
    /// Accepted and logged at start with the reason it changes nothing.
    NoEffect(&'static str),
}

/// One upstream variable.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// Upstream's default, as upstream documents it (empty: none).
    pub default: &'static str,
    /// What Tollgate does with it.
    pub disposition: Disposition,
}

const fn honoured(name: &'static str, default: &'static str) -> Variable {
    Variable {
        name,
        default,
        disposition: Disposition::Honoured,
    }
}

const fn refused_when_true(name: &'static str, why: &'static str) -> Variable {
    Variable {
        name,
        default: "false",
        disposition: Disposition::RefusedWhenTrue(why),
    }
}

const fn refused_when_set(name: &'static str, why: &'static str) -> Variable {
    Variable {
        name,
        default: "",
        disposition: Disposition::RefusedWhenSet(why),
    }
}

const fn no_effect(name: &'static str, default: &'static str, why: &'static str) -> Variable {
    Variable {
        name,
        default,
        disposition: Disposition::NoEffect(why),
    }
}

/// Whether `value` is a zero duration (`0`, `0s`, …): upstream's "retry forever".
fn is_zero_duration(value: &str) -> bool {
    let value = value.trim();
    value == "0" || tollgate_core::duration::parse_duration(value).is_ok_and(|d| d.is_zero())
}

/// Whether `value` names the Redis backend.
fn is_redis_backend(value: &str) -> bool {
    value.eq_ignore_ascii_case("redis")
}

/// Whether `value` is the pool behaviour Tollgate has (a call waits, bounded by the timeout).
fn is_wait(value: &str) -> bool {
    value.eq_ignore_ascii_case("WAIT")
}

const NO_POOL: &str = "Tollgate multiplexes every call on one connection per Redis node and pipelines concurrent calls, so there is no pool to size or window to set";
const NO_STARTUP_GIVING_UP: &str = "Tollgate retries a Redis that is not up without end (0, upstream's default), answering by each rule's on_store_error meanwhile; it never gives up and exits";

/// Every single upstream variable and what Tollgate does with it.
pub const VARIABLES: &[Variable] = &[
    // Listening.
    honoured("HOST", "0.0.0.0"),
    honoured("PORT", "8080"),
    honoured("GRPC_HOST", "0.0.0.0"),
    honoured("GRPC_PORT", "8081"),
    honoured("DEBUG_HOST", "0.0.0.0"),
    honoured("DEBUG_PORT", "6070"),
    refused_when_set(
        "GRPC_UDS",
        "Tollgate serves gRPC on TCP only (GRPC_HOST, GRPC_PORT)",
    ),
    honoured("GRPC_MAX_CONNECTION_AGE", "24h"),
    honoured("GRPC_MAX_CONNECTION_AGE_GRACE", "1h"),
    honoured("GRPC_SERVER_USE_TLS", "false"),
    honoured("GRPC_SERVER_TLS_CERT", ""),
    honoured("GRPC_SERVER_TLS_KEY", ""),
    honoured("GRPC_CLIENT_TLS_CACERT", ""),
    honoured("GRPC_CLIENT_TLS_SAN", ""),
    // Logging.
    honoured("LOG_LEVEL", "WARN"),
    honoured("LOG_FORMAT", "text"),
    // Configuration.
    Variable {
        name: "CONFIG_TYPE",
        default: "FILE",
        disposition: Disposition::RefusedUnless(
            crate::serve::is_known_config_type,
            "Tollgate reads limits files (FILE) or an xDS server (GRPC_XDS_SOTW)",
        ),
    },
    // xDS (crate::serve's xds_args; set without CONFIG_TYPE=GRPC_XDS_SOTW, each is noted at start).
    honoured("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
    honoured("CONFIG_GRPC_XDS_NODE_ID", "default"),
    honoured("CONFIG_GRPC_XDS_NODE_METADATA", ""),
    honoured("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ""),
    honoured("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"),
    honoured("CONFIG_GRPC_XDS_SERVER_USE_TLS", "false"),
    honoured("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
    honoured("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
    honoured("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
    honoured("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""),
    honoured("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"),
    honoured("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s"),
    honoured("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ""),
    no_effect(
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "0.5",
        "each of Tollgate's xDS reconnection waits is drawn between half its bound and the bound",
    ),
    no_effect(
        "XDS_CLIENT_BACKOFF_JITTER",
        "true",
        "each of Tollgate's xDS reconnection waits is drawn between half its bound and the bound",
    ),
    honoured("RUNTIME_ROOT", "/srv/runtime_data/current"),
    honoured("RUNTIME_SUBDIRECTORY", ""),
    honoured("RUNTIME_APPDIRECTORY", "config"),
    honoured("RUNTIME_WATCH_ROOT", "true"),
    honoured("RUNTIME_IGNOREDOTFILES", "false"),
    honoured("MERGE_DOMAIN_CONFIG", "false"),
    honoured("FORCE_START_WITHOUT_INITIAL_CONFIG", "false"),
    honoured("SHADOW_MODE", "false"),
    honoured("QUOTA_MODE", "false"),
    honoured("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
    refused_when_true(
        "RESPONSE_DYNAMIC_METADATA",
        "Tollgate does not return dynamic metadata",
    ),
    no_effect(
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "false",
        "Tollgate never serves before a config is loaded unless told to (--allow-empty-config, FORCE_START_WITHOUT_INITIAL_CONFIG), and then is healthy at once",
    ),
    // Answers.
    honoured("NEAR_LIMIT_RATIO", "0.8"),
    honoured("LIMIT_RESPONSE_HEADERS_ENABLED", "false"),
    honoured("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
    honoured("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
    honoured("LIMIT_RESET_HEADER", "RateLimit-Reset"),
    // Backend.
    Variable {
        name: "BACKEND_TYPE",
        default: "redis",
        disposition: Disposition::RefusedUnless(
            is_redis_backend,
            "Tollgate keeps counters in memory or in Redis; memcache is not supported",
        ),
    },
    honoured("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
    honoured("REDIS_SOCKET_TYPE", "unix"),
    honoured("REDIS_TYPE", "SINGLE"),
    honoured("REDIS_AUTH", ""),
    honoured("REDIS_TLS", "false"),
    honoured("REDIS_TLS_CLIENT_CERT", ""),
    honoured("REDIS_TLS_CLIENT_KEY", ""),
    honoured("REDIS_TLS_CACERT", ""),
    refused_when_true(
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "Tollgate always verifies the Redis server's name",
    ),
    honoured("REDIS_TIMEOUT", "10s"),
    refused_when_set(
        "REDIS_SENTINEL_AUTH",
        "Tollgate connects to sentinels without a password; REDIS_AUTH authenticates to the master",
    ),
    no_effect("REDIS_POOL_SIZE", "10", NO_POOL),
    Variable {
        name: "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        default: "WAIT",
        disposition: Disposition::RefusedUnless(
            is_wait,
            "only WAIT exists (upstream also stops on CREATE and ERROR)",
        ),
    },
    no_effect("REDIS_PIPELINE_WINDOW", "0", NO_POOL),
    no_effect(
        "REDIS_PIPELINE_LIMIT",
        "0",
        "deprecated and ignored by upstream too",
    ),
    no_effect("REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", NO_POOL),
    refused_when_true("REDIS_PERSECOND", "Tollgate keeps every limit in one store"),
    honoured("REDIS_STARTUP_INITIAL_INTERVAL", "1s"),
    honoured("REDIS_STARTUP_MAX_INTERVAL", "30s"),
    Variable {
        name: "REDIS_STARTUP_MAX_ELAPSED_TIME",
        default: "0",
        disposition: Disposition::RefusedUnless(is_zero_duration, NO_STARTUP_GIVING_UP),
    },
    no_effect(
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "false",
        "Tollgate's /healthz/store follows the store (and /readyz with --ready-requires-store)",
    ),
    honoured("CACHE_KEY_PREFIX", ""),
    honoured("EXPIRATION_JITTER_MAX_SECONDS", "300"),
    no_effect(
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "0",
        "Tollgate always answers a closed window's over-limit keys without a Redis call, in a bounded cache",
    ),
    // Statistics.
    honoured("USE_STATSD", "true"),
    honoured("STATSD_HOST", "localhost"),
    honoured("STATSD_PORT", "8125"),
    honoured("STATS_FLUSH_INTERVAL", "10s"),
    honoured("DISABLE_STATS", "false"),
    // Read by upstream's stats library from the environment (tcp or udp).
    honoured("STATSD_PROTOCOL", "tcp"),
    honoured("EXTRA_TAGS", ""),
    honoured("USE_DOG_STATSD", "false"),
    // Refused together with USE_DOG_STATSD=true (see serve's statsd settings).
    no_effect(
        "USE_DOG_STATSD_MOGRIFIERS",
        "",
        "read only with USE_DOG_STATSD=true, and refused with it: Tollgate's DogStatsD lines carry EXTRA_TAGS only",
    ),
    honoured("USE_PROMETHEUS", "false"),
    honoured("PROMETHEUS_ADDR", ":9090"),
    honoured("PROMETHEUS_PATH", "/metrics"),
    refused_when_set(
        "PROMETHEUS_MAPPER_YAML",
        "Tollgate's Prometheus names are upstream's default mapping, built in",
    ),
    refused_when_true(
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "ratelimit_service_response_time_seconds is in seconds",
    ),
    // Tracing (OTLP over HTTP or gRPC; see crate::telemetry).
    honoured("TRACING_ENABLED", "false"),
    honoured("TRACING_EXPORTER_PROTOCOL", "http"),
    honoured("TRACING_SERVICE_NAME", "RateLimit"),
    honoured("TRACING_SAMPLING_RATE", "1"),
    honoured("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
];

/// Families of upstream variables, by prefix, and what Tollgate does with them.
pub const FAMILIES: &[(&str, Disposition)] = &[
    (
        "REDIS_PERSECOND_",
        Disposition::NoEffect("read only with REDIS_PERSECOND=true"),
    ),
    (
        "MEMCACHE_",
        Disposition::NoEffect("read only with BACKEND_TYPE=memcache"),
    ),
    (
        "DOG_STATSD_MOGRIFIER_",
        Disposition::NoEffect("read only through USE_DOG_STATSD_MOGRIFIERS"),
    ),
    (
        "TRACING_",
        Disposition::NoEffect("Tollgate sends service.name only (no namespace or instance id)"),
    ),
    (
        "OTEL_EXPORTER_OTLP_",
        Disposition::NoEffect("Tollgate reads OTEL_EXPORTER_OTLP_ENDPOINT only"),
    ),
];

/// Reads a boolean the way upstream does (`1`, `t`, `true`, `0`, `f`, `false`, any case; empty is false).
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" => Some(true),
        "0" | "f" | "false" | "" => Some(false),
        _ => None,
    }
}

/// The disposition of `name`: its row, else its family's.
pub fn disposition(name: &str) -> Option<Disposition> {
    VARIABLES
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.disposition)
        .or_else(|| {
            FAMILIES
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix))
                .map(|(_, d)| *d)
        })
}

/// A snapshot of the environment's upstream variables (the process's, or a test's).
#[derive(Clone, Debug, Default)]
pub struct UpstreamEnv {
    vars: BTreeMap<String, String>,
}

impl UpstreamEnv {
    /// The variables of this process that upstream reads.
    pub fn from_process() -> Self {
        Self::from_pairs(std::env::vars())
    }

    /// The upstream variables among `pairs`.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let vars = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, _)| disposition(k).is_some())
            .collect();
        UpstreamEnv { vars }
    }

    /// The value of `name`; an empty value counts as unset, as upstream's defaults do.
    pub fn get(&self, name: &str) -> Option<&str> {
        debug_assert!(disposition(name).is_some(), "{name} is not in the table");
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// `name` as a boolean, or `None` when unset; a value that is not a boolean is an error naming it.
    pub fn bool(&self, name: &str) -> Result<Option<bool>, CommandError> {
        self.get(name)
            .map(|value| {
                parse_bool(value).ok_or_else(|| {
                    CommandError::Usage(format!("{name}={value:?} is not true or false"))
                })
            })
            .transpose()
    }

    /// Applies the table: every refused value, named in one error; otherwise
    /// one line per variable that is set but changes nothing, to log.
    pub fn check(&self) -> Result<Vec<String>, CommandError> {
        let mut refused = Vec::new();
        let mut notes = Vec::new();
        for (name, value) in &self.vars {
            if value.trim().is_empty() {
                continue;
            }
            let default = VARIABLES
                .iter()
                .find(|v| v.name == name)
                .map_or("", |v| v.default);
            match disposition(name) {
                None | Some(Disposition::Honoured) => {}
                Some(Disposition::NoEffect(why)) => {
                    notes.push(format!("{name} is set and changes nothing: {why}"));
                }
                Some(Disposition::RefusedWhenSet(why)) => {
                    refused.push(format!("{name} is not supported: {why}; unset it"));
                }
                Some(Disposition::RefusedWhenTrue(why)) => match parse_bool(value) {
                    Some(false) => {}
                    Some(true) => refused.push(format!(
                        "{name}={value} is not supported: {why}; unset it or set it to false"
                    )),
                    None => refused.push(format!("{name}={value:?} is not true or false")),
                },
                Some(Disposition::RefusedUnless(accepts, why)) => {
                    if !accepts(value.trim()) {
                        refused.push(format!(
                            "{name}={value:?} is not supported: {why}; unset it or set it to {default}"
                        ));
                    }
                }
            }
        }
        if refused.is_empty() {
            Ok(notes)
        } else {
            Err(CommandError::Usage(refused.join("\n")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_name_has_one_disposition() {
        let mut names: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "a variable is listed twice");
        // A row wins over its family (TRACING_ENABLED is read, TRACING_SERVICE_NAMESPACE is not).
        assert!(matches!(
            disposition("TRACING_ENABLED"),
            Some(Disposition::Honoured)
        ));
        assert!(matches!(
            disposition("TRACING_SERVICE_NAMESPACE"),
            Some(Disposition::NoEffect(_))
        ));
    }

    #[test]
    fn other_variables_are_not_kept() {
        let env = UpstreamEnv::from_pairs([("PATH", "/bin"), ("PORT", "1")]);
        assert_eq!(env.get("PORT"), Some("1"));
        assert_eq!(env.vars.len(), 1);
    }
}
