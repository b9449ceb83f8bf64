//! Harness for the `tollgate proxy` tests: a loopback upstream, an HTTP/1.1
//! client that can keep its connection, proxy and Envoy children killed on drop.
//!
//! Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How long a child may take to print its address.
pub const BUDGET: Duration = Duration::from_secs(30);
/// Connect timeout of every exchange.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Read/write timeout of every exchange.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A directory under Cargo's test scratch space, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let path =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("the temporary directory is created");
        TempDir(path)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, text).expect("a test file is written");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A child process killed and reaped when dropped.
pub struct ChildGuard(pub Child);

impl ChildGuard {
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

/// The last lines of a log file, for failure messages.
pub fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..]
        .iter()
        .map(|l| l.chars().take(400).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The test's upstream: `200 upstream ok` to every request, one thread per
/// connection, keep-alive; `GET /echo…` answers with the request's `x-*`
/// headers, one per line. Counts the requests it answered.
pub struct Upstream {
    pub addr: SocketAddr,
    pub served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    pub fn spawn() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("the upstream binds");
        let addr = listener.local_addr().expect("the upstream has an address");
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let flag = Arc::clone(&stop);
        let count = Arc::clone(&served);
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let count = Arc::clone(&count);
                thread::spawn(move || serve_upstream_connection(stream, &count));
            }
        });
        Upstream {
            addr,
            served,
            stop,
            thread: Some(thread),
        }
    }
}

fn serve_upstream_connection(stream: TcpStream, count: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let path = request_line.split(' ').nth(1).unwrap_or("/").to_owned();
        let mut echoed = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                if name == "content-length" {
                    length = value.trim().parse().unwrap_or(0);
                }
                if name.starts_with("x-") {
                    echoed.push_str(&format!("{name}: {}\n", value.trim()));
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        count.fetch_add(1, Ordering::SeqCst);
        let text = if path.starts_with("/echo") {
            echoed
        } else {
            "upstream ok".to_owned()
        };
        let written = write!(
            writer,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if written.is_err() || writer.flush().is_err() {
            return;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An HTTP response as the tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A client connection that keeps alive between requests.
pub struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    pub fn open(addr: SocketAddr) -> std::io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Connection {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
        })
    }

    /// Sends one request (no body) and reads its response.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> std::io::Result<Response> {
        let mut request = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        self.writer.write_all(request.as_bytes())?;
        self.read_response()
    }

    fn read_response(&mut self) -> std::io::Result<Response> {
        let invalid = |what: String| std::io::Error::new(ErrorKind::InvalidData, what);
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line)?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| invalid(format!("no status in {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(invalid("the connection closed in the headers".into()));
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v): &(String, String)| v.clone())
        };
        let body = if let Some(length) = get("content-length") {
            let length: usize = length.parse().map_err(|_| invalid(length))?;
            let mut body = vec![0u8; length];
            self.reader.read_exact(&mut body)?;
            body
        } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            let mut body = Vec::new();
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| invalid(size.clone()))?;
                let mut chunk = vec![0u8; size + 2];
                self.reader.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
            body
        } else {
            Vec::new()
        };
        Ok(Response {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

/// One request on a fresh connection.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    Connection::open(addr)
        .and_then(|mut c| c.send("GET", path, headers))
        .unwrap_or_else(|error| panic!("GET {path} via {addr} failed: {error}"))
}

/// A `tollgate proxy` child, killed when dropped.
pub struct ProxyChild {
    pub child: ChildGuard,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub log: PathBuf,
}

impl ProxyChild {
    /// Starts `tollgate proxy ARGS`, stderr to `log`, and waits for its `listening on` line
    /// (and `admin listening on` when `admin` is expected).
    pub fn spawn(args: &[&str], log: PathBuf, admin: bool) -> ProxyChild {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        command
            .arg("proxy")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        for (var, _) in std::env::vars() {
            if var.starts_with("TOLLGATE_PROXY_") {
                command.env_remove(var);
            }
        }
        let mut child = ChildGuard(
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(File::create(&log).expect("the proxy log is created"))
                .spawn()
                .expect("the tollgate binary starts"),
        );
        let stdout = child.0.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel::<String>();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut addr = None;
        let mut admin_addr = None;
        while addr.is_none() || (admin && admin_addr.is_none()) {
            match lines.recv_timeout(BUDGET) {
                Ok(line) => {
                    if let Some(a) = line.strip_prefix("admin listening on ") {
                        admin_addr = Some(a.parse().expect("an admin address"));
                    } else if let Some(a) = line.strip_prefix("listening on ") {
                        addr.get_or_insert(a.parse().expect("a listener address"));
                    }
                }
                Err(error) => panic!(
                    "the proxy printed no `listening on` line within {BUDGET:?} ({error}); log:\n{}",
                    log_tail(&log)
                ),
            }
        }
        ProxyChild {
            child,
            addr: addr.expect("an address"),
            admin: admin_addr,
            log,
        }
    }
}

/// Starts Envoy on `bootstrap` and waits (bounded: 200 polls 100 ms apart) until `/ready` says LIVE.
pub fn start_envoy(
    binary: &Path,
    dir: &Path,
    bootstrap: &str,
    admin_port: u16,
) -> (ChildGuard, PathBuf) {
    let config = dir.join("envoy.yaml");
    fs::write(&config, bootstrap).expect("the Envoy bootstrap is written");
    let log = dir.join("envoy.log");
    let child = Command::new(binary)
        .arg("-c")
        .arg(&config)
        .args(["--concurrency", "1", "--log-level", "warn"])
        .args([
            "--base-id",
            &(std::process::id() + 7).to_string(),
            "--disable-hot-restart",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("the Envoy log is created"))
        .spawn()
        .unwrap_or_else(|error| panic!("{} does not start: {error}", binary.display()));
    let mut guard = ChildGuard(child);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    for _ in 0..200 {
        if let Ok(Some(status)) = guard.0.try_wait() {
            panic!("Envoy exited early ({status}); log:\n{}", log_tail(&log));
        }
        if let Ok(response) = Connection::open(admin).and_then(|mut c| c.send("GET", "/ready", &[]))
            && response.status == 200
            && response.body.trim() == "LIVE"
        {
            return (guard, log);
        }
        thread::sleep(Duration::from_millis(100));
    }
    guard.stop();
    panic!("Envoy was not ready within 20 s; log:\n{}", log_tail(&log));
}
