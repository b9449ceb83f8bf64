//! The differential test: Envoy 1.40 (`TOLLGATE_ENVOY`, else `.venv/bin/envoy`)
//! and `tollgate proxy` run the same `LocalRateLimit` config in front of the
//! same loopback upstream, receive the same request sequences, and must give
//! the same status codes, bodies and rate-limit headers.
//!
//! Every bucket refills at most one token per 36 s, so nothing refills
//! during a sequence and the answers do not depend on timing.

use std::net::SocketAddr;

use tollgate_testkit::bootstrap::{Bootstrap, yaml_value};
use tollgate_testkit::envoy::{Envoy, envoy_binary};
use tollgate_testkit::http::{Connection, Response};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::process::log_tail;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::LoggedChild;
use tollgate_testkit::upstream::Upstream;

const LOCAL_RATELIMIT_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";

const ENABLED: &str = "filter_enabled:\n  default_value: {numerator: 100, denominator: HUNDRED}\nfilter_enforced:\n  default_value: {numerator: 100, denominator: HUNDRED}\n";

/// One request of a sequence: which connection it uses (None = a fresh one), its path and headers.
struct Step {
    connection: Option<usize>,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
}

fn fresh(user: Option<&str>) -> Step {
    Step {
        connection: None,
        path: "/",
        headers: user
            .map(|u| vec![("x-user", u.to_owned())])
            .unwrap_or_default(),
    }
}

fn on(connection: usize) -> Step {
    Step {
        connection: Some(connection),
        path: "/",
        headers: Vec::new(),
    }
}

struct Case {
    name: &'static str,
    /// The LocalRateLimit fields, as block YAML at column 0.
    config: String,
    steps: Vec<Step>,
    /// The status codes both must give (a guard against both being wrong alike).
    expected: Vec<u16>,
}

fn cases() -> Vec<Case> {
    let users = |list: &[Option<&str>]| list.iter().map(|u| fresh(*u)).collect::<Vec<_>>();
    let by_user = "rate_limits:\n  - actions:\n    - request_headers: {header_name: x-user, descriptor_key: user}\n";
    vec![
        Case {
            name: "headers",
            config: format!(
                "stat_prefix: headers\ntoken_bucket: {{max_tokens: 3, tokens_per_fill: 1, fill_interval: 3600s}}\n{ENABLED}enable_x_ratelimit_headers: DRAFT_VERSION_03\nenable_retry_after_header: true\nresponse_headers_to_add:\n  - append_action: OVERWRITE_IF_EXISTS_OR_ADD\n    header: {{key: x-local-rate-limit, value: 'true'}}\n"
            ),
            steps: users(&[None; 5]),
            expected: vec![200, 200, 200, 429, 429],
        },
        Case {
            name: "descriptors",
            config: format!(
                "stat_prefix: descriptors\ntoken_bucket: {{max_tokens: 100, tokens_per_fill: 100, fill_interval: 3600s}}\n{ENABLED}enable_x_ratelimit_headers: DRAFT_VERSION_03\n{by_user}descriptors:\n  - entries: [{{key: user, value: alice}}]\n    token_bucket: {{max_tokens: 2, tokens_per_fill: 2, fill_interval: 3600s}}\n  - entries: [{{key: user}}]\n    token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}}\n"
            ),
            steps: users(&[
                Some("alice"),
                Some("alice"),
                Some("alice"),
                Some("bob"),
                Some("bob"),
                Some("carol"),
                Some("carol"),
                None,
                None,
            ]),
            expected: vec![200, 200, 429, 200, 429, 200, 429, 200, 200],
        },
        Case {
            name: "lru",
            config: format!(
                "stat_prefix: lru\n{ENABLED}enable_x_ratelimit_headers: DRAFT_VERSION_03\nmax_dynamic_descriptors: 2\n{by_user}descriptors:\n  - entries: [{{key: user}}]\n    token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}}\n"
            ),
            steps: users(&["a", "a", "b", "b", "c", "c", "a", "a"].map(Some)),
            expected: vec![200, 429, 200, 429, 200, 429, 200, 429],
        },
        Case {
            name: "shadow",
            config: format!(
                "stat_prefix: shadow\ntoken_bucket: {{max_tokens: 2, tokens_per_fill: 1, fill_interval: 3600s}}\n{ENABLED}enable_x_ratelimit_headers: DRAFT_VERSION_03\n{by_user}descriptors:\n  - entries: [{{key: user, value: alice}}]\n    token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}}\n    shadow_mode: true\n"
            ),
            steps: users(&[Some("alice"), Some("alice"), Some("alice")]),
            expected: vec![200, 200, 429],
        },
        Case {
            name: "always_consume_false",
            config: format!(
                "stat_prefix: acf\ntoken_bucket: {{max_tokens: 3, tokens_per_fill: 1, fill_interval: 3600s}}\n{ENABLED}always_consume_default_token_bucket: false\n{by_user}descriptors:\n  - entries: [{{key: user}}]\n    token_bucket: {{max_tokens: 10, tokens_per_fill: 1, fill_interval: 3600s}}\n"
            ),
            steps: users(&[Some("alice"), Some("alice"), Some("bob"), None, None, None, None]),
            expected: vec![200, 200, 200, 200, 200, 200, 429],
        },
        Case {
            name: "per_connection",
            config: format!(
                "stat_prefix: perconn\ntoken_bucket: {{max_tokens: 3, tokens_per_fill: 1, fill_interval: 3600s}}\n{ENABLED}enable_x_ratelimit_headers: DRAFT_VERSION_03\nlocal_rate_limit_per_downstream_connection: true\n"
            ),
            steps: vec![on(0), on(0), on(0), on(0), on(0), on(1), on(1), on(0)],
            expected: vec![200, 200, 200, 429, 429, 200, 200, 429],
        },
        Case {
            name: "status_503",
            config: format!(
                "stat_prefix: s503\nstatus: {{code: 503}}\ntoken_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}}\n{ENABLED}enable_retry_after_header: true\nenable_x_ratelimit_headers: DRAFT_VERSION_03\n"
            ),
            steps: users(&[None, None]),
            expected: vec![200, 503],
        },
        Case {
            name: "not_enforced",
            config: "stat_prefix: nenf\ntoken_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}\nfilter_enabled:\n  default_value: {numerator: 100, denominator: HUNDRED}\nfilter_enforced:\n  default_value: {numerator: 0, denominator: HUNDRED}\nenable_x_ratelimit_headers: DRAFT_VERSION_03\nrequest_headers_to_add_when_not_enforced:\n  - append_action: OVERWRITE_IF_EXISTS_OR_ADD\n    header: {key: x-limited, value: 'yes'}\n".to_owned(),
            steps: (0..3)
                .map(|_| Step {
                    connection: None,
                    path: "/echo",
                    headers: Vec::new(),
                })
                .collect(),
            expected: vec![200, 200, 200],
        },
        Case {
            name: "grpc",
            config: format!(
                "stat_prefix: grpc\ntoken_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}}\n{ENABLED}rate_limited_as_resource_exhausted: true\n"
            ),
            steps: (0..2)
                .map(|_| Step {
                    connection: None,
                    path: "/",
                    headers: vec![("content-type", "application/grpc".to_owned())],
                })
                .collect(),
            expected: vec![200, 200],
        },
        Case {
            // Envoy 1.40 charges a descriptor's bucket its `hits_addend`
            // (a number, or a header through `%REQ(...)%`) and the default bucket 1.
            name: "hits_addend",
            config: format!(
                "stat_prefix: cost\ntoken_bucket: {{max_tokens: 20, tokens_per_fill: 1, fill_interval: 3600s}}\n{ENABLED}enable_x_ratelimit_headers: DRAFT_VERSION_03\nrate_limits:\n  - actions:\n    - generic_key: {{descriptor_value: priced}}\n    hits_addend: {{format: '%REQ(x-cost)%'}}\n  - actions:\n    - generic_key: {{descriptor_key: fixed, descriptor_value: five}}\n    hits_addend: {{number: 5}}\ndescriptors:\n  - entries: [{{key: generic_key, value: priced}}]\n    token_bucket: {{max_tokens: 10, tokens_per_fill: 1, fill_interval: 3600s}}\n  - entries: [{{key: fixed, value: five}}]\n    token_bucket: {{max_tokens: 12, tokens_per_fill: 2, fill_interval: 3600s}}\n"
            ),
            steps: ["3", "4", " 2", "1", "1"]
                .iter()
                .map(|cost| Step {
                    connection: None,
                    path: "/",
                    headers: vec![("x-cost", (*cost).to_owned())],
                })
                .collect(),
            expected: vec![200, 200, 429, 429, 429],
        },
        Case {
            name: "disabled",
            config: "stat_prefix: inert\ntoken_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 3600s}\nenable_x_ratelimit_headers: DRAFT_VERSION_03\n".to_owned(),
            steps: users(&[None, None, None]),
            expected: vec![200, 200, 200],
        },
    ]
}

/// `examples/envoy/local.yaml` with one listener per case in place of the
/// example's: the example's listener, its `local_ratelimit` fields replaced
/// by the case's.
fn bootstrap(admin_port: u16, upstream: SocketAddr, listeners: &[(String, u16, String)]) -> String {
    let mut bootstrap = Bootstrap::example("examples/envoy/local.yaml");
    bootstrap
        .set_admin_port(admin_port)
        .set_cluster_port("backend", upstream.port());
    for (name, port, config) in listeners {
        bootstrap.copy_listener("ingress", name, *port);
        let mut fields = yaml_value(config);
        fields["@type"] = LOCAL_RATELIMIT_TYPE.into();
        *bootstrap.http_filter(name, "envoy.filters.http.local_ratelimit") = fields;
    }
    bootstrap.remove_listener("ingress");
    bootstrap.text()
}

/// What the comparison looks at: status, body, and the rate-limit headers.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    body: String,
    headers: Vec<(String, Option<String>)>,
}

const COMPARED: [&str; 8] = [
    "grpc-message",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "retry-after",
    "x-local-rate-limit",
    "x-envoy-ratelimited",
    "grpc-status",
];

fn seen(response: &Response, path: &str) -> Seen {
    let body = if path.starts_with("/echo") {
        // Only the header the filter adds; the proxies add different forwarding headers.
        response
            .body
            .lines()
            .filter(|l| l.starts_with("x-limited"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        response.body.clone()
    };
    let mut headers: Vec<(String, Option<String>)> = COMPARED
        .iter()
        .map(|n| ((*n).to_owned(), response.header(n).map(str::to_owned)))
        .collect();
    if response.status != 200 {
        headers.push((
            "content-type".to_owned(),
            response.header("content-type").map(str::to_owned),
        ));
    }
    Seen {
        status: response.status,
        body,
        headers,
    }
}

fn run(addr: SocketAddr, steps: &[Step]) -> Vec<Seen> {
    let mut connections: Vec<Option<Connection>> = Vec::new();
    steps
        .iter()
        .map(|step| {
            let headers: Vec<(&str, &str)> =
                step.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let response = match step.connection {
                None => Connection::open(addr).send("GET", step.path, &headers),
                Some(i) => {
                    if connections.len() <= i {
                        connections.resize_with(i + 1, || None);
                    }
                    let connection = match &mut connections[i] {
                        Some(c) => c,
                        slot => slot.insert(Connection::open(addr)),
                    };
                    connection.send("GET", step.path, &headers)
                }
            };
            seen(
                &response.unwrap_or_else(|e| panic!("a request to {addr} failed: {e}")),
                step.path,
            )
        })
        .collect()
}

#[test]
fn envoy_and_tollgate_answer_every_local_ratelimit_sequence_alike() {
    let envoy = envoy_binary();
    let dir = TempDir::new("proxy-differential");
    let upstream = Upstream::spawn();
    let cases = cases();
    let listeners: Vec<(String, u16, String)> = cases
        .iter()
        .map(|c| (c.name.to_owned(), free_port(), c.config.clone()))
        .collect();
    let admin_port = free_port();
    let Envoy {
        child: _envoy,
        log: envoy_log,
    } = Envoy::start(
        &envoy,
        &dir.0,
        &bootstrap(admin_port, upstream.addr, &listeners),
        admin_port,
    );
    let upstream_arg = upstream.addr.to_string();
    for (case, (_, envoy_port, _)) in cases.iter().zip(&listeners) {
        let file = dir.write(
            &format!("{}.yaml", case.name),
            &format!("\"@type\": {LOCAL_RATELIMIT_TYPE}\n{}", case.config),
        );
        let proxy = LoggedChild::proxy(
            &[
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &upstream_arg,
                "--local-ratelimit",
                file.to_str().expect("a UTF-8 path"),
                "--worker-threads",
                "1",
                "--log-level",
                "warn",
            ],
            dir.0.join(format!("{}.log", case.name)),
            false,
        );
        let from_envoy = run(SocketAddr::from(([127, 0, 0, 1], *envoy_port)), &case.steps);
        let from_tollgate = run(proxy.addr, &case.steps);
        let statuses: Vec<u16> = from_envoy.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            case.expected,
            "case {}: Envoy's statuses; envoy log:\n{}",
            case.name,
            log_tail(&envoy_log)
        );
        if case.name == "headers" {
            // What the comparison covers, spelled out once: the enforced 429.
            let denied = &from_tollgate[3];
            assert_eq!(denied.body, "local_rate_limited");
            let expected = [
                ("x-ratelimit-limit", "3"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "3600"),
                ("retry-after", "3600"),
                ("x-local-rate-limit", "true"),
                ("content-type", "text/plain"),
            ];
            for (name, value) in expected {
                assert!(
                    denied
                        .headers
                        .contains(&(name.to_owned(), Some(value.to_owned()))),
                    "{name}: {value} missing in {denied:?}"
                );
            }
        }
        assert_eq!(from_tollgate.len(), from_envoy.len());
        for (i, (e, t)) in from_envoy.iter().zip(&from_tollgate).enumerate() {
            assert_eq!(
                t,
                e,
                "case {} step {i}: tollgate (left) and Envoy (right) differ; proxy log:\n{}",
                case.name,
                log_tail(&proxy.log)
            );
        }
    }
}
