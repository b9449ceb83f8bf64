//! The quota service's claims board on Redis: each `tollgate serve` instance publishes, per shared rule counter, what its Envoys claim of the rate and reads what the other instances claim, so that each takes its max-min fair part of the rate across the fleet.
//!
//! One hash per counter, `<prefix>tg{rlqs}:<counter>`, a field per
//! instance holding its claim and the instant (Redis `TIME`) it lapses; one
//! script call (`rlqs_claims.lua`) writes this instance's claims and reads
//! the others' for up to [`CLAIMS_PER_CALL`] counters, dropping lapsed
//! claims as it goes. Every key carries the hash tag `{rlqs}` (one cluster
//! slot) and expires with the last claim on it, so the board holds at most
//! the counters the live instances share. The board only informs the
//! split: every unit an Envoy can spend is still taken from the rule's
//! counter first, so a stale or lost board costs fairness, never the limit.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use tollgate_store::StoreError;

use crate::RedisStore;

/// Counters per script call.
pub const CLAIMS_PER_CALL: usize = 256;

static CLAIMS_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("rlqs_claims.lua")));

impl RedisStore {
    /// Publishes `instance`'s claim on each counter of `claims` (lasting
    /// `ttl`) and returns, in the same order, the live claims of the other
    /// instances on it.
    pub async fn exchange_claims(
        &self,
        instance: u64,
        ttl: Duration,
        claims: &[(Vec<u8>, u64)],
    ) -> Result<Vec<Vec<u64>>, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut heard = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(CLAIMS_PER_CALL) {
            let mut invocation = CLAIMS_SCRIPT.prepare_invoke();
            for (counter, _) in chunk {
                let mut key = self.key_prefix().to_vec();
                key.extend_from_slice(b"tg{rlqs}:");
                key.extend_from_slice(counter);
                invocation.key(key);
            }
            invocation.arg(instance).arg(ttl_ms);
            for (_, claim) in chunk {
                invocation.arg(*claim);
            }
            let reply: Vec<Vec<u64>> = self.invoke_as(&invocation).await?;
            if reply.len() != chunk.len() {
                return Err(StoreError::Unavailable(
                    "rlqs claims: the script answered a malformed reply".into(),
                ));
            }
            heard.extend(reply);
        }
        Ok(heard)
    }
}
