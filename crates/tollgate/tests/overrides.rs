//! The overrides API of `tollgate serve`: a change made through one instance is enforced by every instance on one Redis within a second, keeps the counters, and is gone on delete; callers without credentials and bad overrides are refused; a single instance keeps its overrides across a restart.
//!
//! The limits are per day, so no counter rolls over during a test (short of
//! midnight UTC); every wait is a bounded poll of a real answer.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tollgate_testkit::budget::poll_until;
use tollgate_testkit::http::{Response, exchange};
use tollgate_testkit::redis::RedisServer;
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{EPHEMERAL_ADDRS, LoggedChild, tollgate};

/// Three a day for each tenant.
const LIMITS: &str = "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: day, requests_per_unit: 3}\n";

/// Ten a day for `acme`.
const ACME_TEN: &str = "key: tenant\nvalue: acme\nrate_limit: {unit: day, requests_per_unit: 10}\n";

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// `tollgate serve` on ephemeral loopback ports with `extra` flags; its HTTP address.
fn serve(dir: &TempDir, log: &str, extra: &[&str]) -> (LoggedChild, SocketAddr) {
    let mut command = tollgate(&["serve", "--config"]);
    command
        .arg(dir.path().join("limits.yaml"))
        .args(EPHEMERAL_ADDRS)
        .args(["--log-level", "info"])
        .args(extra);
    let mut child = LoggedChild::spawn(command, dir.path().join(log), false);
    let http = child.listener("http");
    (child, http)
}

/// `serve` in memory asking for [`TOKEN`] (in `DIR/tokens`), with `extra` flags.
fn serve_with_token(dir: &TempDir, extra: &[&str]) -> (LoggedChild, SocketAddr) {
    let tokens = dir.write("tokens", &format!("# operators\nops:{TOKEN}\n"));
    let mut flags = vec!["--store", "memory", "--overrides-token-file"];
    flags.push(tokens.to_str().expect("UTF-8"));
    flags.extend_from_slice(extra);
    serve(dir, "serve.log", &flags)
}

/// One request with the token (when given).
fn call(http: SocketAddr, method: &str, path: &str, token: Option<&str>, body: &str) -> Response {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    if let Some(bearer) = &bearer {
        headers.push(("authorization", bearer.as_str()));
    }
    exchange(&http.to_string(), method, path, &headers, body)
}

/// One hit for tenant `acme`; the remaining count.
fn spend(http: SocketAddr) -> u64 {
    let reply = call(
        http,
        "POST",
        "/v1/check",
        None,
        r#"{"domain":"api","descriptors":[{"tenant":"acme"}]}"#,
    );
    reply.json()["statuses"][0]["remaining"]
        .as_u64()
        .unwrap_or_else(|| panic!("a remaining count: {reply:?}"))
}

/// `acme`'s limit and remaining count, read without spending.
fn usage(http: SocketAddr, token: Option<&str>) -> (u64, u64) {
    let reply = call(http, "GET", "/v1/usage/api?tenant=acme", token, "");
    assert_eq!(reply.status, 200, "{reply:?}");
    let json = reply.json();
    (
        json["limit"].as_u64().expect("a limit"),
        json["remaining"].as_u64().expect("a remaining count"),
    )
}

#[test]
fn an_override_set_through_one_instance_is_enforced_by_both_within_a_second_and_removed_on_delete()
{
    let redis = RedisServer::start();
    let dir = TempDir::new("overrides-fleet");
    dir.limits(LIMITS);
    let tokens = dir.write("tokens", &format!("ops:{TOKEN}\n"));
    let url = redis.url();
    let flags = [
        "--store",
        url.as_str(),
        "--overrides-token-file",
        tokens.to_str().expect("UTF-8"),
    ];
    let (_a, a) = serve(&dir, "a.log", &flags);
    let (_b, b) = serve(&dir, "b.log", &flags);
    let token = Some(TOKEN);

    assert_eq!(spend(a), 2);
    assert_eq!(spend(b), 1, "one count in Redis for both");
    assert_eq!(usage(b, token), (3, 1), "reading usage spends nothing");
    assert_eq!(usage(b, token), (3, 1));

    let set = call(a, "PUT", "/v1/overrides/api", token, ACME_TEN);
    assert_eq!(set.status, 201, "{set:?}");
    assert_eq!(set.json()["id"], "api?tenant=acme");
    assert_eq!(
        usage(a, token),
        (10, 8),
        "in service at once where set, counters kept"
    );
    let seen = poll_until(Duration::from_secs(1), || {
        (usage(b, token).0 == 10).then_some(())
    });
    assert!(seen.is_some(), "the other instance applies it within 1s");
    assert_eq!(usage(b, token), (10, 8), "the counters carried over");
    assert_eq!(spend(b), 7, "enforced by the other instance");
    let rlconfig = call(b, "GET", "/rlconfig", None, "").body;
    assert!(
        rlconfig.contains("api.tenant_acme: requests_per_unit=10 window=86400s algorithm=fixed_window, source=override"),
        "{rlconfig}"
    );
    let listed = call(b, "GET", "/v1/overrides", token, "").json();
    assert_eq!(listed[0]["body"], ACME_TEN, "{listed}");

    let deleted = call(b, "DELETE", "/v1/overrides/api?tenant=acme", token, "");
    assert_eq!(deleted.status, 204, "{deleted:?}");
    let gone = poll_until(Duration::from_secs(1), || {
        (usage(a, token).0 == 3).then_some(())
    });
    assert!(
        gone.is_some(),
        "the delete reaches the other instance within 1s"
    );
    assert_eq!(
        usage(a, token),
        (3, 0),
        "the file's limit again, over the same count"
    );
    assert_eq!(
        call(a, "GET", "/v1/overrides/api?tenant=acme", token, "").status,
        404
    );
    let log = std::fs::read_to_string(dir.path().join("a.log")).expect("a log");
    assert!(
        log.contains("override set") && log.contains("who=\"token:ops@127.0.0.1:"),
        "every change names who made it: {log}"
    );
}

#[test]
fn callers_without_credentials_and_bad_overrides_are_refused_with_the_file_diagnostic() {
    let dir = TempDir::new("overrides-refused");
    dir.limits(LIMITS);
    let (_server, http) = serve_with_token(&dir, &["--max-overrides", "1"]);
    let none = call(http, "PUT", "/v1/overrides/api", None, ACME_TEN);
    assert_eq!(none.status, 401, "{none:?}");
    assert!(none.body.contains("Authorization: Bearer"), "{none:?}");
    let wrong = call(
        http,
        "PUT",
        "/v1/overrides/api",
        Some("0123456789abcdef-wrong"),
        ACME_TEN,
    );
    assert_eq!(wrong.status, 403, "{wrong:?}");
    assert_eq!(
        call(http, "GET", "/v1/usage/api?tenant=acme", None, "").status,
        401
    );
    assert_eq!(usage(http, Some(TOKEN)), (3, 3), "nothing was set");

    // The same descriptor in a limits file gets the same words.
    let bad = "key: tenant\nvalue: acme\nrate_limit: {unit: day, requests_per_unit: 10, algorithm: leaky}\n";
    let refused = call(http, "PUT", "/v1/overrides/api", Some(TOKEN), bad);
    assert_eq!(refused.status, 400, "{refused:?}");
    let file = "domain: api\ndescriptors:\n  - key: tenant\n    value: acme\n    rate_limit: {unit: day, requests_per_unit: 10, algorithm: leaky}\n";
    let loaded = tollgate_rules::load_sources(
        [(Path::new("limits.yaml"), file)],
        tollgate_rules::LoadOptions::default(),
    );
    let expected = loaded
        .diagnostics
        .errors()
        .next()
        .expect("the file has the error");
    assert!(
        refused
            .body
            .contains(&format!("error: {}", expected.message)),
        "{refused:?} vs {expected}"
    );
    assert!(refused.body.starts_with("override:3:"), "{refused:?}");

    assert_eq!(
        call(http, "PUT", "/v1/overrides/api", Some(TOKEN), ACME_TEN).status,
        201
    );
    let over = call(
        http,
        "PUT",
        "/v1/overrides/api",
        Some(TOKEN),
        "key: tenant\nvalue: other\nrate_limit: {unlimited: true}\n",
    );
    assert_eq!(over.status, 409, "past --max-overrides: {over:?}");
    let metrics = call(http, "GET", "/metrics", None, "").body;
    assert!(metrics.contains("ratelimit_overrides 1"), "{metrics}");
    assert!(metrics.contains("ratelimit_overrides_limit 1"), "{metrics}");
}

#[test]
fn a_single_instance_keeps_its_overrides_across_a_restart_and_a_bad_file_stops_the_start() {
    let dir = TempDir::new("overrides-file");
    dir.limits(LIMITS);
    let kept = dir.path().join("overrides.json");
    let flags = [
        "--store",
        "memory",
        "--overrides-file",
        kept.to_str().expect("UTF-8"),
    ];
    {
        let (_server, http) = serve(&dir, "first.log", &flags);
        assert_eq!(
            call(http, "PUT", "/v1/overrides/api", None, ACME_TEN).status,
            201
        );
        assert_eq!(usage(http, None), (10, 10));
    }
    let (_server, http) = serve(&dir, "second.log", &flags);
    assert_eq!(
        usage(http, None),
        (10, 10),
        "the override came back with the restart"
    );
    let read = call(http, "GET", "/v1/overrides/api?tenant=acme", None, "");
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.json()["body"], ACME_TEN);

    std::fs::write(
        &kept,
        r#"{"overrides":[{"domain":"api","body":"key: tenant\nrate_limit: {unit: fortnight, requests_per_unit: 1}\n"}]}"#,
    )
    .expect("written");
    let output = tollgate(&["serve", "--config"])
        .arg(dir.path().join("limits.yaml"))
        .args(EPHEMERAL_ADDRS)
        .args(flags)
        .output()
        .expect("tollgate runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("overrides.json: override 0 (domain `api`) is refused")
            && stderr.contains("fortnight"),
        "{stderr}"
    );
}

#[test]
fn a_redis_outage_keeps_the_last_applied_overrides_and_says_so() {
    let mut redis = RedisServer::start();
    let dir = TempDir::new("overrides-outage");
    dir.limits(LIMITS);
    let url = redis.url();
    let (_server, http) = serve(&dir, "serve.log", &["--store", url.as_str()]);
    assert_eq!(
        call(http, "PUT", "/v1/overrides/api", None, ACME_TEN).status,
        201
    );
    redis.kill();
    let log = dir.path().join("serve.log");
    let logged = poll_until(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("cannot read the overrides from Redis; keeping the last applied ones")
            .then_some(text)
    });
    assert!(logged.is_some(), "the outage is logged");
    let rlconfig = call(http, "GET", "/rlconfig", None, "").body;
    assert!(
        rlconfig.contains("api.tenant_acme: requests_per_unit=10")
            && rlconfig.contains("source=override"),
        "the override stays in service: {rlconfig}"
    );
    let refused = call(http, "DELETE", "/v1/overrides/api?tenant=acme", None, "");
    assert_eq!(
        refused.status, 503,
        "a change that cannot be kept changes nothing: {refused:?}"
    );
    assert!(
        call(http, "GET", "/rlconfig", None, "")
            .body
            .contains("source=override")
    );
}

/// `tollgate limits ARGS` against `http`; its exit code, stdout and stderr.
fn limits_command(
    http: SocketAddr,
    token_file: Option<&Path>,
    args: &[&str],
) -> (i32, String, String) {
    let mut flags: Vec<OsString> = Vec::new();
    if let Some(file) = token_file {
        flags.extend(["--token-file".into(), file.into()]);
    }
    limits_at(&format!("http://{http}"), &flags, args)
}

/// `tollgate limits --url URL FLAGS ARGS`; its exit code, stdout and stderr.
fn limits_at(url: &str, flags: &[OsString], args: &[&str]) -> (i32, String, String) {
    let mut command = tollgate(&["limits", "--url", url]);
    let output = command
        .args(flags)
        .args(args)
        .output()
        .expect("tollgate runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_limits_command_sets_reads_lists_reads_usage_and_deletes() {
    let dir = TempDir::new("overrides-cli");
    dir.limits(LIMITS);
    let body = dir.write("acme.yaml", ACME_TEN);
    let (_server, http) = serve_with_token(&dir, &[]);
    let tokens = dir.path().join("tokens");
    let token = Some(tokens.as_path());
    let body = body.to_str().expect("UTF-8");

    let (code, _, stderr) = limits_command(http, None, &["set", "api", body]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");

    let (code, stdout, stderr) = limits_command(http, token, &["set", "api", body]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\"id\": \"api?tenant=acme\""), "{stdout}");
    let (code, stdout, _) = limits_command(http, token, &["get", "api", "tenant=acme"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("requests_per_unit: 10"), "{stdout}");
    let (_, stdout, _) = limits_command(http, token, &["list"]);
    assert!(stdout.contains("api?tenant=acme"), "{stdout}");
    let (code, stdout, _) = limits_command(http, token, &["usage", "api", "tenant=acme"]);
    assert_eq!(code, 0);
    let usage: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        (usage["limit"].as_u64(), usage["remaining"].as_u64()),
        (Some(10), Some(10))
    );
    assert_eq!(usage["source"], "override");

    let (code, stdout, _) = limits_command(http, token, &["delete", "api", "tenant=acme"]);
    assert_eq!((code, stdout.trim()), (0, "deleted"));
    let (code, _, stderr) = limits_command(http, token, &["get", "api", "tenant=acme"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("404 Not Found: no override at api?tenant=acme"),
        "{stderr}"
    );
    let bad = dir.write(
        "bad.yaml",
        "key: tenant\nrate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    );
    let (code, _, stderr) =
        limits_command(http, token, &["set", "api", bad.to_str().expect("UTF-8")]);
    assert_eq!(code, 1);
    assert!(stderr.contains("400 Bad Request: override:2:"), "{stderr}");
}

#[test]
fn beyond_loopback_without_credentials_the_api_is_disabled_and_says_why() {
    let dir = TempDir::new("overrides-open");
    dir.limits(LIMITS);
    let mut command = tollgate(&["serve", "--config"]);
    command
        .arg(dir.path().join("limits.yaml"))
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "0.0.0.0:0"])
        .args(["--store", "memory", "--log-level", "info"]);
    let mut server = LoggedChild::spawn(command, dir.path().join("serve.log"), false);
    let bound = server.listener("http");
    let http = SocketAddr::from(([127, 0, 0, 1], bound.port()));
    for (method, path, body) in [
        ("PUT", "/v1/overrides/api", ACME_TEN),
        ("GET", "/v1/overrides", ""),
        ("GET", "/v1/usage/api?tenant=acme", ""),
    ] {
        let refused = call(http, method, path, None, body);
        assert_eq!(refused.status, 403, "{method} {path}: {refused:?}");
        assert!(
            refused
                .body
                .contains("the overrides API is disabled on this listener")
                && refused.body.contains("--overrides-token-file"),
            "{refused:?}"
        );
    }
    assert_eq!(spend(http), 2, "the rest of the HTTP API still answers");
    let log = std::fs::read_to_string(dir.path().join("serve.log")).expect("a log");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("the overrides API is disabled")),
        "said at start: {log}"
    );
}

/// One request over mutual TLS to `addr` (trusting `ca`, presenting `client`); the status and body.
fn mutual_tls_call(
    addr: SocketAddr,
    ca: &Path,
    client: &tollgate_testkit::pki::Issued,
    (method, path, body): (&str, &str, &'static str),
) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let files = tollgate_tls::ClientTlsFiles {
        ca: Some(ca.to_path_buf()),
        cert: Some(client.cert.clone()),
        key: Some(client.key.clone()),
        server_name: Some("localhost".to_owned()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let connector = files
            .connector(&[tollgate_tls::ALPN_HTTP1])
            .expect("a connector");
        let stream = connector
            .connect_to("127.0.0.1", addr.port())
            .await
            .expect("the handshake succeeds");
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("HTTP/1.1");
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                body.as_bytes(),
            )))
            .expect("a request");
        let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
            .await
            .expect("an answer in time")
            .expect("an answer");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
}

#[test]
fn beyond_loopback_mutual_tls_lets_a_verified_client_in_and_logs_its_certificate_names() {
    let dir = TempDir::new("overrides-mtls");
    dir.limits(LIMITS);
    let ca = tollgate_testkit::pki::TestCa::new(dir.path(), "ops");
    let server_cert = ca.issue("server", &["localhost"]);
    let client = ca.issue("client", &["ops.example"]);
    let mut command = tollgate(&["serve", "--config"]);
    command
        .arg(dir.path().join("limits.yaml"))
        .args([
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "0.0.0.0:0",
            "--http-tls",
        ])
        .arg("--tls-cert")
        .arg(&server_cert.cert)
        .arg("--tls-key")
        .arg(&server_cert.key)
        .arg("--tls-client-ca")
        .arg(ca.ca())
        .args([
            "--tls-client-san",
            "ops.example",
            "--store",
            "memory",
            "--log-level",
            "info",
        ]);
    let mut server = LoggedChild::spawn(command, dir.path().join("serve.log"), false);
    let http = SocketAddr::from(([127, 0, 0, 1], server.listener("http").port()));
    let (status, body) = mutual_tls_call(
        http,
        ca.ca(),
        &client,
        ("PUT", "/v1/overrides/api", ACME_TEN),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = mutual_tls_call(
        http,
        ca.ca(),
        &client,
        ("GET", "/v1/usage/api?tenant=acme", ""),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"limit\": 10"), "{body}");
    let log = std::fs::read_to_string(dir.path().join("serve.log")).expect("a log");
    assert!(
        log.contains("who=\"client-certificate:ops.example@127.0.0.1:"),
        "the change names the certificate: {log}"
    );

    // The command line reaches the same listener over https with the
    // operator's certificate, and is refused without one.
    let url = format!("https://127.0.0.1:{}", http.port());
    let trust: Vec<OsString> = vec![
        "--tls-ca".into(),
        ca.ca().into(),
        "--tls-server-name".into(),
        "localhost".into(),
    ];
    let mut operator = trust.clone();
    operator.extend([
        "--tls-cert".into(),
        client.cert.clone().into(),
        "--tls-key".into(),
        client.key.clone().into(),
    ]);
    let (code, out, err) = limits_at(&url, &operator, &["usage", "api", "tenant=acme"]);
    assert_eq!(code, 0, "stdout: {out} stderr: {err}");
    assert!(out.contains("\"limit\": 10"), "{out}");
    let (code, out, err) = limits_at(&url, &trust, &["list"]);
    assert_eq!(code, 1, "no client certificate, no answer: {out} {err}");
    assert!(!out.contains("acme"), "{out}");
    // TLS flags with a plain URL are a usage error, not silently ignored.
    let (code, _, err) = limits_at(&format!("http://{http}"), &operator, &["list"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("https://"), "{err}");
}
