//! Real `redis-server` processes for tests: one node on a free loopback port, killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::budget::poll_until;
use crate::ports::free_port;

/// How long a started node may take to answer PING.
const START_BUDGET: Duration = Duration::from_secs(10);

/// The `redis-server` binary: `$TOLLGATE_REDIS_SERVER`, else `redis-server` on PATH.
#[must_use]
pub fn redis_server_bin() -> PathBuf {
    std::env::var_os("TOLLGATE_REDIS_SERVER").map_or_else(|| "redis-server".into(), PathBuf::from)
}

/// The `redis-cli` binary: `$TOLLGATE_REDIS_CLI`, else `redis-cli` on PATH.
#[must_use]
pub fn redis_cli_bin() -> PathBuf {
    std::env::var_os("TOLLGATE_REDIS_CLI").map_or_else(|| "redis-cli".into(), PathBuf::from)
}

/// One `redis-server` on 127.0.0.1, without persistence, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    /// Its port.
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a node and waits (bounded) until it answers PING.
    #[must_use]
    pub fn start() -> Self {
        Self::start_on(free_port, &[])
    }

    /// Starts a node on a port from `pick` with extra arguments (e.g.
    /// cluster mode); a port another process took in the meantime is
    /// replaced by a new one, at most 5 times.
    #[must_use]
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
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id, while it runs.
    #[must_use]
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
            "redis-server on port {} did not answer PING within {START_BUDGET:?}",
            self.port
        );
    }

    /// Starts the process on its port; false when it exits at once (port
    /// taken) or does not answer PING within [`START_BUDGET`].
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
        let answered = poll_until(START_BUDGET, || {
            if self.cli(&["PING"]).trim() == "PONG" {
                return Some(true);
            }
            let exited = self
                .child
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some());
            exited.then_some(false)
        });
        match answered {
            Some(true) => true,
            Some(false) => {
                self.child = None;
                false
            }
            None => {
                self.kill();
                false
            }
        }
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

    /// Script and function calls (EVAL, EVALSHA, FCALL) the server has run so far, from `INFO commandstats`.
    #[must_use]
    pub fn script_calls(&self) -> u64 {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter(|line| line.starts_with("cmdstat_eval") || line.starts_with("cmdstat_fcall"))
            .filter_map(|line| {
                line.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// How long to wait until Redis's clock (`TIME`) is more than `margin`
    /// before the end of its epoch-aligned `window` (see
    /// [`crate::window::wait_before_window_end`]). A test on Redis's own
    /// clock waits this out so that it sees one window.
    #[must_use]
    pub fn wait_clear_of_window_end(&self, window: Duration, margin: Duration) -> Duration {
        let out = self.cli(&["TIME"]);
        let mut fields = out.lines().map(|l| l.trim().parse::<u64>());
        let (Some(Ok(secs)), Some(Ok(micros))) = (fields.next(), fields.next()) else {
            panic!("TIME answered {out:?}");
        };
        let now = Duration::from_secs(secs) + Duration::from_micros(micros);
        crate::window::wait_before_window_end(now, window, margin)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
