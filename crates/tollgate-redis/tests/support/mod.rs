//! Real `redis-server` processes for tests: one node or a 3-master cluster on free loopback ports.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `redis-server` binary: `$TOLLGATE_REDIS_SERVER`, else `redis-server` on PATH.
pub fn redis_server_bin() -> PathBuf {
    std::env::var_os("TOLLGATE_REDIS_SERVER").map_or_else(|| "redis-server".into(), PathBuf::from)
}

/// The `redis-cli` binary: `$TOLLGATE_REDIS_CLI`, else `redis-cli` on PATH.
pub fn redis_cli_bin() -> PathBuf {
    std::env::var_os("TOLLGATE_REDIS_CLI").map_or_else(|| "redis-cli".into(), PathBuf::from)
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A free port whose cluster bus port (port + 10000) is free and valid too.
pub fn free_cluster_port() -> u16 {
    // At most 100 tries; the ephemeral range leaves most ports usable.
    for _ in 0..100 {
        let port = free_port();
        if let Some(bus) = port.checked_add(10_000)
            && TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port with a free cluster bus port in 100 tries");
}

/// One `redis-server` on 127.0.0.1, without persistence, killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a node and waits (bounded) until it answers PING.
    pub fn start() -> Self {
        Self::start_on(free_port, &[])
    }

    /// Starts a node on a port from `pick` with extra arguments (e.g.
    /// cluster mode); a port another process took in the meantime is
    /// replaced by a new one, at most 5 times.
    pub fn start_on(pick: fn() -> u16, extra: &[&str]) -> Self {
        for _ in 0..5 {
            let port = pick();
            let dir =
                std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("a scratch directory");
            let mut server = RedisServer {
                port,
                child: None,
                dir,
                extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            };
            if server.try_restart() {
                return server;
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to the process with `kill`.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("the server runs");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again on the same port (after [`kill`](Self::kill)).
    pub fn restart(&mut self) {
        assert!(
            self.try_restart(),
            "redis-server on port {} did not answer PING within 10 s",
            self.port
        );
    }

    /// Starts the process on its port; false when it exits at once (port
    /// taken) or does not answer PING within 10 s.
    fn try_restart(&mut self) -> bool {
        self.kill();
        let child = Command::new(redis_server_bin())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server runs (install the redis-server package or set TOLLGATE_REDIS_SERVER)",
            );
        self.child = Some(child);
        // At most 500 polls 20 ms apart: 10 s.
        for _ in 0..500 {
            if self.cli(&["PING"]).trim() == "PONG" {
                return true;
            }
            let exited = self
                .child
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some());
            if exited {
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Runs `redis-cli -p port ARGS…` and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(redis_cli_bin())
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three masters in cluster mode, all 16384 slots assigned, killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes and joins them with `redis-cli --cluster create`.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_on(
                    free_cluster_port,
                    &["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new(redis_cli_bin())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes };
        // At most 300 polls 50 ms apart: 15 s.
        for _ in 0..300 {
            if cluster
                .nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
            {
                return cluster;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not reach cluster_state:ok within 15 s");
    }

    /// `redis-cluster://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }
}
