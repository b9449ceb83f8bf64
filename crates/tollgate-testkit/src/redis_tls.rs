//! TLS-only Redis for tests: a three-master cluster and a master watched by a Sentinel, all speaking TLS only and requiring client certificates.
//!
//! [`RedisTls`] makes a CA ([`crate::pki`]) and one certificate for
//! 127.0.0.1 that every server presents and every client (`redis-cli` here,
//! Tollgate in the tests) may present; the servers trust only that CA and
//! refuse a client without a certificate (`tls-auth-clients yes`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::budget::poll_until;
use crate::pki::{Issued, TestCa};
use crate::ports::{free_cluster_port, free_port};
use crate::redis::{redis_cli_bin, redis_server_bin};
use crate::redis_cluster::join;

/// How long a server may take to answer, and a cluster or Sentinel to settle.
const START_BUDGET: Duration = Duration::from_secs(15);

/// The CA and the certificate the TLS servers and their clients use, in `dir`.
pub struct RedisTls {
    /// The CA's certificate (PEM), the only one the servers trust.
    pub ca: PathBuf,
    /// The certificate (for 127.0.0.1) and key every server and client presents.
    pub leaf: Issued,
    dir: PathBuf,
}

impl RedisTls {
    /// A new CA and certificate written into `dir`.
    #[must_use]
    pub fn new(dir: &Path) -> RedisTls {
        let ca = TestCa::new(dir, "redis");
        let leaf = ca.issue("node", &["127.0.0.1"]);
        RedisTls {
            ca: ca.ca().to_path_buf(),
            leaf,
            dir: dir.to_path_buf(),
        }
    }

    /// The server flags: present the certificate, trust the CA, require client certificates.
    fn server_flags(&self) -> Vec<String> {
        let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_owned();
        vec![
            "tls-cert-file".into(),
            path(&self.leaf.cert),
            "tls-key-file".into(),
            path(&self.leaf.key),
            "tls-ca-cert-file".into(),
            path(&self.ca),
            "tls-auth-clients".into(),
            "yes".into(),
        ]
    }

    /// `redis-cli --tls`, trusting the CA and presenting the client certificate.
    fn cli_command(&self) -> Command {
        let mut command = Command::new(redis_cli_bin());
        command
            .arg("--tls")
            .arg("--cacert")
            .arg(&self.ca)
            .arg("--cert")
            .arg(&self.leaf.cert)
            .arg("--key")
            .arg(&self.leaf.key);
        command
    }

    /// `redis-cli --tls … -p port ARGS…`, with the client certificate; its output.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = self
            .cli_command()
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A `redis-server` listening with TLS only on `port`, configured by `lines` too.
    fn spawn(&self, port: u16, lines: &[String], sentinel: bool) -> TlsProcess {
        let dir = self.dir.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let mut conf = format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\ndir {}\n",
            dir.display()
        );
        for pair in self.server_flags().chunks(2) {
            conf.push_str(&format!("{} {}\n", pair[0], pair[1]));
        }
        for line in lines {
            conf.push_str(line);
            conf.push('\n');
        }
        let file = dir.join("redis.conf");
        std::fs::write(&file, conf).expect("write redis.conf");
        let mut command = Command::new(redis_server_bin());
        command.arg(&file);
        if sentinel {
            command.arg("--sentinel");
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs");
        TlsProcess { port, child }
    }

    /// A TLS-only node, once it answers `PING` over TLS.
    #[must_use]
    pub fn node(&self, port: u16, lines: &[String]) -> TlsProcess {
        let node = self.spawn(port, lines, false);
        let answered = poll_until(START_BUDGET, || {
            (self.cli(port, &["PING"]).trim() == "PONG").then_some(())
        });
        assert!(
            answered.is_some(),
            "the TLS redis-server on {port} did not answer PING"
        );
        node
    }

    /// Three TLS-only masters joined as a cluster (`tls-cluster yes`), all slots assigned.
    #[must_use]
    pub fn cluster(&self) -> Vec<TlsProcess> {
        let lines = [
            "cluster-enabled yes".to_owned(),
            "cluster-node-timeout 2000".to_owned(),
            "tls-cluster yes".to_owned(),
            "save \"\"".to_owned(),
            "appendonly no".to_owned(),
        ];
        let nodes: Vec<TlsProcess> = (0..3)
            .map(|_| self.node(free_cluster_port(), &lines))
            .collect();
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        join(self.cli_command(), &ports, |i| {
            self.cli(ports[i], &["CLUSTER", "INFO"])
        });
        nodes
    }

    /// A TLS-only master and a TLS-only Sentinel watching it as `mymaster`
    /// over TLS (`tls-replication yes`), once the Sentinel names it.
    #[must_use]
    pub fn sentinel(&self) -> (TlsProcess, TlsProcess) {
        let master = self.node(
            free_port(),
            &["save \"\"".to_owned(), "appendonly no".to_owned()],
        );
        let port = free_port();
        let sentinel = self.spawn(
            port,
            &[
                "tls-replication yes".to_owned(),
                format!("sentinel monitor mymaster 127.0.0.1 {} 1", master.port),
            ],
            true,
        );
        let named = poll_until(START_BUDGET, || {
            self.cli(port, &["SENTINEL", "get-master-addr-by-name", "mymaster"])
                .contains(&master.port.to_string())
                .then_some(())
        });
        assert!(named.is_some(), "the TLS sentinel did not name the master");
        (master, sentinel)
    }
}

/// A TLS-only `redis-server` (node or Sentinel), killed on drop.
#[derive(Debug)]
pub struct TlsProcess {
    /// Its TLS port.
    pub port: u16,
    child: Child,
}

impl Drop for TlsProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
