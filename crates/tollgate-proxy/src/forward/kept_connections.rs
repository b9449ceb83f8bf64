//! [`KeptConnections`]: the upstream HTTP/1.1 connections one client connection keeps, at most one per endpoint, so its keep-alive requests skip the shared pool.
//!
//! A client connection speaking HTTP/1 sends one request at a time, so one
//! upstream connection per endpoint it uses carries all of its requests
//! there: no pool key is hashed and no checkout runs per request. The
//! connection is taken out of its slot while a request is sent on it and put
//! back once the response's head has come (its body still streaming: the
//! next request waits until hyper has finished with it). Dropping the
//! [`KeptConnections`] (the client connection closed, or idled out) drops
//! every kept sender, and hyper closes each upstream connection once it is
//! idle.
//!
//! A connection is kept from the client connection's second request on,
//! and only while the client means to keep its connection open (HTTP/1.1
//! without `Connection: close`): a client that sends one request per
//! connection goes through the cluster's pool, as before, and does not
//! open (and leave in `TIME_WAIT`) an upstream connection per request.
//!
//! A client connection keeps at most [`KEPT_PER_CLIENT_CONNECTION`]
//! upstream connections: a client whose requests are balanced over more
//! endpoints than that sends to the others through the cluster's pool, so
//! the upstream connections kept stay within that many times the
//! listeners' `max_connections`.
//!
//! A kept connection the upstream has closed while idle is noticed when it
//! is taken (it is not ready) and replaced by a fresh one; one that closes
//! just as a request is handed to it gives that request back unsent, and the
//! request goes once more, on a fresh connection. A request of which any
//! part was written is never sent again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use parking_lot::Mutex;
use tollgate_runtime::error_chain;
use tower::ServiceExt;

use super::error::UpstreamError;
use super::request_body::RequestBody;

/// The most upstream connections one client connection keeps (to as many endpoints).
pub const KEPT_PER_CLIENT_CONNECTION: usize = 4;

/// One client connection's upstream HTTP/1.1 connections: one sender per endpoint address, while it is not in use.
#[derive(Default)]
pub struct KeptConnections {
    idle: Mutex<Vec<(SocketAddr, SendRequest<RequestBody>)>>,
    /// Requests forwarded for this client connection so far.
    forwarded: AtomicU64,
}

impl std::fmt::Debug for KeptConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptConnections")
            .field("idle", &self.idle.lock().len())
            .finish()
    }
}

impl KeptConnections {
    /// No connection kept yet.
    pub fn new() -> Self {
        KeptConnections::default()
    }

    /// Counts a request forwarded for this client connection, and says
    /// whether it goes on a kept connection to `endpoint`: not the
    /// connection's first request, nor one after which the client means to
    /// close (`keeps_alive` false), and one is kept there or fewer than
    /// [`KEPT_PER_CLIENT_CONNECTION`] are. (A client connection sends one
    /// request at a time, so none is out in use when this is asked.)
    pub(super) fn may_keep(&self, endpoint: SocketAddr, keeps_alive: bool) -> bool {
        let earlier = self.forwarded.fetch_add(1, Ordering::Relaxed);
        if earlier == 0 || !keeps_alive {
            return false;
        }
        let idle = self.idle.lock();
        idle.len() < KEPT_PER_CLIENT_CONNECTION
            || idle.iter().any(|(address, _)| *address == endpoint)
    }

    /// Takes the connection kept to `endpoint`, if there is one.
    fn take(&self, endpoint: SocketAddr) -> Option<SendRequest<RequestBody>> {
        let mut idle = self.idle.lock();
        let at = idle.iter().position(|(address, _)| *address == endpoint)?;
        Some(idle.swap_remove(at).1)
    }

    /// Keeps `sender` to `endpoint`, unless one is kept there already or
    /// [`KEPT_PER_CLIENT_CONNECTION`] are (then `sender` is dropped).
    fn keep(&self, endpoint: SocketAddr, sender: SendRequest<RequestBody>) {
        let mut idle = self.idle.lock();
        if idle.len() < KEPT_PER_CLIENT_CONNECTION
            && !idle.iter().any(|(address, _)| *address == endpoint)
        {
            idle.push((endpoint, sender));
        }
    }

    /// Sends `request` (its URI in origin form, its `Host` set) to `endpoint` on the connection kept there, or on a new one made with `connector`.
    ///
    /// A kept connection that gives the request back unsent (the upstream
    /// closed it) is dropped and the request goes once more, on a new
    /// connection. The connection is kept again once the response's head
    /// has come.
    pub(super) async fn send(
        &self,
        endpoint: SocketAddr,
        connector: &HttpConnector,
        request: Request<RequestBody>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let mut request = request;
        // A kept one the upstream closed while it was idle is not ready: dropped.
        if let Some(mut kept) = self.take(endpoint)
            && kept.ready().await.is_ok()
        {
            match kept.try_send_request(request).await {
                Ok(response) => {
                    self.keep(endpoint, kept);
                    return Ok(response);
                }
                Err(mut refused) => match refused.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(UpstreamError::Reset(refused.into_error().to_string())),
                },
            }
        }
        let mut fresh = connect(endpoint, connector).await?;
        match fresh.try_send_request(request).await {
            Ok(response) => {
                self.keep(endpoint, fresh);
                Ok(response)
            }
            Err(refused) => Err(UpstreamError::Reset(refused.into_error().to_string())),
        }
    }
}

/// A new HTTP/1.1 connection to `endpoint` (the cluster's connect timeout and `TCP_NODELAY`, from `connector`), its task spawned.
async fn connect(
    endpoint: SocketAddr,
    connector: &HttpConnector,
) -> Result<SendRequest<RequestBody>, UpstreamError> {
    let uri = Uri::builder()
        .scheme("http")
        .authority(endpoint.to_string())
        .path_and_query("/")
        .build()
        .map_err(|e| UpstreamError::Connect(e.to_string()))?;
    // The connector's error says `tcp connect error` alone; its source says why.
    let io = connector
        .clone()
        .oneshot(uri)
        .await
        .map_err(|e| UpstreamError::Connect(error_chain(&e)))?;
    let (sender, connection) = http1::handshake(io)
        .await
        .map_err(|e| UpstreamError::Connect(error_chain(&e)))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream connection ended");
        }
    });
    Ok(sender)
}
