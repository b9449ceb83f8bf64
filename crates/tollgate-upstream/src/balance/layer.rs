//! The layer that sends requests to the endpoints of one cluster.

use std::sync::Arc;

use tower::Layer;

use super::service::{Balance, HashKeyFn};
use crate::cluster::Cluster;

/// Sends requests to the endpoints of one cluster.
pub struct BalanceLayer<B> {
    cluster: Cluster,
    hash_key: Option<Arc<HashKeyFn<B>>>,
}

impl<B> BalanceLayer<B> {
    /// Balances over `cluster` without a hash key (ring hash then picks at random).
    pub fn new(cluster: Cluster) -> Self {
        BalanceLayer {
            cluster,
            hash_key: None,
        }
    }

    /// Takes each request's ring-hash key from `hash_key` (a header's value, the client address).
    pub fn hash_key(
        mut self,
        hash_key: impl Fn(&http::Request<B>) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        self.hash_key = Some(Arc::new(hash_key));
        self
    }
}

impl<B> Clone for BalanceLayer<B> {
    fn clone(&self) -> Self {
        BalanceLayer {
            cluster: self.cluster.clone(),
            hash_key: self.hash_key.clone(),
        }
    }
}

impl<B> std::fmt::Debug for BalanceLayer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BalanceLayer")
            .field("cluster", &self.cluster.name())
            .field("hash_key", &self.hash_key.is_some())
            .finish()
    }
}

impl<S, B> Layer<S> for BalanceLayer<B> {
    type Service = Balance<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        Balance::new(inner, self.cluster.clone(), self.hash_key.clone())
    }
}
