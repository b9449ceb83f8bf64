//! Child processes for tests: killed and reaped on drop, their output read line by line.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Child;
use std::sync::mpsc;
use std::thread;

/// A child process killed and reaped when dropped, whatever happened.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Kills and reaps the child now.
    pub fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
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

/// The last 40 lines of a log file (each cut to 400 characters), for failure messages.
#[must_use]
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..]
        .iter()
        .map(|l| l.chars().take(400).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A memory figure of process `pid` from `/proc/PID/status`, in KiB: `VmRSS`
/// (resident now) or `VmHWM` (the most it was resident), for instance.
#[must_use]
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|error| panic!("cannot read /proc/{pid}/status: {error}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status:\n{status}"))
}
