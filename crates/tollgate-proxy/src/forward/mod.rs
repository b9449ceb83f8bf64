//! [`Forward`]: the innermost service, which sends a request to one of a cluster's endpoints.
//!
//! Connections are pooled per endpoint by hyper-util's client (HTTP/1.1
//! keep-alive, or HTTP/2 with prior knowledge); bodies stream both ways
//! without buffering, except that the request body's first frame is read
//! before anything is sent, so a body broken from its start (a malformed
//! chunk) reaches no upstream and gets 400 ([`request_body`]). The route's
//! timeout bounds the wait for that frame and the response headers. The
//! endpoint is the one `tollgate-upstream`'s balancer picked (a
//! [`SelectedEndpoint`] in the request's extensions, set by the
//! `BalanceLayer` just outside this service).

pub mod error;
pub mod request_body;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::ServerName;
use tollgate_runtime::trace_context;
use tollgate_tls::{ClientTlsFiles, TlsError};
use tollgate_upstream::balance::SelectedEndpoint;
use tower::Service;
use tracing::Instrument;

use self::error::UpstreamError;
use self::request_body::{BodyFault, RequestBody};
use crate::body::ProxyBody;
use crate::context::RequestContext;
use crate::error::{BadRequestReason, ProxyError};

/// One upstream endpoint.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Its address.
    pub address: SocketAddr,
    /// Its weight (for the balancers).
    pub weight: u32,
}

/// A cluster: its endpoints, the connection pool to them, and the balancer that picks one.
#[derive(Debug)]
pub struct Cluster {
    /// The name.
    pub name: Arc<str>,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
    /// The balancer, outlier ejection and circuit breaker (`tollgate-upstream`).
    pub balancer: tollgate_upstream::Cluster,
    /// The ring-hash key header, if any (else the client address).
    pub hash_key_header: Option<http::HeaderName>,
    client: Pool,
    protocol: UpstreamProtocol,
}

/// The HTTP version spoken to a cluster's endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (over TLS, ALPN may still pick h2).
    Http1,
    /// HTTP/2 only: prior knowledge on plain TCP, `h2` alone offered over TLS.
    Http2,
}

/// How a cluster connects to its endpoints, beyond its name, endpoints and balancer.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The ring-hash key header, if any (else the client address).
    pub hash_key_header: Option<http::HeaderName>,
    /// The connect timeout.
    pub connect_timeout: Duration,
    /// The HTTP version to speak.
    pub protocol: UpstreamProtocol,
    /// Idle pooled connections kept per endpoint.
    pub max_idle_per_endpoint: usize,
    /// TLS to the endpoints (whose files must load), or plain TCP.
    pub tls: Option<ClientTlsFiles>,
}

/// A cluster's connection pool: plain TCP, or TLS (`https`) when the cluster has `tls`.
#[derive(Clone, Debug)]
enum Pool {
    Plain(Client<HttpConnector, RequestBody>),
    Tls(Client<HttpsConnector<HttpConnector>, RequestBody>),
}

impl Pool {
    fn scheme(&self) -> &'static str {
        match self {
            Pool::Plain(_) => "http",
            Pool::Tls(_) => "https",
        }
    }

    fn request(&self, request: Request<RequestBody>) -> hyper_util::client::legacy::ResponseFuture {
        match self {
            Pool::Plain(client) => client.request(request),
            Pool::Tls(client) => client.request(request),
        }
    }
}

impl Cluster {
    /// A cluster with its own pool, picking endpoints with `balancer`,
    /// connecting as `options` say.
    pub fn new(
        name: &str,
        endpoints: Vec<Endpoint>,
        balancer: tollgate_upstream::Cluster,
        options: ClusterOptions,
    ) -> Result<Self, TlsError> {
        let ClusterOptions {
            hash_key_header,
            connect_timeout,
            protocol,
            max_idle_per_endpoint,
            tls,
        } = options;
        let http2 = protocol == UpstreamProtocol::Http2;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .http2_only(http2)
            .pool_max_idle_per_host(max_idle_per_endpoint)
            .pool_idle_timeout(Duration::from_secs(60));
        let client = match &tls {
            None => Pool::Plain(builder.build(connector)),
            Some(files) => {
                // The connector offers the ALPN protocols itself (h2 and http/1.1, or h2 only).
                let config = (*files.client_config(&[])?).clone();
                connector.enforce_http(false);
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(config)
                    .https_only();
                let https = match &files.server_name {
                    Some(name) => {
                        let name = ServerName::try_from(name.clone())
                            .map_err(|_| TlsError::BadName { name: name.clone() })?;
                        https.with_server_name_resolver(FixedServerNameResolver::new(name))
                    }
                    None => https,
                };
                let https = if http2 {
                    https.enable_http2().wrap_connector(connector)
                } else {
                    https
                        .enable_http1()
                        .enable_http2()
                        .wrap_connector(connector)
                };
                Pool::Tls(builder.build(https))
            }
        };
        Ok(Cluster {
            name: Arc::from(name),
            endpoints,
            balancer,
            hash_key_header,
            client,
            protocol,
        })
    }
}

/// Sends requests to a cluster, bounded by a timeout.
#[derive(Clone, Debug)]
pub struct Forward {
    cluster: Arc<Cluster>,
    timeout: Option<Duration>,
}

impl Forward {
    /// Forwards to `cluster`, waiting at most `timeout` for the response headers.
    pub fn new(cluster: Arc<Cluster>, timeout: Option<Duration>) -> Self {
        Forward { cluster, timeout }
    }
}

/// Headers that describe one hop, never forwarded.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "upgrade",
    "proxy-authenticate",
];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

fn append_forwarded_for(headers: &mut HeaderMap, peer: IpAddr) {
    let value = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(existing) if !existing.is_empty() => format!("{existing}, {peer}"),
        _ => peer.to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert("x-forwarded-for", value);
    }
    headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
}

impl Service<Request<Incoming>> for Forward {
    type Response = Response<ProxyBody>;
    type Error = ProxyError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, ProxyError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let cluster = Arc::clone(&self.cluster);
        let timeout = self.timeout;
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            // The balancer (BalanceLayer, outside) put its pick in the extensions.
            let authority = match parts.extensions.get::<SelectedEndpoint>() {
                Some(selected) => selected.address.clone(),
                None => match cluster.endpoints.first() {
                    Some(endpoint) => endpoint.address.to_string(),
                    None => return Err(UpstreamError::NoEndpoint.into()),
                },
            };
            let peer = parts
                .extensions
                .get::<PeerAddress>()
                .map(|p| p.0)
                .or_else(|| parts.extensions.get::<RequestContext>().map(|c| c.client));
            if !parts.headers.contains_key(header::HOST)
                && let Some(authority) = parts.uri.authority()
                && let Ok(host) = HeaderValue::from_str(authority.as_str())
            {
                parts.headers.insert(header::HOST, host);
            }
            strip_hop_by_hop(&mut parts.headers);
            if let Some(peer) = peer {
                append_forwarded_for(&mut parts.headers, peer);
            }
            let path = parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            parts.uri = Uri::builder()
                .scheme(cluster.client.scheme())
                .authority(authority)
                .path_and_query(path)
                .build()
                .map_err(|e| ProxyError::Internal(format!("upstream URI: {e}")))?;
            parts.version = match cluster.protocol {
                UpstreamProtocol::Http2 => Version::HTTP_2,
                UpstreamProtocol::Http1 => Version::HTTP_11,
            };
            parts.extensions = http::Extensions::new();
            // With tracing on, the upstream call is a client span, and the
            // upstream gets its trace context.
            let span = if trace_context::enabled() {
                let span = tracing::info_span!(
                    target: trace_context::TARGET,
                    "upstream",
                    otel.kind = "client",
                    cluster = %cluster.name,
                    server.address = %parts.uri.authority().map_or("", |a| a.as_str()),
                );
                trace_context::pass_on(&span, &mut parts.headers);
                span
            } else {
                tracing::Span::none()
            };
            let fault = BodyFault::default();
            let client = cluster.client.clone();
            let sent = async {
                // A body broken from its first frame sends nothing upstream.
                let body = RequestBody::read_first(body, fault.clone())
                    .await
                    .map_err(|e| {
                        ProxyError::BadRequest(BadRequestReason::BrokenBody(e.to_string()))
                    })?;
                client
                    .request(Request::from_parts(parts, body))
                    .await
                    .map_err(|e| {
                        ProxyError::from(if e.is_connect() {
                            UpstreamError::Connect(e.to_string())
                        } else {
                            UpstreamError::Reset(e.to_string())
                        })
                    })
            }
            .instrument(span);
            let result = match timeout {
                Some(limit) => match tokio::time::timeout(limit, sent).await {
                    Ok(result) => result,
                    Err(_) => Err(UpstreamError::Timeout(limit).into()),
                },
                None => sent.await,
            };
            // A body that broke later aborted the upstream request before its end: whatever came back, the client's request was bad.
            if let Some(reason) = fault.reason() {
                return Err(ProxyError::BadRequest(BadRequestReason::BrokenBody(
                    reason.to_owned(),
                )));
            }
            let response = result?;
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            let body: ProxyBody = body.map_err(Into::into).boxed_unsync();
            Ok(Response::from_parts(parts, body))
        })
    }
}

/// The downstream peer's address, in the request's extensions.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddress(pub IpAddr);
