//! [`Forward`], the service that sends a request to the endpoint the balancer picked and streams the response back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::uri::Authority;
use http::uri::{self, PathAndQuery};
use http::{Method, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tollgate_runtime::{error_chain, trace_context};
use tollgate_upstream::balance::SelectedEndpoint;
use tower::Service;
use tracing::Instrument;

use super::cluster::{Cluster, UpstreamProtocol};
use super::error::{ForwardError, UpstreamError};
use super::hop_headers::{append_forwarded_for, strip_hop_by_hop};
use super::request_body::{BodyFault, RequestBody};
use super::route_timeout;
use crate::body::ProxyBody;
use crate::context::RequestContext;

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

impl Service<Request<Incoming>> for Forward {
    type Response = Response<ProxyBody>;
    type Error = ForwardError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, ForwardError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let cluster = Arc::clone(&self.cluster);
        let timeout = self.timeout;
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            // The balancer (BalanceLayer, outside) put its pick in the extensions.
            let index = match parts.extensions.get::<SelectedEndpoint>() {
                Some(selected) => selected.index,
                None if cluster.endpoints.is_empty() => {
                    return Err(UpstreamError::NoEndpoint.into());
                }
                None => 0,
            };
            let (Some(Some(authority)), Some(endpoint)) =
                (cluster.authorities.get(index), cluster.endpoints.get(index))
            else {
                return Err(ForwardError::Uri(format!(
                    "endpoint {index} has no URI authority"
                )));
            };
            let endpoint = endpoint.address;
            let context = parts.extensions.remove::<RequestContext>();
            if !parts.headers.contains_key(header::HOST)
                && let Some(authority) = parts.uri.authority()
                && let Ok(host) = HeaderValue::from_str(authority.as_str())
            {
                parts.headers.insert(header::HOST, host);
            }
            // Read before the hop-by-hop headers go: whether the client
            // means to send another request on its connection.
            let keeps_alive = parts.version == Version::HTTP_11 && !asks_to_close(&parts.headers);
            strip_hop_by_hop(&mut parts.headers);
            if let Some(context) = &context {
                let connection = &context.connection;
                append_forwarded_for(
                    &mut parts.headers,
                    connection.peer(),
                    connection.forwarded_for(),
                );
            }
            // With tracing on, the upstream call is a client span, and the
            // upstream gets its trace context.
            let span = if trace_context::enabled() {
                let span = tracing::info_span!(
                    target: trace_context::TARGET,
                    "upstream",
                    otel.kind = "client",
                    cluster = %cluster.name,
                    server.address = %authority,
                );
                trace_context::pass_on(&span, &mut parts.headers);
                span
            } else {
                tracing::Span::none()
            };
            // An HTTP/1.1 client connection sends one request at a time: from
            // its second request on, it keeps its own connection to a plain
            // HTTP/1.1 endpoint (to a few endpoints at most).
            let keeper = match (&cluster.kept_connector, context) {
                (Some(connector), Some(context))
                    if parts.method != Method::CONNECT
                        && context
                            .connection
                            .upstreams()
                            .may_keep(endpoint, keeps_alive) =>
                {
                    Some((connector, context.connection))
                }
                _ => None,
            };
            let path_and_query = parts
                .uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
            parts.uri = if keeper.is_some() {
                // Origin form, and the endpoint as `Host` when the client sent none (as hyper-util's client does).
                if !parts.headers.contains_key(header::HOST)
                    && let Ok(host) = HeaderValue::from_str(host_of(authority))
                {
                    parts.headers.insert(header::HOST, host);
                }
                Uri::from(path_and_query)
            } else {
                let mut target = uri::Parts::default();
                target.scheme = Some(cluster.client.scheme());
                target.authority = Some(authority.clone());
                target.path_and_query = Some(path_and_query);
                Uri::from_parts(target).map_err(|e| ForwardError::Uri(e.to_string()))?
            };
            parts.version = match cluster.protocol {
                UpstreamProtocol::Http2 => Version::HTTP_2,
                UpstreamProtocol::Http1 => Version::HTTP_11,
            };
            parts.extensions = http::Extensions::new();
            let fault = BodyFault::default();
            // The pool is borrowed from the cluster this future owns, not cloned per request.
            let client = &cluster.client;
            let sent = async {
                // A body broken from its first frame sends nothing upstream.
                let body = RequestBody::read_first(body, fault.clone())
                    .await
                    .map_err(|e| ForwardError::BrokenBody(e.to_string()))?;
                let request = Request::from_parts(parts, body);
                if let Some((connector, connection)) = &keeper {
                    return connection
                        .upstreams()
                        .send(endpoint, connector, request)
                        .await
                        .map_err(ForwardError::from);
                }
                client.request(request).await.map_err(|e| {
                    ForwardError::from(if e.is_connect() {
                        // The client's error says `client error (Connect)` alone; its sources say why.
                        UpstreamError::Connect(error_chain(&e))
                    } else {
                        UpstreamError::Reset(e.to_string())
                    })
                })
            }
            .instrument(span);
            let mut sent = std::pin::pin!(sent);
            let result = match (timeout, &keeper) {
                (Some(limit), Some((_, connection))) => {
                    route_timeout::within(connection, limit, sent.as_mut())
                        .await
                        .unwrap_or_else(|| Err(UpstreamError::Timeout(limit).into()))
                }
                (Some(limit), None) => match tokio::time::timeout(limit, sent.as_mut()).await {
                    Ok(result) => result,
                    Err(_) => Err(UpstreamError::Timeout(limit).into()),
                },
                (None, _) => sent.as_mut().await,
            };
            // A body that broke later aborted the upstream request before its end: whatever came back, the client's request was bad.
            if let Some(reason) = fault.reason() {
                return Err(ForwardError::BrokenBody(reason.to_owned()));
            }
            let response = result?;
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            let body: ProxyBody = body.map_err(Into::into).boxed_unsync();
            Ok(Response::from_parts(parts, body))
        })
    }
}

/// Whether `headers` ask for the connection to close after this exchange (a `close` token in `Connection`).
fn asks_to_close(headers: &http::HeaderMap) -> bool {
    headers.get_all(header::CONNECTION).iter().any(|value| {
        value.to_str().is_ok_and(|text| {
            text.split(',')
                .any(|token| token.trim().eq_ignore_ascii_case("close"))
        })
    })
}

/// `authority` as a `Host` value for plain HTTP: without the port when it is 80.
fn host_of(authority: &Authority) -> &str {
    if authority.port_u16() == Some(80) {
        authority.host()
    } else {
        authority.as_str()
    }
}
