//! The balancer as a service: pick an endpoint, call the inner service with it, report the outcome.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::future::ResponseFuture;
use crate::cluster::{Cluster, PickError};

/// Extracts a request's ring-hash key.
pub(crate) type HashKeyFn<B> = dyn Fn(&Request<B>) -> Option<Vec<u8>> + Send + Sync;

/// The endpoint picked for a request, put in its extensions for the inner service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedEndpoint {
    /// The endpoint's `host:port`.
    pub address: String,
    /// Its position in the cluster's configuration.
    pub index: usize,
}

/// A service that picks an endpoint per request and reports how it answered.
pub struct Balance<S, B> {
    inner: S,
    cluster: Cluster,
    hash_key: Option<Arc<HashKeyFn<B>>>,
}

impl<S, B> Balance<S, B> {
    pub(crate) fn new(inner: S, cluster: Cluster, hash_key: Option<Arc<HashKeyFn<B>>>) -> Self {
        Balance {
            inner,
            cluster,
            hash_key,
        }
    }
}

impl<S: Clone, B> Clone for Balance<S, B> {
    fn clone(&self) -> Self {
        Balance {
            inner: self.inner.clone(),
            cluster: self.cluster.clone(),
            hash_key: self.hash_key.clone(),
        }
    }
}

impl<S, B> std::fmt::Debug for Balance<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balance")
            .field("cluster", &self.cluster.name())
            .finish()
    }
}

impl<S, B, ResBody> Service<Request<B>> for Balance<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    S::Error: From<PickError>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let key = self.hash_key.as_ref().and_then(|f| f(&request));
        match self.cluster.pick(key.as_deref()) {
            Ok(picked) => {
                request.extensions_mut().insert(SelectedEndpoint {
                    address: picked.address().to_owned(),
                    index: picked.index(),
                });
                ResponseFuture::called(self.inner.call(request), picked)
            }
            Err(error) => ResponseFuture::refused(error),
        }
    }
}
