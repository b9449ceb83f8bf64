//! `tollgate bench http`: GET requests over HTTP/1.1 keep-alive connections.
//!
//! Each connection carries one request at a time (HTTP/1.1 without
//! pipelining); workers that share a connection take turns on it. The body
//! of every answer is read to its end before the request counts as answered,
//! so the latency covers the whole response. A connection the server closed
//! is opened again by the next request on it, and that time counts in its
//! latency.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::load::{LoadArgs, Sender, drive, runtime};
use super::report::Heading;
use super::tally::{Counts, ErrorCounts};
use crate::CommandError;
use tollgate_runtime::error_chain;

/// The arguments of `tollgate bench http`.
#[derive(Args, Debug)]
#[command(
    after_help = "Statuses are counted as 2xx, 3xx, 429, other 4xx, 5xx and other; a request \
                  that got no status (connect, I/O or timeout) is an error.\n\
                  Exit status: 0 done (whatever the server answered), 1 cannot connect, 2 usage."
)]
pub struct HttpArgs {
    /// The URL to GET, `http://HOST:PORT/PATH` (plain HTTP only).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Keep-alive connections the requests are spread over (default: one per request in flight).
    #[arg(long, value_name = "M")]
    pub connections: Option<usize>,
    /// The load's shape.
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Where requests go: the server to connect to and the request line's parts.
#[derive(Debug)]
struct Target {
    host: String,
    port: u16,
    /// The `Host` header: the URL's authority.
    authority: String,
    /// The path and query.
    path: String,
}

/// Parses `--url`; anything but `http://HOST[:PORT][/PATH]` is a usage error.
fn parse_url(text: &str) -> Result<Target, CommandError> {
    let usage = |why: &str| CommandError::Usage(format!("bad --url {text:?}: {why}"));
    let uri: Uri = text.parse().map_err(|error| usage(&format!("{error}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(usage(&format!("only http:// is supported, not {other}://")));
        }
        None => return Err(usage("expected http://HOST:PORT/PATH")),
    }
    let Some(authority) = uri.authority() else {
        return Err(usage("no host"));
    };
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.is_empty() {
        return Err(usage("no host"));
    }
    if authority.as_str().contains('@') {
        return Err(usage("user information is not supported"));
    }
    // `Authority::port` hides a port that is not a u16, so read it here.
    let after_host = authority
        .as_str()
        .rsplit_once(']')
        .map_or(authority.as_str(), |(_, rest)| rest);
    let port = match after_host.rsplit_once(':') {
        None | Some((_, "")) => 80,
        Some((_, port)) => port
            .parse::<u16>()
            .map_err(|_| usage(&format!("the port {port} is not in 0..=65535")))?,
    };
    Ok(Target {
        host: host.to_owned(),
        port,
        authority: authority.as_str().to_owned(),
        path: uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .to_owned(),
    })
}

/// Opens one HTTP/1.1 connection within `timeout`.
async fn open(target: &Target, timeout: Duration) -> Result<SendRequest<Empty<Bytes>>, String> {
    let connect = async {
        let stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|error| error.to_string())?;
        // Small requests go out at once, as any keep-alive client sends them.
        stream
            .set_nodelay(true)
            .map_err(|error| error.to_string())?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| error_chain(&error))?;
        tokio::spawn(async move {
            // The connection ends when the server closes it or the sender is dropped;
            // the next request on it sees that.
            let _ = connection.await;
        });
        Ok(sender)
    };
    tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| "connect timed out".to_owned())?
}

/// One keep-alive connection, shared by the workers assigned to it.
struct Connection {
    target: Arc<Target>,
    timeout: Duration,
    /// The open connection; `None` after it broke, until a request opens it again.
    sender: tokio::sync::Mutex<Option<SendRequest<Empty<Bytes>>>>,
}

impl Connection {
    /// Sends one GET and reads the whole answer; its status, or why there is none.
    ///
    /// The connection is held for the whole exchange: HTTP/1.1 carries one
    /// request at a time, so the next worker could only wait for it anyway.
    async fn get(&self) -> Result<StatusCode, String> {
        let exchange = async {
            let mut slot = self.sender.lock().await;
            let mut request = Request::get(self.target.path.as_str())
                .header(header::HOST, self.target.authority.as_str())
                .body(Empty::<Bytes>::new())
                .map_err(|error| format!("request: {error}"))?;
            // A request the connection handed back unsent (it closed or was not
            // ready after all) goes once more, on a connection opened again; the
            // server never saw it, so nothing is counted twice.
            let mut unsent_once = false;
            let response = loop {
                let sender = self.ready_sender(&mut slot).await?;
                match sender.try_send_request(request).await {
                    Ok(response) => break response,
                    Err(mut error) => {
                        *slot = None;
                        match error.take_message() {
                            Some(unsent) if !unsent_once => {
                                unsent_once = true;
                                request = unsent;
                            }
                            _ => {
                                return Err(format!("http: {}", error_chain(&error.into_error())));
                            }
                        }
                    }
                }
            };
            let status = response.status();
            if let Err(error) = response.into_body().collect().await {
                *slot = None;
                return Err(format!("body: {}", error_chain(&error)));
            }
            Ok(status)
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| "timeout".to_owned())?
    }

    /// The open connection, ready for a request; opened again if the server
    /// closed it while idle (after its keep-alive limit, or HTTP/1.0), and
    /// that time counts in the request's latency.
    async fn ready_sender<'slot>(
        &self,
        slot: &'slot mut Option<SendRequest<Empty<Bytes>>>,
    ) -> Result<&'slot mut SendRequest<Empty<Bytes>>, String> {
        if let Some(sender) = slot.as_mut()
            && sender.ready().await.is_err()
        {
            *slot = None;
        }
        if slot.is_none() {
            let mut sender = open(&self.target, self.timeout)
                .await
                .map_err(|error| format!("connect: {error}"))?;
            sender
                .ready()
                .await
                .map_err(|error| format!("connect: {}", error_chain(&error)))?;
            *slot = Some(sender);
        }
        Ok(slot.as_mut().expect("opened above"))
    }
}

/// One `bench http` worker: the connection it sends on.
struct HttpSender {
    connection: Arc<Connection>,
}

impl Sender for HttpSender {
    type Counts = HttpCounts;

    fn send(&mut self) -> impl Future<Output = Result<StatusCode, String>> + Send {
        let connection = Arc::clone(&self.connection);
        async move { connection.get().await }
    }
}

/// The answers of `bench http` by status class, and the errors by kind.
#[derive(Default)]
struct HttpCounts {
    success: u64,
    redirect: u64,
    too_many: u64,
    client_error: u64,
    server_error: u64,
    other: u64,
    errors: ErrorCounts,
}

impl HttpCounts {
    /// The status classes with their report names.
    fn classes(&self) -> [(&'static str, u64); 6] {
        [
            ("2xx", self.success),
            ("3xx", self.redirect),
            ("429", self.too_many),
            ("4xx", self.client_error),
            ("5xx", self.server_error),
            ("other", self.other),
        ]
    }
}

impl Counts for HttpCounts {
    type Answer = Result<StatusCode, String>;
    const ERRORS_BY: &'static str = "errors_by_kind";

    fn count(&mut self, answer: Self::Answer) -> bool {
        match answer {
            Ok(status) => {
                let class = match status.as_u16() {
                    200..=299 => &mut self.success,
                    300..=399 => &mut self.redirect,
                    429 => &mut self.too_many,
                    400..=499 => &mut self.client_error,
                    500..=599 => &mut self.server_error,
                    _ => &mut self.other,
                };
                *class += 1;
                true
            }
            Err(kind) => {
                self.errors.add(kind);
                false
            }
        }
    }

    fn merge(&mut self, other: HttpCounts) {
        self.success += other.success;
        self.redirect += other.redirect;
        self.too_many += other.too_many;
        self.client_error += other.client_error;
        self.server_error += other.server_error;
        self.other += other.other;
        self.errors.merge(other.errors);
    }

    fn answered(&self) -> u64 {
        self.classes().iter().map(|(_, count)| count).sum()
    }

    fn errors(&self) -> &ErrorCounts {
        &self.errors
    }

    fn text_lines(&self) -> String {
        let mut statuses = String::from("status     ");
        for (name, count) in self.classes() {
            let _ = write!(statuses, " {name}={count}");
        }
        statuses.push('\n');
        statuses
    }

    fn json_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        let status: serde_json::Map<String, serde_json::Value> = self
            .classes()
            .iter()
            .map(|(name, count)| ((*name).to_owned(), (*count).into()))
            .collect();
        vec![("status", status.into())]
    }
}

/// Runs `tollgate bench http`.
pub fn run(args: &HttpArgs) -> Result<(), CommandError> {
    let target = Arc::new(parse_url(&args.url)?);
    let rate = args.load.checked_rate()?;
    let in_flight = args.load.concurrency;
    let connections = args.connections.unwrap_or(in_flight);
    if connections == 0 {
        return Err(CommandError::Usage(
            "--connections must be at least 1".to_owned(),
        ));
    }
    if connections > in_flight {
        return Err(CommandError::Usage(format!(
            "--connections {connections} is more than -c {in_flight}: \
             each connection carries one request at a time"
        )));
    }
    let timeout = args.load.timeout;
    let report = runtime()?.block_on(async {
        let mut shared = Vec::with_capacity(connections);
        for _ in 0..connections {
            let sender = open(&target, timeout).await.map_err(|error| {
                CommandError::Failed(format!("cannot connect to {}: {error}", args.url))
            })?;
            shared.push(Arc::new(Connection {
                target: Arc::clone(&target),
                timeout,
                sender: tokio::sync::Mutex::new(Some(sender)),
            }));
        }
        let senders = (0..in_flight)
            .map(|i| HttpSender {
                connection: Arc::clone(&shared[i % shared.len()]),
            })
            .collect();
        drive(&args.load, rate, senders).await
    })?;
    let heading = Heading {
        text: format!("GET {}", args.url),
        json: vec![("url", args.url.clone().into())],
        connections,
    };
    report.print(&args.load, &heading);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_host_port_authority_and_path() {
        let target = parse_url("http://127.0.0.1:8080/a/b?x=1").unwrap();
        assert_eq!(target.host, "127.0.0.1");
        assert_eq!(target.port, 8080);
        assert_eq!(target.authority, "127.0.0.1:8080");
        assert_eq!(target.path, "/a/b?x=1");
        let target = parse_url("http://[::1]").unwrap();
        assert_eq!((target.host.as_str(), target.port), ("::1", 80));
        assert_eq!(target.path, "/");
    }

    #[test]
    fn only_plain_http_urls_are_accepted() {
        for (url, why) in [
            (
                "https://example.test/",
                "only http:// is supported, not https://",
            ),
            ("/just/a/path", "expected http://HOST:PORT/PATH"),
            (
                "http://127.0.0.1:99999/",
                "the port 99999 is not in 0..=65535",
            ),
        ] {
            match parse_url(url) {
                Err(CommandError::Usage(message)) => assert!(message.contains(why), "{message}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn statuses_fall_into_their_classes_and_add_up_with_errors() {
        let mut counts = HttpCounts::default();
        for code in [200, 204, 301, 429, 404, 400, 503, 500] {
            assert!(counts.count(Ok(StatusCode::from_u16(code).unwrap())));
        }
        assert!(!counts.count(Err("timeout".to_owned())));
        assert_eq!(
            counts.classes(),
            [
                ("2xx", 2),
                ("3xx", 1),
                ("429", 1),
                ("4xx", 2),
                ("5xx", 2),
                ("other", 0)
            ]
        );
        assert_eq!(counts.total(), 9);
    }
}
