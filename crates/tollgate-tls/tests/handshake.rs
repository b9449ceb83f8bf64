//! Handshakes between a [`TlsAcceptor`] and a [`TlsConnector`] built from test-CA files: TLS, mutual TLS, the SAN allow-list and reload.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_testkit::pki::{Issued, TestCa};
use tollgate_testkit::scratch::TempDir;
use tollgate_tls::{ALPN_H2, ClientTlsFiles, ServerTlsFiles, TlsAcceptor};

/// A loopback echo server (one line per connection) behind `acceptor`; its port.
async fn echo_server(acceptor: TlsAcceptor) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let mut stream = acceptor.stream(tcp);
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                if let Ok(n) = stream.read(&mut buf).await {
                    let _ = stream.write_all(&buf[..n]).await;
                    let _ = stream.shutdown().await;
                }
            });
        }
    });
    port
}

/// Connects with `client`, sends a line and returns what came back (an error when the handshake or the exchange fails).
async fn echo(port: u16, client: &ClientTlsFiles) -> std::io::Result<String> {
    let connector = client.connector(&[ALPN_H2]).expect("client config");
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let mut tls = connector.connect("localhost", tcp).await?;
    tls.write_all(b"ping").await?;
    tls.flush().await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut buf))
        .await
        .map_err(|_| std::io::Error::other("no answer within 10s"))??;
    if buf.is_empty() {
        return Err(std::io::Error::other("closed without an answer"));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Server files for `server`, with mutual TLS against `client_ca` when given.
fn server_files(server: &Issued, client_ca: Option<&TestCa>, sans: &[&str]) -> ServerTlsFiles {
    ServerTlsFiles {
        cert: server.cert.clone(),
        key: server.key.clone(),
        client_ca: client_ca.map(|ca| ca.ca().to_path_buf()),
        client_sans: sans.iter().map(|san| (*san).to_owned()).collect(),
    }
}

/// Client files trusting `ca`, presenting `cert` when given.
fn client_files(ca: &TestCa, cert: Option<&Issued>) -> ClientTlsFiles {
    ClientTlsFiles {
        ca: Some(ca.ca().to_path_buf()),
        cert: cert.map(|issued| issued.cert.clone()),
        key: cert.map(|issued| issued.key.clone()),
        server_name: None,
    }
}

fn acceptor(files: ServerTlsFiles) -> TlsAcceptor {
    TlsAcceptor::new(files, &[ALPN_H2], Duration::from_secs(10)).expect("server config")
}

#[tokio::test]
async fn tls_without_client_certificates_serves_a_client_trusting_the_ca() {
    let dir = TempDir::new("tls-plain-handshake");
    let ca = TestCa::new(dir.path(), "main");
    let server = ca.issue("server", &["localhost"]);
    let port = echo_server(acceptor(server_files(&server, None, &[]))).await;
    assert_eq!(
        echo(port, &client_files(&ca, None)).await.expect("echo"),
        "ping"
    );
    // A client trusting another CA refuses the server.
    let other = TestCa::new(dir.path(), "other");
    assert!(echo(port, &client_files(&other, None)).await.is_err());
}

#[tokio::test]
async fn mutual_tls_refuses_no_certificate_and_a_certificate_of_another_ca() {
    let dir = TempDir::new("tls-mutual-handshake");
    let ca = TestCa::new(dir.path(), "main");
    let server = ca.issue("server", &["localhost"]);
    let client = ca.issue("client", &["client.example"]);
    let port = echo_server(acceptor(server_files(&server, Some(&ca), &[]))).await;

    assert_eq!(
        echo(port, &client_files(&ca, Some(&client)))
            .await
            .expect("a client certificate of the CA is served"),
        "ping"
    );
    assert!(
        echo(port, &client_files(&ca, None)).await.is_err(),
        "a client without a certificate is refused"
    );
    let other = TestCa::new(dir.path(), "other");
    let stranger = other.issue("client", &["client.example"]);
    assert!(
        echo(port, &client_files(&ca, Some(&stranger)))
            .await
            .is_err(),
        "a client certificate of another CA is refused"
    );
}

#[tokio::test]
async fn the_san_allow_list_refuses_a_certificate_naming_no_allowed_name() {
    let dir = TempDir::new("tls-san-handshake");
    let ca = TestCa::new(dir.path(), "main");
    let server = ca.issue("server", &["localhost"]);
    let allowed = ca.issue("envoy", &["envoy.mesh.local"]);
    let by_ip = ca.issue("by-ip", &["10.0.0.7"]);
    let other = ca.issue("other", &["other.mesh.local"]);
    let files = server_files(&server, Some(&ca), &["envoy.mesh.local", "10.0.0.7"]);
    let port = echo_server(acceptor(files)).await;

    assert!(echo(port, &client_files(&ca, Some(&allowed))).await.is_ok());
    assert!(echo(port, &client_files(&ca, Some(&by_ip))).await.is_ok());
    assert!(
        echo(port, &client_files(&ca, Some(&other))).await.is_err(),
        "a SAN not on the allow-list is refused"
    );
}

#[tokio::test]
async fn a_reload_serves_the_rotated_certificate_and_a_bad_one_keeps_the_running_one() {
    let dir = TempDir::new("tls-reload-handshake");
    let old_ca = TestCa::new(dir.path(), "old");
    let new_ca = TestCa::new(dir.path(), "new");
    let served = dir.path().join("tls.pem");
    let served_key = dir.path().join("tls-key.pem");
    let install = |issued: &Issued| {
        std::fs::copy(&issued.cert, &served).expect("copy the certificate");
        std::fs::copy(&issued.key, &served_key).expect("copy the key");
    };
    install(&old_ca.issue("server", &["localhost"]));
    let files = ServerTlsFiles {
        cert: served.clone(),
        key: served_key.clone(),
        ..ServerTlsFiles::default()
    };
    let acceptor = acceptor(files);
    let port = echo_server(acceptor.clone()).await;
    assert!(echo(port, &client_files(&old_ca, None)).await.is_ok());
    assert!(echo(port, &client_files(&new_ca, None)).await.is_err());

    install(&new_ca.issue("server", &["localhost"]));
    acceptor.reload().expect("the rotated certificate loads");
    assert!(echo(port, &client_files(&new_ca, None)).await.is_ok());
    assert!(echo(port, &client_files(&old_ca, None)).await.is_err());

    // A key that does not match the certificate is refused, and the running certificate stays.
    std::fs::copy(old_ca.issue("stray", &["localhost"]).key, &served_key).expect("copy");
    let error = acceptor.reload().expect_err("a mismatched key is refused");
    assert!(error.to_string().contains("refused"), "{error}");
    std::fs::write(&served, "not a certificate").expect("write");
    let error = acceptor
        .reload()
        .expect_err("a file without a certificate is refused");
    assert!(error.to_string().contains("tls.pem"), "{error}");
    assert!(echo(port, &client_files(&new_ca, None)).await.is_ok());
}

#[test]
fn an_allow_list_without_a_client_ca_is_an_error() {
    let dir = TempDir::new("tls-incomplete");
    let ca = TestCa::new(dir.path(), "main");
    let server = ca.issue("server", &["localhost"]);
    let files = server_files(&server, None, &["envoy.mesh.local"]);
    let error =
        TlsAcceptor::new(files, &[ALPN_H2], Duration::from_secs(1)).expect_err("incomplete");
    assert!(error.to_string().contains("client CA"), "{error}");
}
