//! A master found through Sentinel: `redis-sentinel://master@host:port` counts in that master.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tollgate_core::{AnyAlgorithm, Timestamp, TokenBucket};
use tollgate_redis::RedisStore;
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::ports::free_port;
use tollgate_testkit::redis::{RedisServer, redis_cli_bin, redis_server_bin};

/// A `redis-server --sentinel` watching `master` as `mymaster`, killed on drop.
struct Sentinel {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Sentinel {
    fn start(master: &RedisServer) -> Self {
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

#[tokio::test]
async fn the_master_named_by_sentinel_keeps_the_counters() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start(&master);
    let url = format!("redis-sentinel://mymaster@127.0.0.1:{}", sentinel.port);
    let store = RedisStore::connect(&url, Duration::from_secs(2))
        .await
        .expect("connects through the sentinel");
    let tb: AnyAlgorithm = TokenBucket::new(2, 2, Duration::from_secs(3600))
        .unwrap()
        .into();
    let counter = Counter {
        group: 0,
        key: b"via-sentinel",
        tag: 1,
        algorithm: tb,
        hits: 1,
        give_back: false,
    };
    let mut out = Vec::new();
    let now = Timestamp::from_secs(1);
    let mut allowed = 0;
    for _ in 0..3 {
        store.check_batch(&[counter], now, &mut out).await.unwrap();
        allowed += usize::from(out[0].is_allowed());
    }
    assert_eq!(allowed, 2);
    assert_eq!(
        master.cli(&["DBSIZE"]).trim(),
        "1",
        "the counter is in the master"
    );
}
