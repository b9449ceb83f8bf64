//! [`RlsClient`]: one `ShouldRateLimit` call at a time over a tonic channel, with an optional deadline.
//!
//! Used by `tollgate check` and the proxy's global rate limit. The answer
//! is the whole wire response, including `request_headers_to_add` and
//! `raw_body`. A client may also call a service in this process
//! ([`InProcessService`], [`RlsClient::in_process`]): the same request and
//! answer, with no encoding and no network hop.

use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tollgate_tls::{ClientTlsStream, TlsConnector};
use tonic::codegen::http::Uri;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use super::codec::RlsCodec;
use super::convert::{engine_request, wire_request};
use super::model;
use super::wire::{RateLimitRequest, RateLimitResponse, SHOULD_RATE_LIMIT_PATH};

/// An answer of an [`InProcessService`], still to come.
pub type InProcessAnswer = Pin<Box<dyn Future<Output = Result<RateLimitResponse, Status>> + Send>>;

/// A rate limit service running in this process: `ShouldRateLimit` as a
/// function call on the model request (nothing encoded or converted on the
/// way in), with the request's metadata (a trace's `traceparent`).
pub trait InProcessService: Send + Sync + Debug {
    /// Answers one request as the gRPC service would.
    fn should_rate_limit(
        &self,
        request: model::RateLimitRequest,
        metadata: http::HeaderMap,
    ) -> InProcessAnswer;
}

/// Where a client's calls go.
#[derive(Clone, Debug)]
enum Transport {
    /// A gRPC channel.
    Channel(Channel),
    /// A service in this process.
    InProcess(Arc<dyn InProcessService>),
}

/// A client of Envoy's `RateLimitService`; cheap to clone (the channel is shared).
#[derive(Clone, Debug)]
pub struct RlsClient {
    transport: Transport,
    timeout: Option<Duration>,
}

impl RlsClient {
    /// A client calling on `channel`, with no deadline of its own.
    pub fn new(channel: Channel) -> Self {
        RlsClient {
            transport: Transport::Channel(channel),
            timeout: None,
        }
    }

    /// A client calling `service` in this process, with no deadline of its own.
    pub fn in_process(service: Arc<dyn InProcessService>) -> Self {
        RlsClient {
            transport: Transport::InProcess(service),
            timeout: None,
        }
    }

    /// True when the calls go to a service in this process.
    pub fn is_in_process(&self) -> bool {
        matches!(self.transport, Transport::InProcess(_))
    }

    /// A client for `uri` (`http://host:port`) whose channel connects on the
    /// first call (it needs a Tokio runtime then), with `TCP_NODELAY`.
    pub fn connect_lazy(uri: String) -> Result<Self, tonic::transport::Error> {
        let channel = Endpoint::from_shared(uri)?.tcp_nodelay(true).connect_lazy();
        Ok(RlsClient::new(channel))
    }

    /// A client for `uri` (`https://host:port`) over TLS with `tls` (which
    /// should offer ALPN `h2`), connecting on the first call; the TLS
    /// server name is the URI's host unless `tls` names one.
    pub fn connect_lazy_tls(
        uri: String,
        tls: TlsConnector,
    ) -> Result<Self, tonic::transport::Error> {
        let endpoint = Endpoint::from_shared(uri)?;
        Ok(RlsClient::new(
            endpoint.connect_with_connector_lazy(tls_connector(tls)),
        ))
    }

    /// This client with a deadline on every call (`None`: none).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The deadline of every call, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// [`RlsClient::should_rate_limit_with`] for a model request: a service
    /// in this process takes it as it is, a channel gets its wire form.
    pub async fn should_rate_limit_model(
        &self,
        request: model::RateLimitRequest,
        metadata: http::HeaderMap,
    ) -> Result<RateLimitResponse, Status> {
        match &self.transport {
            Transport::InProcess(service) => {
                let call = service.should_rate_limit(request, metadata);
                self.bounded(call).await
            }
            Transport::Channel(_) => {
                self.should_rate_limit_with(wire_request(&request), metadata)
                    .await
            }
        }
    }

    /// `call`, bounded by this client's deadline if it has one.
    async fn bounded(
        &self,
        call: impl Future<Output = Result<RateLimitResponse, Status>>,
    ) -> Result<RateLimitResponse, Status> {
        match self.timeout {
            Some(limit) => tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "no answer within {limit:?}"
                )))
            }),
            None => call.await,
        }
    }

    /// Sends one `ShouldRateLimit` call; past the deadline, `DEADLINE_EXCEEDED`.
    pub async fn should_rate_limit(
        &self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        self.should_rate_limit_with(request, http::HeaderMap::new())
            .await
    }

    /// [`RlsClient::should_rate_limit`] with `metadata` sent along (a trace's `traceparent`).
    pub async fn should_rate_limit_with(
        &self,
        request: RateLimitRequest,
        metadata: http::HeaderMap,
    ) -> Result<RateLimitResponse, Status> {
        self.bounded(self.call(request, metadata)).await
    }

    async fn call(
        &self,
        request: RateLimitRequest,
        metadata: http::HeaderMap,
    ) -> Result<RateLimitResponse, Status> {
        let channel = match &self.transport {
            Transport::Channel(channel) => channel.clone(),
            Transport::InProcess(service) => {
                return service
                    .should_rate_limit(engine_request(request), metadata)
                    .await;
            }
        };
        let mut client = tonic::client::Grpc::new(channel);
        client
            .ready()
            .await
            .map_err(|error| Status::unavailable(format!("the service is not ready: {error}")))?;
        let codec = RlsCodec::<RateLimitRequest, RateLimitResponse>::default();
        client
            .unary(
                Request::from_parts(
                    tonic::metadata::MetadataMap::from_headers(metadata),
                    tonic::Extensions::default(),
                    request,
                ),
                PathAndQuery::from_static(SHOULD_RATE_LIMIT_PATH),
                codec,
            )
            .await
            .map(Response::into_inner)
    }
}

/// A tonic connector that dials the URI's host and port (443 when none) and completes a TLS handshake with `tls`.
pub fn tls_connector(
    tls: TlsConnector,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<ClientTlsStream>,
    Error = io::Error,
    Future = impl Future<Output = io::Result<TokioIo<ClientTlsStream>>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |uri: Uri| {
        let tls = tls.clone();
        async move {
            let host = uri.host().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{uri} names no host"))
            })?;
            let port = uri.port_u16().unwrap_or(443);
            tls.connect_to(host, port).await.map(TokioIo::new)
        }
    })
}
