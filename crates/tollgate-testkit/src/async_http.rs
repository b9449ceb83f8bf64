//! The tests' async HTTP client, on hyper-util's client: HTTP/1.1 or h2c, whole
//! responses as [`crate::http::Response`], bounded by [`IO_TIMEOUT`].

use std::net::SocketAddr;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub use crate::http::{IO_TIMEOUT, Response};

/// A pooling client for plain-text HTTP (`http://` URIs).
#[derive(Debug, Clone)]
pub struct AsyncClient(Client<HttpConnector, Full<Bytes>>);

impl AsyncClient {
    /// An HTTP/1.1 client.
    #[must_use]
    pub fn http1() -> AsyncClient {
        AsyncClient(Client::builder(TokioExecutor::new()).build_http())
    }

    /// An HTTP/2 client over clear text (h2c, prior knowledge), with Nagle's
    /// algorithm off so a request's HEADERS and DATA frames are not held
    /// back by a delayed ACK (40 ms a call on loopback).
    #[must_use]
    pub fn h2c() -> AsyncClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        AsyncClient(
            Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build(connector),
        )
    }

    /// Sends `request` and returns the response once its head arrived (within [`IO_TIMEOUT`]),
    /// its body unread.
    pub async fn start(&self, request: Request<Full<Bytes>>) -> http::Response<Incoming> {
        let uri = request.uri().clone();
        tokio::time::timeout(IO_TIMEOUT, self.0.request(request))
            .await
            .unwrap_or_else(|_| panic!("{uri} answered within {IO_TIMEOUT:?}"))
            .unwrap_or_else(|error| panic!("{uri} answered: {error}"))
    }

    /// Sends `method path` to `addr` with `headers` and `body`; the whole response, within [`IO_TIMEOUT`] per part.
    pub async fn send(
        &self,
        method: &str,
        addr: impl std::fmt::Display,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Response {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .expect("a valid request");
        let (parts, body) = self.start(request).await.into_parts();
        let body = tokio::time::timeout(IO_TIMEOUT, body.collect())
            .await
            .expect("the body in time")
            .expect("a body")
            .to_bytes();
        Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// `GET path` from `addr` with `headers`; the whole response.
    pub async fn get(&self, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
        self.send("GET", addr, path, headers, "").await
    }
}
