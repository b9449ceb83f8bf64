//! Every upstream variable, one row at a time: what each honoured one changes in `serve`'s settings, and that refused ones stop the start naming themselves.

// The parent's helpers (`Cli`, `resolve`, `addr`) and the types its cases name.
use super::*;

/// The variables of one honoured case and the check of the setting they change.
type HonouredCase = (Vec<(&'static str, &'static str)>, fn(&Settings) -> bool);

/// The setting each honoured variable changes, checked on `Settings`.
/// Upstream's switch to limits from an xDS server.
const XDS: (&str, &str) = ("CONFIG_TYPE", "GRPC_XDS_SOTW");

/// TLS towards the xDS server (set beside [`XDS`]).
const XDS_TLS: (&str, &str) = ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true");

/// The TLS files of the xDS setting, if any.
fn xds_tls(s: &Settings) -> Option<tollgate_tls::ClientTlsFiles> {
    s.xds.as_ref().and_then(|x| x.tls.clone())
}

fn honoured_case(name: &str) -> HonouredCase {
    match name {
        "HOST" => (vec![("HOST", "::")], |s| s.http_addr == addr("[::]:8080")),
        "PORT" => (vec![("PORT", "9")], |s| s.http_addr == addr("0.0.0.0:9")),
        "GRPC_HOST" => (vec![("GRPC_HOST", "::")], |s| {
            s.grpc_addr == addr("[::]:8081")
        }),
        "GRPC_PORT" => (vec![("GRPC_PORT", "9")], |s| {
            s.grpc_addr == addr("0.0.0.0:9")
        }),
        "GRPC_MAX_CONNECTION_AGE" => (vec![("GRPC_MAX_CONNECTION_AGE", "24h")], |s| {
            s.max_connection_age.map(|a| (a.max_age, a.grace))
                == Some((Duration::from_secs(86_400), Duration::from_secs(3600)))
        }),
        "GRPC_MAX_CONNECTION_AGE_GRACE" => (
            vec![
                ("GRPC_MAX_CONNECTION_AGE", "10m"),
                ("GRPC_MAX_CONNECTION_AGE_GRACE", "30s"),
            ],
            |s| {
                s.max_connection_age.map(|a| (a.max_age, a.grace))
                    == Some((Duration::from_secs(600), Duration::from_secs(30)))
            },
        ),
        "DEBUG_HOST" => (vec![("DEBUG_HOST", "::1")], |s| {
            s.debug_addr == Some(addr("[::1]:6070"))
        }),
        "DEBUG_PORT" => (vec![("DEBUG_PORT", "9")], |s| {
            s.debug_addr == Some(addr("0.0.0.0:9"))
        }),
        "LOG_LEVEL" => (vec![("LOG_LEVEL", "warning")], |s| {
            s.log_level == tracing::Level::WARN
        }),
        "LOG_FORMAT" => (vec![("LOG_FORMAT", "json")], |s| {
            s.log_format == LogFormat::Json
        }),
        // Upstream's default protocol is http.
        "TRACING_ENABLED" => (vec![("TRACING_ENABLED", "true")], |s| {
            s.tracing.enabled && s.tracing.otlp_protocol == crate::telemetry::OtlpProtocol::Http
        }),
        "TRACING_EXPORTER_PROTOCOL" => (
            vec![
                ("TRACING_ENABLED", "true"),
                ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ],
            |s| {
                s.tracing.enabled && s.tracing.otlp_protocol == crate::telemetry::OtlpProtocol::Grpc
            },
        ),
        "TRACING_SERVICE_NAME" => (vec![("TRACING_SERVICE_NAME", "edge-rls")], |s| {
            s.tracing.tracing_service_name.as_deref() == Some("edge-rls")
        }),
        "TRACING_SAMPLING_RATE" => (vec![("TRACING_SAMPLING_RATE", "0.25")], |s| {
            s.tracing.tracing_sampling_rate == Some(0.25)
        }),
        // Read by clap as the --otlp-endpoint flag's variable, not from UpstreamEnv.
        "OTEL_EXPORTER_OTLP_ENDPOINT" => (vec![], |s| {
            s.tracing.otlp_endpoint == "http://127.0.0.1:4317"
        }),
        "RUNTIME_ROOT" => (vec![("RUNTIME_ROOT", "/data")], |s| {
            s.config == Path::new("/data/config")
        }),
        "RUNTIME_SUBDIRECTORY" => (vec![("RUNTIME_SUBDIRECTORY", "rl")], |s| {
            s.config == Path::new("/srv/runtime_data/current/rl/config")
        }),
        "RUNTIME_APPDIRECTORY" => (vec![("RUNTIME_APPDIRECTORY", "limits")], |s| {
            s.config == Path::new("/srv/runtime_data/current/limits")
        }),
        // Either value reloads on every change, ConfigMap swaps included, and dotfiles
        // are never limits files; a value that is not a boolean is refused.
        "RUNTIME_WATCH_ROOT" => (vec![("RUNTIME_WATCH_ROOT", "false")], |_| true),
        "RUNTIME_IGNOREDOTFILES" => (vec![("RUNTIME_IGNOREDOTFILES", "true")], |_| true),
        "MERGE_DOMAIN_CONFIG" => (vec![("MERGE_DOMAIN_CONFIG", "true")], |s| s.merge_domains),
        "QUOTA_MODE" => (vec![("QUOTA_MODE", "true")], |s| s.quota_mode),
        "GRPC_SERVER_USE_TLS" | "GRPC_SERVER_TLS_CERT" | "GRPC_SERVER_TLS_KEY" => (
            vec![
                ("GRPC_SERVER_USE_TLS", "true"),
                ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
                ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
            ],
            |s| {
                s.tls.as_ref().is_some_and(|t| {
                    t.cert == Path::new("/tls/cert.pem") && t.key == Path::new("/tls/key.pem")
                })
            },
        ),
        "GRPC_CLIENT_TLS_CACERT" | "GRPC_CLIENT_TLS_SAN" => (
            vec![
                ("GRPC_SERVER_USE_TLS", "true"),
                ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
                ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
                ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
                ("GRPC_CLIENT_TLS_SAN", "envoy.istio-system"),
            ],
            |s| {
                s.tls.as_ref().is_some_and(|t| {
                    t.client_ca.as_deref() == Some(Path::new("/tls/ca.pem"))
                        && t.client_sans == ["envoy.istio-system"]
                })
            },
        ),
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT" => (
            vec![("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
            |s| s.stop_increment_when_over_limit,
        ),
        "FORCE_START_WITHOUT_INITIAL_CONFIG" => {
            (vec![("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")], |s| {
                s.force_start_without_initial_config
            })
        }
        "SHADOW_MODE" => (vec![("SHADOW_MODE", "1")], |s| s.shadow_mode),
        "NEAR_LIMIT_RATIO" => (vec![("NEAR_LIMIT_RATIO", "0.5")], |s| {
            s.near_limit_ratio == 0.5
        }),
        "LIMIT_RESPONSE_HEADERS_ENABLED" => {
            (vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "true")], |s| {
                s.headers.limit_headers
            })
        }
        "LIMIT_LIMIT_HEADER" => (vec![("LIMIT_LIMIT_HEADER", "X-L")], |s| {
            s.headers.limit_header_names.limit == "X-L"
        }),
        "LIMIT_REMAINING_HEADER" => (vec![("LIMIT_REMAINING_HEADER", "X-R")], |s| {
            s.headers.limit_header_names.remaining == "X-R"
        }),
        "LIMIT_RESET_HEADER" => (vec![("LIMIT_RESET_HEADER", "X-T")], |s| {
            s.headers.limit_header_names.reset == "X-T"
        }),
        "REDIS_URL" => (vec![("REDIS_URL", "/run/r.sock")], |s| {
            s.store.as_ref().map(|x| x.url.as_str()) == Some("unix:///run/r.sock")
        }),
        "REDIS_SOCKET_TYPE" => (
            vec![("REDIS_URL", "r:6379"), ("REDIS_SOCKET_TYPE", "tcp")],
            |s| s.store.as_ref().map(|x| x.url.as_str()) == Some("redis://r:6379"),
        ),
        "REDIS_TYPE" => (
            vec![("REDIS_URL", "a:1,b:2"), ("REDIS_TYPE", "cluster")],
            |s| s.store.as_ref().map(|x| x.url.as_str()) == Some("redis-cluster://a:1,b:2"),
        ),
        "REDIS_AUTH" => (
            vec![
                ("REDIS_URL", "r:1"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_AUTH", "pw"),
            ],
            |s| s.store.as_ref().map(|x| x.url.as_str()) == Some("redis://:pw@r:1"),
        ),
        "REDIS_TLS" => (
            vec![
                ("REDIS_URL", "r:1"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TLS", "true"),
            ],
            |s| {
                s.store
                    .as_ref()
                    .is_some_and(|x| x.url == "rediss://r:1" && x.tls.is_some())
            },
        ),
        "CACHE_KEY_PREFIX" => (vec![("CACHE_KEY_PREFIX", "app_")], |s| {
            s.key_prefix.as_deref() == Some("app_")
        }),
        "EXPIRATION_JITTER_MAX_SECONDS" => (vec![("EXPIRATION_JITTER_MAX_SECONDS", "17")], |s| {
            s.expiration_jitter_max_s == 17
        }),
        "REDIS_STARTUP_INITIAL_INTERVAL" => (vec![("REDIS_STARTUP_INITIAL_INTERVAL", "1s")], |s| {
            s.store_retry.first == Duration::from_secs(1)
        }),
        "REDIS_STARTUP_MAX_INTERVAL" => (vec![("REDIS_STARTUP_MAX_INTERVAL", "30s")], |s| {
            s.store_retry.longest == Duration::from_secs(30)
        }),
        "REDIS_TIMEOUT" => (vec![("REDIS_TIMEOUT", "250ms")], |s| {
            s.store_timeout == Duration::from_millis(250)
        }),
        "USE_STATSD" => (vec![("USE_STATSD", "true")], |s| {
            s.statsd.as_ref().map(|x| x.options.target.as_str()) == Some("localhost:8125")
        }),
        "STATSD_HOST" => (vec![("USE_STATSD", "true"), ("STATSD_HOST", "::1")], |s| {
            s.statsd.as_ref().map(|x| x.options.target.as_str()) == Some("[::1]:8125")
        }),
        "STATSD_PORT" => (vec![("USE_STATSD", "true"), ("STATSD_PORT", "9")], |s| {
            s.statsd.as_ref().map(|x| x.options.target.as_str()) == Some("localhost:9")
        }),
        "STATS_FLUSH_INTERVAL" => (
            vec![("USE_STATSD", "true"), ("STATS_FLUSH_INTERVAL", "1s")],
            |s| s.statsd.as_ref().map(|x| x.interval) == Some(Duration::from_secs(1)),
        ),
        "DISABLE_STATS" => (
            vec![("USE_STATSD", "true"), ("DISABLE_STATS", "true")],
            |s| s.statsd.is_none(),
        ),
        "STATSD_PROTOCOL" => (
            vec![("USE_STATSD", "true"), ("STATSD_PROTOCOL", "udp")],
            |s| {
                s.statsd.as_ref().map(|x| x.options.transport)
                    == Some(tollgate_server::statsd::Transport::Udp)
            },
        ),
        "USE_DOG_STATSD" => (vec![("USE_DOG_STATSD", "true")], |s| {
            s.statsd
                .as_ref()
                .map(|x| (x.options.dialect, x.options.transport))
                == Some((
                    tollgate_server::statsd::Dialect::Dog,
                    tollgate_server::statsd::Transport::Udp,
                ))
        }),
        "EXTRA_TAGS" => (vec![("EXTRA_TAGS", "zone:eu,app:rl")], |s| {
            s.extra_tags.pairs() == [("zone".into(), "eu".into()), ("app".into(), "rl".into())]
        }),
        "USE_PROMETHEUS" => (vec![("USE_PROMETHEUS", "true")], |s| {
            s.prometheus
                .as_ref()
                .map(|p| (p.addr.to_string(), p.path.as_str()))
                == Some(("0.0.0.0:9090".to_owned(), "/metrics"))
        }),
        "PROMETHEUS_ADDR" => (
            vec![
                ("USE_PROMETHEUS", "true"),
                ("PROMETHEUS_ADDR", "127.0.0.1:9102"),
            ],
            |s| {
                s.prometheus.as_ref().map(|p| p.addr.to_string())
                    == Some("127.0.0.1:9102".to_owned())
            },
        ),
        "PROMETHEUS_PATH" => (
            vec![("USE_PROMETHEUS", "true"), ("PROMETHEUS_PATH", "/prom")],
            |s| s.prometheus.as_ref().map(|p| p.path.as_str()) == Some("/prom"),
        ),
        "CONFIG_GRPC_XDS_SERVER_URL" => (
            vec![XDS, ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001")],
            |s| s.xds.as_ref().map(|x| x.uri.as_str()) == Some("http://envoy-gateway:18001"),
        ),
        "CONFIG_GRPC_XDS_NODE_ID" => (vec![XDS, ("CONFIG_GRPC_XDS_NODE_ID", "eg")], |s| {
            s.xds.as_ref().map(|x| x.node_id.as_str()) == Some("eg")
        }),
        "CONFIG_GRPC_XDS_NODE_METADATA" => (
            vec![XDS, ("CONFIG_GRPC_XDS_NODE_METADATA", "a=1,b=2")],
            |s| s.xds.as_ref().map(|x| x.node_metadata.len()) == Some(2),
        ),
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS" => (
            vec![
                XDS,
                ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:t"),
            ],
            |s| {
                s.xds.as_ref().map(|x| x.headers.clone())
                    == Some(vec![("x-token".to_owned(), "t".to_owned())])
            },
        ),
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL" => (
            vec![XDS, ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s")],
            |s| s.xds.as_ref().map(|x| x.backoff_first) == Some(Duration::from_secs(3)),
        ),
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL" => (
            vec![
                XDS,
                ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"),
                ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"),
            ],
            |s| s.xds.as_ref().map(|x| x.backoff_first) == Some(Duration::from_secs(10)),
        ),
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL" => {
            (vec![XDS, ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s")], |s| {
                s.xds.as_ref().map(|x| x.backoff_longest) == Some(Duration::from_secs(60))
            })
        }
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES" => (
            vec![XDS, ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1000")],
            |s| s.xds.as_ref().map(|x| x.max_update_bytes) == Some(1000),
        ),
        "CONFIG_GRPC_XDS_SERVER_USE_TLS" => {
            (vec![XDS, ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true")], |s| {
                s.xds
                    .as_ref()
                    .is_some_and(|x| x.uri == "https://localhost:18000" && x.tls.is_some())
            })
        }
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT" => (
            vec![XDS, XDS_TLS, ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.pem")],
            |s| xds_tls(s).and_then(|t| t.cert) == Some(PathBuf::from("/c.pem")),
        ),
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY" => (
            vec![XDS, XDS_TLS, ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/k.pem")],
            |s| xds_tls(s).and_then(|t| t.key) == Some(PathBuf::from("/k.pem")),
        ),
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT" => (
            vec![
                XDS,
                XDS_TLS,
                ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/ca.pem"),
            ],
            |s| xds_tls(s).and_then(|t| t.ca) == Some(PathBuf::from("/ca.pem")),
        ),
        "CONFIG_GRPC_XDS_SERVER_TLS_SAN" => (
            vec![
                XDS,
                XDS_TLS,
                ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "eg.example"),
            ],
            |s| xds_tls(s).and_then(|t| t.server_name) == Some("eg.example".to_owned()),
        ),
        other => panic!("{other} is honoured but has no case in this table test"),
    }
}

/// The files `REDIS_TLS_*` name are read at start: an unreadable one is an error naming it.
#[test]
fn redis_tls_files_are_read_at_start() {
    for name in [
        "REDIS_TLS_CACERT",
        "REDIS_TLS_CLIENT_CERT",
        "REDIS_TLS_CLIENT_KEY",
    ] {
        let env = [
            ("REDIS_URL", "r:1"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TLS", "true"),
            (name, "/nonexistent/tollgate-test.pem"),
        ];
        match resolve(&[], &env) {
            Err(CommandError::Usage(message)) => assert!(message.contains(name), "{message}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Every upstream variable, one row at a time: honoured ones change their
/// setting, refused values stop start-up naming the variable and leave
/// upstream's default accepted, no-effect ones are accepted and noted.
#[test]
fn every_upstream_variable_is_honoured_refused_or_noted_by_name() {
    use crate::upstream_env::{Disposition, VARIABLES};
    // A REDIS_URL unless the case names one: without it upstream's mode refuses to start.
    let upstream = |env: &[(&str, &str)]| {
        let cli = Cli::try_parse_from(["serve"]).expect("no flags parse");
        let mut pairs = env.to_vec();
        if !pairs.iter().any(|(name, _)| *name == "REDIS_URL") {
            pairs.insert(0, ("REDIS_URL", "/run/redis.sock"));
        }
        settings(&cli.serve, &UpstreamEnv::from_pairs(pairs))
    };
    for variable in VARIABLES {
        let name = variable.name;
        let refusing = match variable.disposition {
            Disposition::Honoured => {
                if [
                    "REDIS_TLS_CLIENT_CERT",
                    "REDIS_TLS_CLIENT_KEY",
                    "REDIS_TLS_CACERT",
                ]
                .contains(&name)
                {
                    continue; // redis_tls_files_are_read_at_start
                }
                let (env, check) = honoured_case(name);
                let s = upstream(&env).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert!(check(&s), "{name}: {s:?}");
                if ["RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"].contains(&name) {
                    assert!(
                        upstream(&[(name, "sometimes")]).is_err(),
                        "{name}=sometimes"
                    );
                }
                continue;
            }
            Disposition::NoEffect(_) => {
                let s = upstream(&[(name, "1")]).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert!(
                    s.notes.iter().any(|n| n.starts_with(name)),
                    "{name}: {:?}",
                    s.notes
                );
                continue;
            }
            Disposition::RefusedWhenTrue(_) => "true",
            Disposition::RefusedWhenSet(_) => "anything",
            Disposition::RefusedUnless(..) => "unsupported",
        };
        match upstream(&[(name, refusing)]) {
            Err(CommandError::Usage(message)) => {
                assert!(message.starts_with(name), "{name}: {message}");
            }
            other => panic!("{name}={refusing}: expected a refusal, got {other:?}"),
        }
        if !variable.default.is_empty() {
            upstream(&[(name, variable.default)])
                .unwrap_or_else(|e| panic!("{name}={}: {e:?}", variable.default));
        }
    }
}
