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
