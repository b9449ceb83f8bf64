//! A versioned set of named documents in Redis (the overrides of a fleet): one hash and a version counter, changed and read atomically.
//!
//! The hash `tg{NAME}` holds the documents by id, and `tg{NAME}v` counts
//! changes: every write that changes the hash increments it in the same
//! script, so an instance that polls the version (one `GET`) reads the
//! hash again only when something changed, and reads both at once. Both
//! keys share a hash tag, so they sit on one slot of a cluster.

use redis::Script;
use tollgate_store::StoreError;

use crate::{Connection, RedisStore};

/// What a write of a document did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentWrite {
    /// Written; the set's version is now this.
    Written(u64),
    /// Refused: the document is new and the set holds the most it may.
    Full,
}

/// Sets a document unless that would take the set past its bound; the new version.
const PUT: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[2])
";

/// Removes a document; 0 when there was none, else the new version.
const DELETE: &str = r"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
return redis.call('INCR', KEYS[2])
";

/// The version and every document, read at one instant.
const READ: &str = r"
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}
";

impl RedisStore {
    /// The keys of the set `name`: its hash and its version counter.
    fn document_keys(&self, name: &str) -> (Vec<u8>, Vec<u8>) {
        let mut hash = self.key_prefix.to_vec();
        hash.extend_from_slice(format!("tg{{{name}}}").as_bytes());
        let mut version = hash.clone();
        version.push(b'v');
        (hash, version)
    }

    /// Runs `script` on the set `name` with `args`.
    async fn document_script<T: redis::FromRedisValue>(
        &self,
        name: &str,
        script: &str,
        args: &[&[u8]],
    ) -> Result<T, StoreError> {
        let (hash, version) = self.document_keys(name);
        let script = Script::new(script);
        let mut invocation = script.key(hash);
        invocation.key(version);
        for arg in args {
            invocation.arg(*arg);
        }
        let call = async {
            match &self.connection {
                Connection::Single(c) => invocation.invoke_async(&mut c.clone()).await,
                Connection::Cluster(c) => invocation.invoke_async(&mut c.clone()).await,
            }
        };
        self.within(call).await
    }

    /// Sets document `id` of the set `name` to `value`, unless it is new and the set holds `max` already.
    pub async fn put_document(
        &self,
        name: &str,
        id: &str,
        value: &str,
        max: usize,
    ) -> Result<DocumentWrite, StoreError> {
        let max = max.to_string();
        let reply: i64 = self
            .document_script(
                name,
                PUT,
                &[id.as_bytes(), value.as_bytes(), max.as_bytes()],
            )
            .await?;
        Ok(u64::try_from(reply).map_or(DocumentWrite::Full, DocumentWrite::Written))
    }

    /// Removes document `id` of the set `name`; whether it was there.
    pub async fn delete_document(&self, name: &str, id: &str) -> Result<bool, StoreError> {
        let reply: i64 = self.document_script(name, DELETE, &[id.as_bytes()]).await?;
        Ok(reply != 0)
    }

    /// The version of the set `name` (0 before its first write).
    pub async fn document_version(&self, name: &str) -> Result<u64, StoreError> {
        let (_, version) = self.document_keys(name);
        let mut cmd = redis::cmd("GET");
        cmd.arg(version);
        let call = async {
            match &self.connection {
                Connection::Single(c) => cmd.query_async::<Option<u64>>(&mut c.clone()).await,
                Connection::Cluster(c) => cmd.query_async::<Option<u64>>(&mut c.clone()).await,
            }
        };
        Ok(self.within(call).await?.unwrap_or(0))
    }

    /// The version of the set `name` and its documents as `(id, value)`, read at one instant.
    pub async fn read_documents(
        &self,
        name: &str,
    ) -> Result<(u64, Vec<(String, String)>), StoreError> {
        let (version, documents): (u64, Vec<(String, String)>) =
            self.document_script(name, READ, &[]).await?;
        Ok((version, documents))
    }
}
