//! `tollgate limits`: sets, reads, lists and deletes overrides, and reads a descriptor's usage, through a running `serve`'s overrides API.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::CommandError;
use crate::tls_args::ClientTlsArgs;

/// The arguments of `tollgate limits`.
#[derive(Args, Debug)]
#[command(
    after_help = "A DESCRIPTOR is the path as `key=value` pairs in order (a bare `key` for a key-only level). Exit status: 0 done, 1 refused or unreachable (the service's message is printed), 2 usage."
)]
pub struct LimitsArgs {
    /// The `serve` HTTP listener: `http://`, or `https://` for one started
    /// with `--http-tls` (the `--tls-*` flags give the CA, the client
    /// certificate for mutual TLS and the server name).
    #[arg(
        long,
        env = "TOLLGATE_URL",
        default_value = "http://127.0.0.1:8080",
        value_name = "URL"
    )]
    pub url: String,
    /// A file holding the bearer token (`ID:TOKEN` or the bare token; the first line that is not a comment).
    #[arg(long, env = "TOLLGATE_TOKEN_FILE", value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// How long to wait for the answer.
    #[arg(long, default_value = "5s", value_parser = tollgate_core::duration::parse_duration)]
    pub timeout: Duration,
    /// TLS towards an `https://` URL.
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    /// What to do.
    #[command(subcommand)]
    pub action: LimitsAction,
}

/// What `tollgate limits` does.
#[derive(Subcommand, Debug)]
pub enum LimitsAction {
    /// Set an override: FILE (or `-`, stdin) holds one descriptor of a limits file, YAML or JSON.
    Set {
        /// The domain.
        domain: String,
        /// The descriptor with its `rate_limit`.
        #[arg(default_value = "-")]
        file: String,
    },
    /// Print the override at a descriptor path.
    Get {
        /// The domain.
        domain: String,
        /// The path: `key=value …`.
        #[arg(required = true)]
        descriptor: Vec<String>,
    },
    /// Print every override, or a domain's.
    List {
        /// Only this domain's.
        domain: Option<String>,
    },
    /// Delete the override at a descriptor path.
    Delete {
        /// The domain.
        domain: String,
        /// The path: `key=value …`.
        #[arg(required = true)]
        descriptor: Vec<String>,
    },
    /// Print a descriptor's limit, used and remaining, without spending any.
    Usage {
        /// The domain.
        domain: String,
        /// The descriptor: `key=value …`.
        #[arg(required = true)]
        descriptor: Vec<String>,
    },
}

/// The query string of `key=value` words (a bare `key` is key-only).
fn query(descriptor: &[String]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for word in descriptor {
        match word.split_once('=') {
            Some((key, value)) => query.append_pair(key, value),
            None => query.append_key_only(word),
        };
    }
    query.finish()
}

/// A path segment, percent-encoded.
fn segment(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// The bearer token in `path`'s first line that is not blank or a comment.
fn read_token(path: &std::path::Path) -> Result<String, CommandError> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        CommandError::Usage(format!("--token-file {}: {error}", path.display()))
    })?;
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            line.split_once(':')
                .map_or(line, |(_, token)| token.trim())
                .to_owned()
        })
        .ok_or_else(|| {
            CommandError::Usage(format!("--token-file {} holds no token", path.display()))
        })
}

/// Runs `tollgate limits`.
pub fn run(args: &LimitsArgs) -> Result<(), CommandError> {
    let base = args.url.trim_end_matches('/');
    let target = Target::parse(base, &args.tls)?;
    let token = args.token_file.as_deref().map(read_token).transpose()?;
    let (method, path, body) = match &args.action {
        LimitsAction::Set { domain, file } => {
            let body = if file == "-" {
                std::io::read_to_string(std::io::stdin())
            } else {
                std::fs::read_to_string(file)
            }
            .map_err(|error| CommandError::Usage(format!("cannot read {file}: {error}")))?;
            (
                Method::PUT,
                format!("/v1/overrides/{}", segment(domain)),
                body,
            )
        }
        LimitsAction::Get { domain, descriptor } => (
            Method::GET,
            format!("/v1/overrides/{}?{}", segment(domain), query(descriptor)),
            String::new(),
        ),
        LimitsAction::List { domain } => (
            Method::GET,
            match domain {
                Some(domain) => format!("/v1/overrides/{}", segment(domain)),
                None => "/v1/overrides".to_owned(),
            },
            String::new(),
        ),
        LimitsAction::Delete { domain, descriptor } => (
            Method::DELETE,
            format!("/v1/overrides/{}?{}", segment(domain), query(descriptor)),
            String::new(),
        ),
        LimitsAction::Usage { domain, descriptor } => (
            Method::GET,
            format!("/v1/usage/{}?{}", segment(domain), query(descriptor)),
            String::new(),
        ),
    };
    let mut request = Request::builder()
        .method(method)
        .uri(&path)
        .header(header::HOST, target.authority.as_str());
    if let Some(token) = &token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| CommandError::Usage(format!("{base}{path}: {error}")))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    let (status, text) = runtime.block_on(async {
        tokio::time::timeout(args.timeout, target.exchange(request))
            .await
            .map_err(|_| {
                CommandError::Failed(format!("{base} did not answer within {:?}", args.timeout))
            })?
    })?;
    if status.is_success() {
        if status != StatusCode::NO_CONTENT {
            println!("{}", text.trim_end());
        } else {
            println!("deleted");
        }
        Ok(())
    } else {
        Err(CommandError::Failed(format!(
            "{} answered {status}: {}",
            base,
            text.trim_end()
        )))
    }
}

/// Where `tollgate limits` sends its one request: a host and port, over plain HTTP or TLS.
struct Target {
    /// `host:port` as the URL gives it (the `Host` header).
    authority: String,
    host: String,
    port: u16,
    /// `Some` for `https://`.
    tls: Option<tollgate_tls::TlsConnector>,
}

impl Target {
    /// Reads `base` (`http://host[:port]` or `https://host[:port]`, no path);
    /// TLS flags with an `http://` URL are refused rather than ignored.
    fn parse(base: &str, tls: &ClientTlsArgs) -> Result<Self, CommandError> {
        let usage = |why: &str| CommandError::Usage(format!("--url {base}: {why}"));
        let uri: Uri = base
            .parse()
            .map_err(|error| usage(&format!("not a URL ({error})")))?;
        let secure = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(usage("the URL must start with http:// or https://")),
        };
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(usage("give the listener only, without a path"));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| usage("the URL names no host"))?;
        let port = authority
            .port_u16()
            .unwrap_or(if secure { 443 } else { 80 });
        let tls = if secure {
            Some(tls.https_connector()?)
        } else if tls.is_set() {
            return Err(usage(
                "the --tls-* flags need an https:// URL (they would be ignored over http://)",
            ));
        } else {
            None
        };
        Ok(Target {
            authority: authority.as_str().to_owned(),
            host: authority.host().to_owned(),
            port,
            tls,
        })
    }

    /// Sends `request` over a new connection and reads the whole answer.
    async fn exchange(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, String), CommandError> {
        let unreachable = |error: &dyn std::fmt::Display| {
            CommandError::Failed(format!("cannot reach {}: {error}", self.authority))
        };
        let response = match &self.tls {
            Some(connector) => {
                let stream = connector
                    .connect_to(&self.host, self.port)
                    .await
                    .map_err(|error| unreachable(&error))?;
                send(TokioIo::new(stream), request).await
            }
            None => {
                let host = self.host.trim_start_matches('[').trim_end_matches(']');
                let stream = TcpStream::connect((host, self.port))
                    .await
                    .map_err(|error| unreachable(&error))?;
                send(TokioIo::new(stream), request).await
            }
        }
        .map_err(|error| unreachable(&error))?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|error| {
            CommandError::Failed(format!(
                "the answer of {} broke off: {error}",
                self.authority
            ))
        })?;
        Ok((
            status,
            String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        ))
    }
}

/// One HTTP/1.1 exchange over `io`.
async fn send<I>(
    io: I,
    request: Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(connection);
    sender.send_request(request).await
}
