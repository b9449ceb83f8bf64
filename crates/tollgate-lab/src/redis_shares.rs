//! The platform scenario's shares authority on a real Redis: the production scripts of `tollgate serve --shares`, at virtual time.
//!
//! Each holder call of the shares lane goes to
//! [`RedisAuthority::sync_at`] with the call's virtual arrival time
//! supplied instead of Redis `TIME` (and [`LAB_KEY_TTL`] as every book's
//! real-time TTL), under the run's own key prefix; a key's number is its
//! decimal text. The reply comes back keyed by number again. A failed call
//! ends the run: its figures would mean nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::runtime::{Handle, Runtime};
use tollgate_core::Timestamp;
use tollgate_core::share::{KeyAnswer, KeyReport, SyncCall, SyncReply};
use tollgate_redis::{RedisAuthority, RedisStore, SuppliedTime};

use crate::SharesAuthority;
use crate::redis_store::{LAB_KEY_TTL, delete_keys};

/// A platform run's shares authority in Redis.
pub(crate) struct RedisSharesAuthority {
    pub(crate) authority: RedisAuthority,
    /// The store under the run's prefix (its keys are deleted on drop).
    pub(crate) store: RedisStore,
    pub(crate) handle: Handle,
    /// The factory's own current-thread runtime, which each call drives.
    pub(crate) runtime: Option<Arc<Runtime>>,
    pub(crate) failure: Option<String>,
}

impl SharesAuthority for RedisSharesAuthority {
    fn sync(&mut self, now: Timestamp, call: &SyncCall<u32>) -> Option<SyncReply<u32>> {
        if self.failure.is_some() {
            return None;
        }
        let call = SyncCall {
            holder: call.holder,
            incarnation: call.incarnation,
            seq: call.seq,
            registering: call.registering,
            leaving: call.leaving,
            reports: call
                .reports
                .iter()
                .map(|r| KeyReport {
                    key: r.key.to_string().into_bytes(),
                    limit: r.limit,
                    in_force: r.in_force,
                    returned: r.returned,
                    demand: r.demand,
                    release: r.release,
                })
                .collect(),
        };
        let time = SuppliedTime {
            at: now,
            key_ttl: LAB_KEY_TTL,
        };
        let sync = self.authority.sync_at(&call, time);
        let answer = match &self.runtime {
            Some(runtime) => runtime.block_on(sync),
            None => self.handle.block_on(sync),
        };
        let reply = match answer {
            Ok(reply) => reply,
            Err(e) => {
                self.failure = Some(format!(
                    "the shares authority on Redis at {} failed: {e}",
                    self.store.target().redacted()
                ));
                return None;
            }
        };
        let mut answers = Vec::with_capacity(reply.answers.len());
        for a in reply.answers {
            let Some(key) = std::str::from_utf8(&a.key)
                .ok()
                .and_then(|k| k.parse().ok())
            else {
                self.failure = Some("the shares authority on Redis answered a key that is not a simulated key's number".into());
                return None;
            };
            answers.push(KeyAnswer {
                key,
                booked: a.booked,
                target: a.target,
                tokens: a.tokens,
                spare: a.spare,
            });
        }
        Some(SyncReply {
            holder: reply.holder,
            incarnation: reply.incarnation,
            seq: reply.seq,
            accepted: reply.accepted,
            lapsed: reply.lapsed,
            starter: reply.starter,
            answers,
        })
    }

    fn store_calls(&self) -> u64 {
        self.authority.stats().redis_calls.load(Ordering::Relaxed)
    }

    fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}

impl Drop for RedisSharesAuthority {
    fn drop(&mut self) {
        delete_keys(&self.store, &self.handle, self.runtime.as_deref());
    }
}
