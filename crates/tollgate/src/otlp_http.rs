//! The HTTP client OTLP/HTTP span batches go out on: hyper's, run on the process's Tokio runtime for the exporter's own thread.
//!
//! The batch exporter sends from a thread of its own, outside any Tokio
//! runtime, where hyper cannot run. [`OtlpHttpClient`] keeps a handle to
//! the runtime that was current when it was made and runs each request
//! there, awaiting only its result; each request is bounded by a timeout
//! and its response body by [`MAX_RESPONSE_BYTES`].

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError};

/// The largest collector response read.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// hyper's client over plain HTTP, run on the runtime current at [`OtlpHttpClient::new`].
#[derive(Debug, Clone)]
pub struct OtlpHttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl OtlpHttpClient {
    /// A client whose requests each take at most `timeout`; call it inside a Tokio runtime.
    pub fn new(timeout: Duration) -> Self {
        OtlpHttpClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
            runtime: tokio::runtime::Handle::current(),
            timeout,
        }
    }
}

#[tonic::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let timeout = self.timeout;
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, Full::new(body));
        self.runtime
            .spawn(async move {
                let response = tokio::time::timeout(timeout, client.request(request)).await??;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, MAX_RESPONSE_BYTES)
                    .collect()
                    .await?
                    .to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            })
            .await?
    }
}
