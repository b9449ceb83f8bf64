//! A `redis-server --sentinel` for tests, watching one master as `mymaster`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ports::free_port;
use crate::redis::{RedisServer, redis_cli_bin, redis_server_bin};

/// A `redis-server --sentinel` watching `master` as `mymaster`, killed on drop.
#[derive(Debug)]
pub struct Sentinel {
    /// Its port.
    pub port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Sentinel {
    /// Starts it and waits (at most 5 s) until it names `master`.
    #[must_use]
    pub fn start(master: &RedisServer) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("tollgate-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor mymaster 127.0.0.1 {} 1\n",
                dir.display(),
                master.port
            ),
        )
        .unwrap();
        let child = Command::new(redis_server_bin())
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel runs");
        let sentinel = Sentinel { port, child, dir };
        // At most 250 polls 20 ms apart: until the sentinel names the master.
        for _ in 0..250 {
            let out = Command::new(redis_cli_bin())
                .args(["-p", &port.to_string()])
                .args(["SENTINEL", "get-master-addr-by-name", "mymaster"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            if out.contains(&master.port.to_string()) {
                return sentinel;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the sentinel did not name the master within 5 s");
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
