//! `rediss://`: counters in a Redis that only speaks TLS, trusted through `SSL_CERT_FILE`,
//! and upstream's `REDIS_TLS` with client certificates (`REDIS_TLS_CLIENT_CERT/_KEY/_CACERT`).

mod rls_client;
mod rls_load;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rls_client::{channel, request};
use rls_load::admitted;
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis::{redis_cli_bin, redis_server_bin};
use tollgate_testkit::scratch::TempDir;
use tollgate_testkit::tollgate::Server;
use tollgate_testkit::window::{self, DAY, DAY_MARGIN};

/// Runs `openssl ARGS…` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl runs (install the openssl package)");
    assert!(status.success(), "openssl {args:?}");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it, in `dir`.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=tollgate test CA",
        ],
    );
    signed(
        dir,
        "server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1",
    );
    // An extension also makes it a version 3 certificate, which rustls requires.
    signed(dir, "client", "/CN=tollgate", "extendedKeyUsage=clientAuth");
}

/// `NAME.key` and `NAME.crt` for `subject` with `extension`, signed by the CA in `dir`.
fn signed(dir: &Path, name: &str, subject: &str, extension: &str) {
    let (key, csr, crt, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    std::fs::write(dir.join(&ext), format!("{extension}\n")).unwrap();
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "1",
            "-extfile",
            &ext,
        ],
    );
}

/// A TLS-only redis-server, killed on drop.
struct TlsRedis {
    port: u16,
    child: Child,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TLS-only redis-server in `dir`; with `client_certificates`, it refuses clients without one.
fn start_tls_redis(dir: &Path, client_certificates: bool) -> TlsRedis {
    let port = free_port();
    let child = Command::new(redis_server_bin())
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
        ])
        .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients"])
        .arg(if client_certificates { "yes" } else { "no" })
        .args(["--save", "", "--appendonly", "no"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server runs");
    let redis = TlsRedis { port, child };
    // At most 250 polls 20 ms apart.
    for _ in 0..250 {
        let out = Command::new(redis_cli_bin())
            .args([
                "--tls",
                "--cacert",
                "ca.crt",
                "--cert",
                "client.crt",
                "--key",
                "client.key",
                "-p",
                &port.to_string(),
                "PING",
            ])
            .current_dir(dir)
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if out.trim() == "PONG" {
            return redis;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the TLS redis-server did not answer within 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_live_in_a_tls_only_redis() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new("tls");
    certificates(&scratch.0);
    let redis = start_tls_redis(&scratch.0, false);
    let config = scratch.limits(
        "domain: t\ndescriptors:\n  - key: k\n    on_store_error: allow\n    rate_limit:\n      unit: day\n      requests_per_unit: 2\n",
    );
    let ca = scratch.0.join("ca.crt");
    let store = format!("rediss://127.0.0.1:{}", redis.port);
    let server = Server::spawn_with_env(
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--store",
            &store,
            "--store-timeout",
            "2s",
        ],
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    let channel = channel(&server.address()).await;
    // 2 per hour in Redis; a store error would allow all 5 (on_store_error: allow).
    assert_eq!(admitted(&[channel], &request("t", "k", "v"), 5).await, 2);
}

/// Upstream's variables for a TLS Redis that requires client certificates:
/// with REDIS_TLS_CLIENT_CERT/_KEY the counters live there; without them
/// the server refuses the handshake and `serve` does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_redis_tls_variables_present_the_client_certificate() {
    window::wait_clear_of_window_end(DAY, DAY_MARGIN);
    let scratch = TempDir::new("mtls");
    certificates(&scratch.0);
    let redis = start_tls_redis(&scratch.0, true);
    let config = scratch.limits(
        "domain: t\ndescriptors:\n  - key: k\n    on_store_error: allow\n    rate_limit:\n      unit: day\n      requests_per_unit: 2\n",
    );
    let file = |name: &str| scratch.0.join(name).to_str().unwrap().to_owned();
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
    let url = format!("127.0.0.1:{}", redis.port);
    let args = [
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--store-timeout",
        "2s",
    ];
    let mut env = vec![
        ("REDIS_URL", url.as_str()),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", ca.as_str()),
    ];
    let mut refused = Server::spawn_with_env(&args, &env);
    let (code, _, stderr) = refused.finish();
    assert_eq!(code, Some(1), "without a client certificate: {stderr}");
    assert!(stderr.contains("cannot connect to Redis"), "{stderr}");

    env.extend([
        ("REDIS_TLS_CLIENT_CERT", cert.as_str()),
        ("REDIS_TLS_CLIENT_KEY", key.as_str()),
    ]);
    let server = Server::spawn_with_env(&args, &env);
    let channel = channel(&server.address()).await;
    // 2 per day in Redis; a store error would allow all 5 (on_store_error: allow).
    assert_eq!(admitted(&[channel], &request("t", "k", "v"), 5).await, 2);
}
