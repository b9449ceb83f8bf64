//! The tests' blocking HTTP/1.1 client, on `ureq`: whole responses as [`Response`], and
//! [`Connection`]s that keep their connection between requests.
//!
//! Statuses are answers here, never errors, redirects are not followed and no proxy of
//! the environment is used: tests see exactly what the server sent.

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use http::HeaderMap;

/// Connect timeout of every exchange.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a response may take to arrive, head and body.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP response as the tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers (names lower-case).
    pub headers: HeaderMap,
    /// The body, decoded as UTF-8 (lossy).
    pub body: String,
}

impl Response {
    /// The first value of header `name`, when it is there and text.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Header `name` as a number; panics naming the response when it is missing or not one.
    #[must_use]
    pub fn number(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header in {self:#?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number in {self:#?}"))
    }

    /// The body as JSON; panics with the body when it is not JSON.
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("a JSON body ({error}): {}", self.body))
    }

    /// The headers as `name: value` lines, lower-cased, for `contains` checks.
    #[must_use]
    pub fn head(&self) -> String {
        self.headers
            .iter()
            .map(|(name, value)| format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())))
            .collect::<String>()
            .to_ascii_lowercase()
    }
}

/// The error of an exchange that got no response.
pub type Error = ureq::Error;

/// An agent that answers statuses as responses and keeps at most one idle connection.
fn agent(body_timeout: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .max_idle_connections_per_host(1)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_recv_response(Some(IO_TIMEOUT))
        .timeout_recv_body(body_timeout)
        .build()
        .new_agent()
}

/// A client bound to one server whose connection is kept alive between requests.
#[derive(Debug)]
pub struct Connection {
    agent: ureq::Agent,
    base: String,
}

impl Connection {
    /// A client for `http://addr` (it connects on the first request).
    #[must_use]
    pub fn open(addr: impl std::fmt::Display) -> Connection {
        Connection {
            agent: agent(Some(IO_TIMEOUT)),
            base: format!("http://{addr}"),
        }
    }

    /// Sends one request with `headers` and `body` (none when empty) and reads its whole response.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Response, Error> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = if body.is_empty() {
            self.agent.run(request.body(())?)?
        } else {
            self.agent.run(request.body(body)?)?
        };
        let (parts, mut body) = response.into_parts();
        let body = body
            .with_config()
            .limit(u64::MAX)
            .lossy_utf8(true)
            .read_to_string()?;
        Ok(Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    }

    /// Sends one request without a body and reads its whole response.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Response, Error> {
        self.request(method, path, headers, "")
    }
}

/// One GET on a fresh connection, or the error that kept it from an answer.
pub fn try_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Result<Response, Error> {
    Connection::open(addr).send("GET", path, headers)
}

/// One GET on a fresh connection; panics when no answer comes.
#[must_use]
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    try_get(addr, path, headers)
        .unwrap_or_else(|error| panic!("GET {path} via {addr} failed: {error}"))
}

/// The whole-number value of the series `series` (its name and labels, as
/// written) on `/metrics` at `addr`; panics when it is missing or not one.
#[must_use]
pub fn metric_value(addr: SocketAddr, series: &str) -> u64 {
    let text = get(addr, "/metrics", &[]).body;
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no `{series}` in:\n{text}"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("`{series}` is not a whole number:\n{text}"))
}

/// One request to `addr` (`host:port`) with `body` (none when empty); panics when no answer comes.
#[must_use]
pub fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    Connection::open(addr)
        .request(method, path, headers, body)
        .unwrap_or_else(|error| panic!("{method} {path} via {addr} failed: {error}"))
}

/// A response whose body is still being sent (an event stream, say), read as it comes.
pub struct Streaming {
    /// The status code.
    pub status: u16,
    /// The headers (names lower-case).
    pub headers: HeaderMap,
    /// The body as it arrives; dropping it closes the connection.
    pub body: Box<dyn Read + Send>,
}

/// A GET to `addr` (`host:port`) whose body is read as it arrives, for at most `budget` in all.
#[must_use]
pub fn stream(addr: &str, path: &str, headers: &[(&str, &str)], budget: Duration) -> Streaming {
    let mut request = http::Request::builder()
        .method("GET")
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = agent(Some(budget))
        .run(request.body(()).expect("a valid request"))
        .unwrap_or_else(|error| panic!("GET {path} via {addr} failed: {error}"));
    let (parts, body) = response.into_parts();
    Streaming {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: Box::new(body.into_reader()),
    }
}
