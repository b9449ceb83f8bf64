//! The `tollgate` binary as a child process: its command line, `serve`/`lab` children that
//! announce their addresses on stdout, and `proxy` children that log to a file.
//!
//! The binary is the one Cargo built for the running test (`CARGO_BIN_EXE_tollgate`,
//! which Cargo sets for the integration tests of the `tollgate` package).

use std::fs::File;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;

use crate::budget::BUDGET;
use crate::process::{ChildGuard, forward_lines, log_tail};

/// The only variables of the test's environment a `tollgate` child inherits.
///
/// `tollgate` reads every `TOLLGATE_*` variable and every one of
/// envoyproxy/ratelimit's (`HOST`, `PORT`, `REDIS_URL`, `RUNTIME_ROOT`, …,
/// dozens of them), so a child gets none of the test runner's environment
/// but what running a program needs; a test sets what it checks.
pub const INHERITED_VARS: [&str; 8] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "TZ",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "LLVM_PROFILE_FILE",
];

/// `serve`'s flags for ephemeral gRPC and HTTP ports on 127.0.0.1.
pub const EPHEMERAL_ADDRS: [&str; 4] = ["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"];

/// The path of the `tollgate` binary under test.
#[must_use]
pub fn tollgate_binary() -> PathBuf {
    std::env::var_os("CARGO_BIN_EXE_tollgate").map_or_else(
        || panic!("CARGO_BIN_EXE_tollgate is unset: run this test with cargo test -p tollgate"),
        PathBuf::from,
    )
}

/// The `tollgate` binary with `args`, run in the test's directory with only [`INHERITED_VARS`] of the test's environment.
#[must_use]
pub fn tollgate(args: &[&str]) -> Command {
    let mut command = Command::new(tollgate_binary());
    command.args(args).env_clear();
    for name in INHERITED_VARS {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

/// A `tollgate` child (`serve`, `lab`, …) that is killed and reaped when dropped, whatever happened.
#[derive(Debug)]
pub struct Server {
    /// The process.
    pub child: Child,
    /// Each stdout line as it is printed.
    pub stdout_lines: Receiver<String>,
    /// All of stderr, sent once the child closes it (when it exits).
    pub stderr: Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `tollgate ARGS` with stdout and stderr piped.
    #[must_use]
    pub fn spawn(args: &[&str]) -> Server {
        Server::spawn_with_env(args, &[])
    }

    /// Starts `tollgate ARGS` with the variables `env` set.
    #[must_use]
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = tollgate(args);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the tollgate binary starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let (line_tx, stdout_lines) = mpsc::channel();
        forward_lines(stdout, line_tx);
        let (err_tx, stderr_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            let _ = err_tx.send(text);
        });
        Server {
            child,
            stdout_lines,
            stderr: stderr_rx,
        }
    }

    /// `tollgate serve` on `config` with counters at `store` (`memory`, a `redis://` URL…),
    /// ephemeral loopback ports, plus `extra` flags.
    #[must_use]
    pub fn serve(config: &Path, store: &str, extra: &[&str]) -> Server {
        Server::serve_with_env(config, store, extra, &[])
    }

    /// [`Server::serve`] with the variables `env` set.
    #[must_use]
    pub fn serve_with_env(
        config: &Path,
        store: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let config = config.to_str().expect("a UTF-8 path");
        let mut args = vec!["serve", "--config", config];
        args.extend_from_slice(&EPHEMERAL_ADDRS);
        args.extend_from_slice(&["--store", store]);
        args.extend_from_slice(extra);
        Server::spawn_with_env(&args, env)
    }

    /// `tollgate serve` on the repository's `examples/limits`, in memory, on
    /// ephemeral loopback ports, plus `extra` flags, with the variables `env` set.
    #[must_use]
    pub fn example_limits(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/limits");
        let mut args = vec!["serve", "--config", config];
        args.extend_from_slice(&EPHEMERAL_ADDRS);
        args.extend_from_slice(extra);
        Server::spawn_with_env(&args, env)
    }

    /// The HTTP API's address from the `http listening on ADDR` line, waiting at most [`BUDGET`] per line.
    #[must_use]
    pub fn http_address(&self) -> SocketAddr {
        let addr = self.line_after("http listening on ");
        addr.parse()
            .unwrap_or_else(|error| panic!("`http listening on {addr}`: {error}"))
    }

    /// Sends SIGTERM to the child (with `kill`), as Kubernetes does to stop a pod.
    pub fn terminate(&self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", pid.as_str()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -TERM {pid}");
    }

    /// The address from the `listening on ADDR` line, waiting at most [`BUDGET`].
    #[must_use]
    pub fn address(&self) -> String {
        loop {
            match self.stdout_lines.recv_timeout(BUDGET) {
                Ok(line) => {
                    if let Some(addr) = announced(&line).strip_prefix("listening on ") {
                        return addr.to_owned();
                    }
                }
                Err(error) => panic!(
                    "no `listening on` line within {BUDGET:?} ({error}); stderr: {}",
                    self.stderr.try_recv().unwrap_or_default()
                ),
            }
        }
    }

    /// The rest of the first stdout line starting with `prefix`, waiting at most [`BUDGET`] for each line.
    #[must_use]
    pub fn line_after(&self, prefix: &str) -> String {
        loop {
            let line = self
                .stdout_lines
                .recv_timeout(BUDGET)
                .unwrap_or_else(|error| panic!("no `{prefix}` line within {BUDGET:?}: {error}"));
            if let Some(rest) = announced(&line).strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }

    /// Waits at most [`BUDGET`] for the child to exit; its exit code, stdout lines and stderr.
    pub fn finish(&mut self) -> (Option<i32>, Vec<String>, String) {
        let stderr = self
            .stderr
            .recv_timeout(BUDGET)
            .expect("the server exits and closes stderr in time");
        let status = self.child.wait().expect("the child is reaped");
        let lines = self.stdout_lines.try_iter().collect();
        (status.code(), lines, stderr)
    }
}

/// A `tollgate` child whose stderr goes to a log file, killed when dropped, and the
/// addresses it announced.
#[derive(Debug)]
pub struct LoggedChild {
    /// The process.
    pub child: ChildGuard,
    /// The `listening on` address.
    pub addr: SocketAddr,
    /// The `admin listening on` address, when one was awaited.
    pub admin: Option<SocketAddr>,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// Every `NAME listening on ADDR` line read so far, as (NAME, ADDR).
    listeners: Vec<(String, SocketAddr)>,
    /// Its stdout lines not read yet.
    lines: Receiver<String>,
}

impl LoggedChild {
    /// Starts `command` (stdout piped, stderr to `log`) and waits at most [`BUDGET`] per line
    /// for its `listening on` line (and `admin listening on` when `admin` is expected).
    #[must_use]
    pub fn spawn(mut command: Command, log: PathBuf, admin: bool) -> LoggedChild {
        let mut child = ChildGuard(
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(File::create(&log).expect("the log file is created"))
                .spawn()
                .expect("the tollgate binary starts"),
        );
        let stdout = child.0.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel::<String>();
        forward_lines(stdout, tx);
        let mut spawned = LoggedChild {
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            admin: None,
            log,
            listeners: Vec::new(),
            lines,
        };
        spawned.addr = spawned.listener("");
        if admin {
            spawned.admin = Some(spawned.listener("admin"));
        }
        spawned
    }

    /// The address the child announced as `NAME listening on ADDR` (`""` for the
    /// main `listening on` line; `http`, `debug`, `admin`), awaited at most
    /// [`BUDGET`] per line: tests read a port the child bound on `:0` instead of
    /// picking one that another process may take first.
    pub fn listener(&mut self, name: &str) -> SocketAddr {
        let prefix = if name.is_empty() {
            "listening on ".to_owned()
        } else {
            format!("{name} listening on ")
        };
        loop {
            if let Some((_, addr)) = self.listeners.iter().find(|(seen, _)| seen == name) {
                return *addr;
            }
            match self.lines.recv_timeout(BUDGET) {
                Ok(line) => {
                    let line = announced(&line);
                    if let Some((seen, addr)) = line.split_once("listening on ") {
                        let addr = addr.parse().unwrap_or_else(|error| {
                            panic!("`{line}` announces no address: {error}")
                        });
                        self.listeners.push((seen.trim_end().to_owned(), addr));
                    }
                }
                Err(error) => panic!(
                    "tollgate printed no `{prefix}` line within {BUDGET:?} ({error}); log:\n{}",
                    log_tail(&self.log)
                ),
            }
        }
    }

    /// `tollgate serve --config CONFIG` on ephemeral loopback ports, logging warnings to `log`.
    #[must_use]
    pub fn serve(config: &Path, log: PathBuf) -> LoggedChild {
        let mut command = tollgate(&["serve", "--config"]);
        command
            .arg(config)
            .args(EPHEMERAL_ADDRS)
            .args(["--log-level", "warn"]);
        LoggedChild::spawn(command, log, false)
    }

    /// `tollgate proxy ARGS` without the `TOLLGATE_PROXY_*` variables of the environment.
    #[must_use]
    pub fn proxy(args: &[&str], log: PathBuf, admin: bool) -> LoggedChild {
        let mut command = tollgate(&["proxy"]);
        command.args(args);
        for (var, _) in std::env::vars() {
            if var.starts_with("TOLLGATE_PROXY_") {
                command.env_remove(var);
            }
        }
        LoggedChild::spawn(command, log, admin)
    }
}

/// What a stdout line announces: the line itself, or with JSON logs its `fields.message`.
#[must_use]
pub fn announced(line: &str) -> String {
    if line.starts_with('{')
        && let Ok(object) = serde_json::from_str::<serde_json::Value>(line)
        && let Some(message) = object["fields"]["message"].as_str()
    {
        return message.to_owned();
    }
    line.to_owned()
}
