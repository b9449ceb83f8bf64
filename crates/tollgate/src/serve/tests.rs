//! Tests of `serve`'s flags and of how they combine with upstream's variables.

use std::path::{Path, PathBuf};

use clap::Parser;
use tollgate_protocol::rls::{HeaderOptions, LimitHeaderNames, RequestCaps};
use tollgate_server::metrics::DEFAULT_NEAR_LIMIT_RATIO;
use tollgate_store::DEFAULT_MAX_LOG_ENTRIES;

use std::net::SocketAddr;
use std::time::Duration;

use super::args::{LogFormat, RedisEncoding, RedisKeyFormat, ServeArgs};
use super::combine::{Settings, settings};
use crate::CommandError;
use crate::upstream_env::UpstreamEnv;

mod upstream_variables;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn resolve(flags: &[&str], env: &[(&str, &str)]) -> Result<Settings, CommandError> {
    let mut argv = vec!["serve", "--config", "limits"];
    argv.extend_from_slice(flags);
    let cli = Cli::try_parse_from(argv).expect("the flags parse");
    settings(&cli.serve, &UpstreamEnv::from_pairs(env.iter().copied()))
}

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("a socket address")
}

#[test]
fn defaults_are_loopback_8081_no_shadow_info() {
    let s = resolve(&[], &[]).expect("valid");
    assert_eq!(s.grpc_addr, addr("127.0.0.1:8081"));
    assert_eq!(s.http_addr, addr("127.0.0.1:8080"));
    assert!(!s.shadow_mode);
    assert_eq!(s.log_level, tracing::Level::INFO);
    assert_eq!(s.headers, HeaderOptions::default());
    assert!(s.headers.is_off());
}

#[test]
fn header_flags_and_upstreams_header_variables() {
    let s = resolve(
        &[
            "--limit-headers",
            "--ietf-headers",
            "--retry-after",
            "--retry-after-jitter",
            "2s",
            "--raw-body",
        ],
        &[],
    )
    .expect("valid");
    assert_eq!(
        s.headers,
        HeaderOptions {
            limit_headers: true,
            limit_header_names: LimitHeaderNames::default(),
            ietf_headers: true,
            retry_after: true,
            retry_after_jitter: Duration::from_secs(2),
            raw_body: true,
        }
    );

    let env = [
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_LIMIT_HEADER", "X-Limit"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
        ("LIMIT_RESET_HEADER", "X-Reset"),
    ];
    let s = resolve(&[], &env).expect("valid");
    assert!(s.headers.limit_headers);
    assert!(!s.headers.ietf_headers && !s.headers.retry_after && !s.headers.raw_body);
    assert_eq!(
        s.headers.limit_header_names,
        LimitHeaderNames {
            limit: "X-Limit".to_owned(),
            remaining: "X-Left".to_owned(),
            reset: "X-Reset".to_owned(),
        }
    );
    let off = resolve(&[], &[("LIMIT_RESPONSE_HEADERS_ENABLED", "false")]).expect("valid");
    assert!(!off.headers.limit_headers);
    let bad_jitter = [
        "serve",
        "--config",
        "limits",
        "--retry-after-jitter",
        "soon",
    ];
    assert!(Cli::try_parse_from(bad_jitter).is_err());
}

#[test]
fn upstream_variables_apply_when_no_flag_says_otherwise() {
    let env = [
        ("GRPC_PORT", "9091"),
        ("SHADOW_MODE", "true"),
        ("LOG_LEVEL", "DEBUG"),
    ];
    let s = resolve(&[], &env).expect("valid");
    assert_eq!(s.grpc_addr, addr("0.0.0.0:9091"));
    assert_eq!(s.http_addr, addr("127.0.0.1:8080"));
    let upstream_http = [("HOST", "127.0.0.1"), ("PORT", "9090")];
    assert_eq!(
        resolve(&[], &upstream_http).expect("valid").http_addr,
        addr("127.0.0.1:9090")
    );
    assert_eq!(
        resolve(&["--http-addr", "127.0.0.1:0"], &upstream_http)
            .expect("valid")
            .http_addr,
        addr("127.0.0.1:0")
    );
    assert!(s.shadow_mode);
    assert_eq!(s.log_level, tracing::Level::DEBUG);

    let with_host = [("GRPC_HOST", "127.0.0.1"), ("GRPC_PORT", "9091")];
    assert_eq!(
        resolve(&[], &with_host).expect("valid").grpc_addr,
        addr("127.0.0.1:9091")
    );

    let s = resolve(&["--grpc-addr", "127.0.0.1:0", "--log-level", "warn"], &env).expect("valid");
    assert_eq!(s.grpc_addr, addr("127.0.0.1:0"));
    assert_eq!(s.log_level, tracing::Level::WARN);
}

#[test]
fn log_format_and_near_limit_ratio_from_flags_or_upstreams_variables() {
    let s = resolve(&[], &[]).expect("valid");
    assert_eq!(
        (s.log_format, s.near_limit_ratio),
        (LogFormat::Text, DEFAULT_NEAR_LIMIT_RATIO)
    );
    let env = [("LOG_FORMAT", "JSON"), ("NEAR_LIMIT_RATIO", "0.5")];
    let s = resolve(&[], &env).expect("valid");
    assert_eq!((s.log_format, s.near_limit_ratio), (LogFormat::Json, 0.5));
    let flags = ["--log-format", "text", "--near-limit-ratio", "0.9"];
    let s = resolve(&flags, &env).expect("valid");
    assert_eq!((s.log_format, s.near_limit_ratio), (LogFormat::Text, 0.9));
    let bad_ratio = ["serve", "--config", "limits", "--near-limit-ratio", "2"];
    assert!(Cli::try_parse_from(bad_ratio).is_err());
}

#[test]
fn worker_threads_are_a_positive_count() {
    let parsed = |threads: &str| {
        Cli::try_parse_from(["serve", "--worker-threads", threads]).map(|cli| cli.serve)
    };
    let two = parsed("2").expect("2 threads parse");
    assert_eq!(two.worker_threads.map(std::num::NonZeroUsize::get), Some(2));
    let zero = parsed("0").expect_err("0 threads is refused").to_string();
    assert!(zero.contains("--worker-threads"), "{zero}");
    assert!(
        Cli::try_parse_from(["serve"])
            .expect("no flags parse")
            .serve
            .worker_threads
            .is_none()
    );
}

#[test]
fn request_caps_have_defaults_flags_and_refuse_zero() {
    let parse = |extra: &[&str]| {
        let mut argv = vec!["serve", "--config", "limits"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|cli| cli.serve.request_caps())
    };
    assert_eq!(parse(&[]).expect("valid"), RequestCaps::default());
    let caps = parse(&[
        "--max-descriptors",
        "8",
        "--max-descriptor-entries",
        "4",
        "--max-request-bytes",
        "65536",
    ])
    .expect("valid");
    assert_eq!(
        caps,
        RequestCaps {
            max_descriptors: 8,
            max_descriptor_entries: 4,
            max_message_bytes: 65536,
        }
    );
    assert!(parse(&["--max-descriptors", "0"]).is_err());
    assert!(parse(&["--max-request-bytes", "1MiB"]).is_err());
}

#[test]
fn store_and_connection_bounds_have_defaults_flags_and_refuse_bad_values() {
    let parse = |extra: &[&str]| {
        let mut argv = vec!["serve", "--config", "limits"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|cli| cli.serve)
    };
    let defaults = parse(&[]).expect("valid");
    let no_env = UpstreamEnv::from_pairs::<&str, &str>([]);
    let options = defaults.engine_options(&settings(&defaults, &no_env).expect("valid"));
    assert!(!options.global_shadow_mode);
    assert_eq!(options.store_config.max_keys, 1_000_000);
    assert_eq!(
        options.store_config.max_log_entries,
        DEFAULT_MAX_LOG_ENTRIES
    );
    assert_eq!(options.override_store_config.max_keys, 100_000);
    assert_eq!(options.max_override_stores, 1024);
    assert_eq!(defaults.quick_deny_keys, 65_536);
    assert_eq!(defaults.max_connections, 10_000);
    assert_eq!(defaults.request_headers_timeout, Duration::from_secs(10));
    let set = parse(&[
        "--max-keys",
        "5000",
        "--max-override-keys",
        "700",
        "--max-override-stores",
        "3",
        "--max-log-entries",
        "900",
        "--quick-deny-keys",
        "0",
        "--max-connections",
        "2",
        "--request-headers-timeout",
        "250ms",
        "--shadow-mode",
    ])
    .expect("valid");
    let options = set.engine_options(&settings(&set, &no_env).expect("valid"));
    assert!(options.global_shadow_mode);
    assert_eq!(
        (
            options.store_config.max_keys,
            options.store_config.max_log_entries,
            options.override_store_config.max_keys,
            options.max_override_stores,
        ),
        (5000, 900, 700, 3)
    );
    assert_eq!(
        (
            set.quick_deny_keys,
            set.max_connections,
            set.request_headers_timeout
        ),
        (0, 2, Duration::from_millis(250))
    );
    for bad in [
        ["--max-keys", "0"],
        ["--max-override-keys", "many"],
        ["--max-override-stores", "1.5"],
        ["--max-log-entries", "0"],
        ["--quick-deny-keys", "lots"],
        ["--max-connections", "0"],
        ["--request-headers-timeout", "0s"],
        ["--request-headers-timeout", "soon"],
    ] {
        let error = parse(&bad).expect_err("refused").to_string();
        assert!(error.contains(bad[0]), "{bad:?}: {error}");
    }
}

#[test]
fn bad_upstream_values_are_usage_errors() {
    for env in [
        [("GRPC_PORT", "http")],
        [("PORT", "eighty")],
        [("SHADOW_MODE", "maybe")],
        [("LOG_LEVEL", "loud")],
        [("LIMIT_RESPONSE_HEADERS_ENABLED", "yes please")],
        [("LIMIT_RESET_HEADER", "bad name")],
        [("LOG_FORMAT", "xml")],
        [("NEAR_LIMIT_RATIO", "1.5")],
    ] {
        match resolve(&[], &env) {
            Err(CommandError::Usage(message)) => {
                assert!(message.contains(env[0].0), "{message}")
            }
            other => panic!("{env:?}: expected a usage error, got {other:?}"),
        }
    }
}

#[test]
fn without_config_serve_reads_upstreams_runtime_directory_and_listens_like_upstream() {
    // Without REDIS_URL, upstream's mode never counts per pod in silence.
    let cli = Cli::try_parse_from(["serve"]).expect("no flags parse");
    let Err(e) = settings(&cli.serve, &UpstreamEnv::default()) else {
        panic!("serve without --config and without REDIS_URL must not count in memory in silence");
    };
    let e = e.to_string();
    assert!(
        e.contains("REDIS_URL is not set") && e.contains("TOLLGATE_STORE=memory"),
        "{e}"
    );
    let cli = Cli::try_parse_from(["serve", "--store", "memory"]).expect("the flags parse");
    let s = settings(&cli.serve, &UpstreamEnv::default()).expect("valid");
    assert_eq!(s.config, Path::new("/srv/runtime_data/current/config"));
    assert_eq!(s.grpc_addr, addr("0.0.0.0:8081"));
    assert_eq!(s.http_addr, addr("0.0.0.0:8080"));
    assert_eq!(s.debug_addr, Some(addr("0.0.0.0:6070")));
    assert_eq!(s.store, None);
    assert_eq!(s.store_timeout, tollgate_redis::DEFAULT_TIMEOUT);
    // Upstream's connection age: 24h, then an hour's grace.
    assert_eq!(
        s.max_connection_age.map(|a| (a.max_age, a.grace)),
        Some((Duration::from_secs(86_400), Duration::from_secs(3600)))
    );
    // With --config, Tollgate's own loopback defaults, no debug port and no aging.
    let s = resolve(&[], &[]).expect("valid");
    assert_eq!(s.debug_addr, None);
    assert_eq!(s.max_connection_age, None);
    // The flags win over upstream's variables; an age of 0 is refused.
    let s = resolve(
        &[
            "--max-connection-age",
            "5m",
            "--max-connection-age-grace",
            "10s",
        ],
        &[("GRPC_MAX_CONNECTION_AGE", "24h")],
    )
    .expect("valid");
    assert_eq!(
        s.max_connection_age.map(|a| (a.max_age, a.grace)),
        Some((Duration::from_secs(300), Duration::from_secs(10)))
    );
    let Err(e) = resolve(&[], &[("GRPC_MAX_CONNECTION_AGE", "0s")]) else {
        panic!("GRPC_MAX_CONNECTION_AGE=0s is refused");
    };
    assert!(e.to_string().contains("maximum connection age of 0"), "{e}");
    let Err(e) = resolve(&[], &[("GRPC_MAX_CONNECTION_AGE", "soon")]) else {
        panic!("GRPC_MAX_CONNECTION_AGE=soon is refused");
    };
    assert!(e.to_string().contains("GRPC_MAX_CONNECTION_AGE"), "{e}");
    // A host without a port listens on upstream's port (it used to be ignored).
    let s = resolve(&[], &[("GRPC_HOST", "::"), ("HOST", "0.0.0.0")]).expect("valid");
    assert_eq!(s.grpc_addr, addr("[::]:8081"));
    assert_eq!(s.http_addr, addr("0.0.0.0:8080"));
}

#[test]
fn redis_key_format_defaults_to_tollgate_and_refuses_other_names() {
    let parse = |extra: &[&str]| {
        let mut argv = vec!["serve", "--config", "limits"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|cli| cli.serve.redis_key_format)
    };
    assert_eq!(parse(&[]).expect("valid"), RedisKeyFormat::Tollgate);
    assert_eq!(
        parse(&["--redis-key-format", "upstream"]).expect("valid"),
        RedisKeyFormat::Upstream
    );
    let refused = parse(&["--redis-key-format", "envoy"])
        .expect_err("an unknown format")
        .to_string();
    assert!(refused.contains("envoy"), "{refused}");
}

/// The jitter of upstream keys: the flag, else upstream's variable, else upstream's default.
#[test]
fn expiration_jitter_comes_from_the_flag_then_upstreams_variable() {
    let env = [("EXPIRATION_JITTER_MAX_SECONDS", "17")];
    let jitter = |argv: &[&str], env: &[(&str, &str)]| {
        resolve(argv, env).expect("valid").expiration_jitter_max_s
    };
    assert_eq!(jitter(&[], &[]), 300);
    assert_eq!(jitter(&[], &env), 17);
    assert_eq!(jitter(&["--expiration-jitter-max-seconds", "0"], &env), 0);
    match resolve(&[], &[("EXPIRATION_JITTER_MAX_SECONDS", "5m")]) {
        Err(CommandError::Usage(message)) => {
            assert!(
                message.contains("EXPIRATION_JITTER_MAX_SECONDS"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn redis_encoding_defaults_to_hash_and_refuses_other_names() {
    let parse = |extra: &[&str]| {
        let mut argv = vec!["serve", "--config", "limits"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|cli| cli.serve.redis_encoding)
    };
    // The default is safe beside instances of a release before `packed`.
    assert_eq!(parse(&[]).expect("valid"), RedisEncoding::Hash);
    assert_eq!(
        parse(&["--redis-encoding", "packed"]).expect("valid"),
        RedisEncoding::Packed
    );
    assert_eq!(
        tollgate_redis::Encoding::from(RedisEncoding::Packed),
        tollgate_redis::Encoding::Packed
    );
    let refused = parse(&["--redis-encoding", "string"])
        .expect_err("an unknown encoding is refused")
        .to_string();
    assert!(
        refused.contains("hash") && refused.contains("packed"),
        "{refused}"
    );
}

#[test]
fn the_rlqs_assignment_ttl_defaults_to_3s_and_refuses_less_than_a_second() {
    let cli = Cli::try_parse_from(["serve", "--config", "limits"]).expect("the flags parse");
    assert_eq!(cli.serve.rlqs_assignment_ttl, Duration::from_secs(3));
    let error = Cli::try_parse_from([
        "serve",
        "--config",
        "limits",
        "--rlqs-assignment-ttl",
        "500ms",
    ])
    .err()
    .expect("a sub-second time to live is refused");
    assert!(error.to_string().contains("whole seconds"), "{error}");
}
