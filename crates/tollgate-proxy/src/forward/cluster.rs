//! A cluster: its endpoints, the balancer that picks one, and the connection pool (plain or TLS, HTTP/1.1 or HTTP/2) to them, with the connector of the connections client connections keep.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http::uri::{Authority, Scheme};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::ServerName;
use tollgate_tls::{ClientTlsFiles, TlsError};

use super::request_body::RequestBody;

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
    pub(super) client: Pool,
    /// The connector for the upstream connections each client connection
    /// keeps ([`KeptConnections`](super::KeptConnections)): plain HTTP/1.1 clusters that keep idle
    /// connections at all; `None` sends every request through the pool.
    pub(super) kept_connector: Option<HttpConnector>,
    pub(super) protocol: UpstreamProtocol,
    /// Each endpoint's `host:port` as a URI authority, parsed once (in `endpoints`' order; a socket address always parses).
    pub(super) authorities: Vec<Option<Authority>>,
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
    /// Idle pooled connections kept per endpoint (0: none, and no client
    /// connection keeps one of its own either).
    pub max_idle_per_endpoint: usize,
    /// TLS to the endpoints (whose files must load), or plain TCP.
    pub tls: Option<ClientTlsFiles>,
}

/// A cluster's connection pool: plain TCP, or TLS (`https`) when the cluster has `tls`.
#[derive(Clone, Debug)]
pub(super) enum Pool {
    Plain(Client<HttpConnector, RequestBody>),
    Tls(Client<HttpsConnector<HttpConnector>, RequestBody>),
}

impl Pool {
    pub(super) fn scheme(&self) -> Scheme {
        match self {
            Pool::Plain(_) => Scheme::HTTP,
            Pool::Tls(_) => Scheme::HTTPS,
        }
    }

    pub(super) fn request(
        &self,
        request: Request<RequestBody>,
    ) -> hyper_util::client::legacy::ResponseFuture {
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
        let kept_connector =
            (tls.is_none() && !http2 && max_idle_per_endpoint > 0).then(|| connector.clone());
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
        let authorities = endpoints
            .iter()
            .map(|e| Authority::try_from(e.address.to_string()).ok())
            .collect();
        Ok(Cluster {
            name: Arc::from(name),
            endpoints,
            authorities,
            balancer,
            hash_key_header,
            client,
            kept_connector,
            protocol,
        })
    }
}
