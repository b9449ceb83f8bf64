//! A fleet's overrides in Redis: one versioned set of documents that every instance polls and applies.

use std::sync::Arc;

use tollgate_redis::{DocumentWrite, RedisStore};
use tollgate_store::StoreError;

use crate::store::RemoteStore;

/// The name of the document set the overrides are kept in (`tg{overrides}`).
pub const DOCUMENT_SET: &str = "overrides";

/// The overrides' set in the shared store.
#[derive(Clone, Debug)]
pub struct Fleet {
    remote: Arc<RemoteStore>,
}

impl Fleet {
    /// The set in `remote`'s Redis.
    pub fn new(remote: Arc<RemoteStore>) -> Self {
        Fleet { remote }
    }

    /// The Redis store, once connected.
    fn redis(&self) -> Result<Arc<RedisStore>, StoreError> {
        self.remote
            .redis()
            .ok_or_else(|| StoreError::Unavailable("Redis is not connected yet".to_owned()))
    }

    /// Sets the override `id` to `value` unless it is new and `max` are held.
    pub async fn put(
        &self,
        id: &str,
        value: &str,
        max: usize,
    ) -> Result<DocumentWrite, StoreError> {
        self.redis()?
            .put_document(DOCUMENT_SET, id, value, max)
            .await
    }

    /// Removes the override `id`; whether it was there.
    pub async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        self.redis()?.delete_document(DOCUMENT_SET, id).await
    }

    /// The set's version.
    pub async fn version(&self) -> Result<u64, StoreError> {
        self.redis()?.document_version(DOCUMENT_SET).await
    }

    /// The version and every override as `(id, value)`.
    pub async fn read(&self) -> Result<(u64, Vec<(String, String)>), StoreError> {
        self.redis()?.read_documents(DOCUMENT_SET).await
    }
}
