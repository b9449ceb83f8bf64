//! `tollgate serve` with TLS and mutual TLS, asked by `tollgate check` over `https://`, and a certificate rotated on disk served without a restart.
//!
//! That a bad new certificate keeps the running one is tollgate-tls's `handshake` test.

use std::path::Path;
use std::time::Duration;

use tollgate_testkit::budget::eventually;
use tollgate_testkit::pki::{Issued, TestCa};
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::{Server, tollgate};

/// How long a rotated certificate may take to be served (the watcher waits 100 ms of quiet).
const ROTATION_BUDGET: Duration = Duration::from_secs(20);

/// `tollgate check` over TLS against `addr`, trusting `ca` and presenting `client` when given; its exit code and output.
fn check(addr: &str, ca: &Path, client: Option<&Issued>) -> (Option<i32>, String) {
    let ca = ca.to_str().expect("UTF-8");
    let url = format!("https://{addr}");
    let mut args = vec![
        "check",
        "--addr",
        &url,
        "--tls-ca",
        ca,
        "--timeout",
        "5s",
        "--domain",
        "edge",
    ];
    let (cert, key);
    if let Some(client) = client {
        cert = client.cert.to_str().expect("UTF-8").to_owned();
        key = client.key.to_str().expect("UTF-8").to_owned();
        args.extend(["--tls-cert", &cert, "--tls-key", &key]);
    }
    args.push("path=/tls-test");
    let output = tollgate(&args).output().expect("tollgate check runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

/// Copies `issued` over the served certificate and key, each by a rename (as a Secret update or cert-manager does).
fn install(issued: &Issued, dir: &Path) {
    for (from, name) in [(&issued.cert, "tls.crt"), (&issued.key, "tls.key")] {
        let staged = dir.join(format!(".{name}.new"));
        std::fs::copy(from, &staged).expect("stage");
        std::fs::rename(&staged, dir.join(name)).expect("rename into place");
    }
}

/// `tollgate serve` on the example limits with TLS from `DIR/tls.crt` and `DIR/tls.key`, plus `extra` flags and `env`.
fn serve_tls(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    let mut args = vec![
        "--tls-cert",
        cert.to_str().expect("UTF-8"),
        "--tls-key",
        key.to_str().expect("UTF-8"),
    ];
    args.extend_from_slice(extra);
    Server::example_limits(&args, env)
}

#[test]
fn mutual_tls_serves_a_client_certificate_of_the_ca_and_refuses_others() {
    let dir = TempDir::new("serve-mtls");
    let ca = TestCa::new(dir.path(), "mesh");
    install(&ca.issue("server", &["127.0.0.1", "localhost"]), dir.path());
    let allowed = ca.issue("envoy", &["envoy.mesh.local"]);
    let unlisted = ca.issue("other", &["other.mesh.local"]);
    let stranger = TestCa::new(dir.path(), "stranger").issue("envoy", &["envoy.mesh.local"]);
    let server = serve_tls(
        dir.path(),
        &["--tls-client-ca", ca.ca().to_str().expect("UTF-8")],
        &[(
            "TOLLGATE_TLS_CLIENT_SAN",
            "envoy.mesh.local,spiffe-less.mesh.local",
        )],
    );
    let addr = server.address();

    let (code, text) = check(&addr, ca.ca(), Some(&allowed));
    assert_eq!(code, Some(0), "a check over mutual TLS is answered: {text}");
    assert!(text.starts_with("OK"), "{text}");
    for (what, client) in [
        ("no client certificate", None),
        ("a client certificate of another CA", Some(&stranger)),
        ("a SAN not on the allow-list", Some(&unlisted)),
    ] {
        let (code, text) = check(&addr, ca.ca(), client);
        assert_eq!(code, Some(1), "{what} is refused: {text}");
    }
    // Plain text to a TLS port is no answer either.
    let plain = tollgate(&[
        "check",
        "--addr",
        &format!("http://{addr}"),
        "--timeout",
        "2s",
        "--domain",
        "edge",
        "path=/x",
    ])
    .output()
    .expect("tollgate check runs");
    assert_eq!(plain.status.code(), Some(1));
}

#[test]
fn a_rotated_certificate_is_served_without_a_restart() {
    let dir = TempDir::new("serve-tls-rotation");
    let old_ca = TestCa::new(dir.path(), "old");
    let new_ca = TestCa::new(dir.path(), "new");
    install(&old_ca.issue("server", &["127.0.0.1"]), dir.path());
    let server = serve_tls(dir.path(), &[], &[]);
    let addr = server.address();
    assert_eq!(check(&addr, old_ca.ca(), None).0, Some(0));

    install(&new_ca.issue("server", &["127.0.0.1"]), dir.path());
    eventually("the rotated certificate is served", ROTATION_BUDGET, || {
        check(&addr, new_ca.ca(), None).0 == Some(0)
    });
    assert_eq!(
        check(&addr, old_ca.ca(), None).0,
        Some(1),
        "the old certificate is gone"
    );
}

/// A proxy config whose global limit asks `rls` over TLS with `tls` (a YAML flow mapping), `failure_mode_deny: true`.
fn proxy_over_tls(upstream: std::net::SocketAddr, rls: &str, tls: &str) -> String {
    format!(
        "listeners: [{{address: 127.0.0.1:0}}]\nglobal_ratelimit:\n  domain: edge\n  rate_limit_service: {{address: \"{rls}\", tls: {tls}}}\n  timeout: 2s\n  failure_mode_deny: true\n  status_on_error: {{code: 503}}\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{upstream}\"}}]\nroutes:\n  - name: api\n    cluster: backend\n    rate_limits:\n      - actions:\n          - request_headers: {{header_name: x-key, descriptor_key: api_key}}\n"
    )
}

#[test]
fn the_proxy_asks_the_service_over_mutual_tls_and_refuses_a_server_of_another_ca() {
    let dir = TempDir::new("proxy-rls-tls");
    let ca = TestCa::new(dir.path(), "mesh");
    install(&ca.issue("server", &["127.0.0.1", "localhost"]), dir.path());
    let client = ca.issue("proxy", &["proxy.mesh.local"]);
    let stranger = TestCa::new(dir.path(), "stranger");
    let server = serve_tls(
        dir.path(),
        &["--tls-client-ca", ca.ca().to_str().expect("UTF-8")],
        &[],
    );
    let rls = server.address();
    let upstream = tollgate_testkit::upstream::Upstream::spawn();
    let path = |p: &Path| p.to_str().expect("UTF-8").to_owned();
    let start = |name: &str, tls: String| {
        let file = dir.0.join(format!("{name}.yaml"));
        std::fs::write(&file, proxy_over_tls(upstream.addr, &rls, &tls)).expect("written");
        tollgate_testkit::tollgate::LoggedChild::proxy(
            &[
                "--config",
                file.to_str().expect("UTF-8"),
                "--log-level",
                "warn",
            ],
            dir.0.join(format!("{name}.log")),
            false,
        )
    };

    // Mutual TLS: the service's answers hold (api_key: a token bucket of 10
    // a second with bursts of 20): 25 quick requests admit 20 plus what
    // refilled meanwhile.
    let trusted = start(
        "trusted",
        format!(
            "{{ca: \"{}\", cert: \"{}\", key: \"{}\"}}",
            path(ca.ca()),
            path(&client.cert),
            path(&client.key)
        ),
    );
    let clock = tollgate_testkit::budget::Stopwatch::start();
    let admitted = (0..25)
        .filter(|_| {
            tollgate_testkit::http::get(trusted.addr, "/", &[("x-key", "k1")]).status == 200
        })
        .count();
    let refilled = (clock.elapsed().as_secs_f64() * 10.0).ceil() as usize;
    assert!(
        (20..=20 + refilled).contains(&admitted),
        "{admitted} of 25 admitted in {:?}; log:\n{}",
        clock.elapsed(),
        tollgate_testkit::process::log_tail(&trusted.log)
    );

    // A service certificate of another CA: no answer, so failure_mode_deny's 503.
    let wary = start("wary", format!("{{ca: \"{}\"}}", path(stranger.ca())));
    let refused = tollgate_testkit::http::get(wary.addr, "/", &[("x-key", "k2")]);
    assert_eq!(refused.status, 503, "{refused:#?}");
    // No client certificate: the service refuses the handshake, the same 503.
    let anonymous = start("anonymous", format!("{{ca: \"{}\"}}", path(ca.ca())));
    assert_eq!(
        tollgate_testkit::http::get(anonymous.addr, "/", &[("x-key", "k2")]).status,
        503
    );

    // A key without its certificate is a config error naming the field.
    let file = dir.0.join("broken.yaml");
    std::fs::write(
        &file,
        proxy_over_tls(
            upstream.addr,
            &rls,
            &format!("{{key: \"{}\"}}", path(&client.key)),
        ),
    )
    .expect("written");
    let output = tollgate(&["proxy", "--config", file.to_str().expect("UTF-8")])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rate_limit_service.tls: missing the client certificate"),
        "{stderr}"
    );
}

/// One GET of `/` over TLS to `addr` with `files` offering `alpn`: the status, or why there is none.
fn https_get(
    addr: std::net::SocketAddr,
    files: &tollgate_tls::ClientTlsFiles,
    alpn: &'static [u8],
) -> Result<u16, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let connector = files.connector(&[alpn]).map_err(|e| e.to_string())?;
        let stream = connector
            .connect_to("127.0.0.1", addr.port())
            .await
            .map_err(|e| e.to_string())?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let request = http::Request::get("/")
            .header("host", "localhost")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("a request");
        let response = if alpn == tollgate_tls::ALPN_H2 {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            sender.send_request(request).await
        } else {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            sender.send_request(request).await
        };
        response
            .map(|r| r.status().as_u16())
            .map_err(|e| e.to_string())
    })
}

#[test]
fn the_proxy_serves_its_listener_over_mutual_tls_on_http1_and_h2() {
    let dir = TempDir::new("proxy-listener-tls");
    let ca = TestCa::new(dir.path(), "edge");
    let server = ca.issue("proxy", &["127.0.0.1", "localhost"]);
    let client = ca.issue("client", &["client.edge.local"]);
    let stranger = TestCa::new(dir.path(), "stranger").issue("client", &["client.edge.local"]);
    let upstream = tollgate_testkit::upstream::Upstream::spawn();
    let path = |p: &Path| p.to_str().expect("UTF-8").to_owned();
    let file = dir.0.join("proxy.yaml");
    std::fs::write(
        &file,
        format!(
            "listeners:\n  - address: 127.0.0.1:0\n    tls: {{cert: \"{}\", key: \"{}\", client_ca: \"{}\"}}\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{}\"}}]\nroutes:\n  - name: all\n    cluster: backend\n",
            path(&server.cert),
            path(&server.key),
            path(ca.ca()),
            upstream.addr
        ),
    )
    .expect("written");
    let proxy = tollgate_testkit::tollgate::LoggedChild::proxy(
        &[
            "--config",
            file.to_str().expect("UTF-8"),
            "--log-level",
            "warn",
        ],
        dir.0.join("proxy.log"),
        false,
    );
    let files = |client: Option<&Issued>| tollgate_tls::ClientTlsFiles {
        ca: Some(ca.ca().to_path_buf()),
        cert: client.map(|c| c.cert.clone()),
        key: client.map(|c| c.key.clone()),
        server_name: None,
    };
    for alpn in [tollgate_tls::ALPN_HTTP1, tollgate_tls::ALPN_H2] {
        assert_eq!(
            https_get(proxy.addr, &files(Some(&client)), alpn),
            Ok(200),
            "ALPN {alpn:?}"
        );
    }
    assert!(
        https_get(proxy.addr, &files(None), tollgate_tls::ALPN_HTTP1).is_err(),
        "no client certificate"
    );
    assert!(
        https_get(
            proxy.addr,
            &files(Some(&stranger)),
            tollgate_tls::ALPN_HTTP1
        )
        .is_err(),
        "another CA's client"
    );
    // Plain HTTP to a TLS listener gets no answer.
    assert!(tollgate_testkit::http::try_get(proxy.addr, "/", &[]).is_err());
}

#[test]
fn the_proxy_forwards_to_a_cluster_over_mutual_tls_and_refuses_an_endpoint_of_another_ca() {
    let dir = TempDir::new("proxy-cluster-tls");
    let ca = TestCa::new(dir.path(), "mesh");
    let server = ca.issue("inner", &["127.0.0.1", "inner.mesh.local"]);
    let client = ca.issue("outer", &["outer.mesh.local"]);
    let stranger = TestCa::new(dir.path(), "stranger");
    let upstream = tollgate_testkit::upstream::Upstream::spawn();
    let path = |p: &Path| p.to_str().expect("UTF-8").to_owned();
    let start = |name: &str, yaml: String| {
        let file = dir.0.join(format!("{name}.yaml"));
        std::fs::write(&file, yaml).expect("written");
        tollgate_testkit::tollgate::LoggedChild::proxy(
            &[
                "--config",
                file.to_str().expect("UTF-8"),
                "--log-level",
                "warn",
            ],
            dir.0.join(format!("{name}.log")),
            false,
        )
    };
    // The inner proxy: a mutual-TLS listener in front of the plain upstream.
    let inner = start(
        "inner",
        format!(
            "listeners:\n  - address: 127.0.0.1:0\n    tls: {{cert: \"{}\", key: \"{}\", client_ca: \"{}\"}}\nclusters:\n  - name: backend\n    endpoints: [{{address: \"{}\"}}]\nroutes:\n  - name: all\n    cluster: backend\n",
            path(&server.cert),
            path(&server.key),
            path(ca.ca()),
            upstream.addr
        ),
    );
    let outer_config = |tls: String| {
        format!(
            "listeners: [{{address: 127.0.0.1:0}}]\nclusters:\n  - name: inner\n    endpoints: [{{address: \"{}\"}}]\n    tls: {tls}\nroutes:\n  - name: all\n    cluster: inner\n",
            inner.addr
        )
    };
    // The outer proxy reaches it over TLS, presenting its client certificate;
    // the endpoint's name is checked as inner.mesh.local, HTTP/1.1 and h2 both.
    for http2 in [false, true] {
        let outer = start(
            &format!("outer-h2-{http2}"),
            outer_config(format!(
                "{{ca: \"{}\", cert: \"{}\", key: \"{}\", server_name: inner.mesh.local}}\n    http2: {http2}",
                path(ca.ca()),
                path(&client.cert),
                path(&client.key)
            )),
        );
        let response = tollgate_testkit::http::get(outer.addr, "/through", &[]);
        assert_eq!(
            response.status,
            200,
            "http2 {http2}: {response:#?}; log:\n{}",
            tollgate_testkit::process::log_tail(&outer.log)
        );
        assert_eq!(response.body, "upstream ok");
    }
    // An endpoint whose certificate is of another CA: no connection, 503.
    let wary = start(
        "wary",
        outer_config(format!("{{ca: \"{}\"}}", path(stranger.ca()))),
    );
    assert_eq!(tollgate_testkit::http::get(wary.addr, "/", &[]).status, 503);
    // Without a client certificate the inner listener refuses the handshake: 503 too.
    let anonymous = start(
        "anonymous",
        outer_config(format!("{{ca: \"{}\"}}", path(ca.ca()))),
    );
    assert_eq!(
        tollgate_testkit::http::get(anonymous.addr, "/", &[]).status,
        503
    );
}
