//! The quota service's claims board on Redis: each `tollgate serve` instance publishes, per shared rule counter, what each of its Envoys claims of the rate and reads what the other instances' Envoys claim, so that each Envoy takes its max-min fair share of the rate across the fleet.
//!
//! Two hashes per counter, a field per instance holding its claims and the
//! instant (Redis `TIME`) they lapse: `<prefix>tg{rlqs}v2:<counter>` holds
//! each of its Envoys' claims (`c1,c2,…`; one per Envoy reporting on the
//! counter, so at most its `--rlqs-max-streams`), `<prefix>tg{rlqs}:<counter>`
//! their total, the earlier release's board: an instance of that release
//! reads every other instance as one claimant of its total, and is heard
//! as one (so a rolling upgrade keeps a split; the earlier board can go
//! once no instance of that release is left). One script call
//! (`rlqs_claims.lua`) writes this instance's claims and reads the others'
//! for up to [`CLAIMS_PER_CALL`] counters, dropping lapsed claims as it
//! goes. Every key carries the hash tag `{rlqs}` (one cluster slot) and
//! expires with the last claim on it, so the board holds at most
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

/// The board of each Envoy's claim, per instance (`tg{rlqs}v2:<counter>`).
const ENVOYS_BOARD: &[u8] = b"tg{rlqs}v2:";

/// The board of each instance's total claim (`tg{rlqs}:<counter>`), the
/// only one the earlier release knows: still written and read, so that
/// instances of both releases split a counter during a rolling upgrade.
const TOTALS_BOARD: &[u8] = b"tg{rlqs}:";

static CLAIMS_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("rlqs_claims.lua")));

impl RedisStore {
    /// Publishes the claims of `instance`'s Envoys on each counter of
    /// `claims` (lasting `ttl`) and returns, in the same order, the live
    /// claims of the other instances' Envoys on it (an instance of the
    /// earlier release, which publishes only its total, as one claim).
    pub async fn exchange_claims(
        &self,
        instance: u64,
        ttl: Duration,
        claims: &[(Vec<u8>, Vec<u64>)],
    ) -> Result<Vec<Vec<u64>>, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut heard = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(CLAIMS_PER_CALL) {
            let mut invocation = CLAIMS_SCRIPT.prepare_invoke();
            for (counter, _) in chunk {
                for board in [ENVOYS_BOARD, TOTALS_BOARD] {
                    let mut key = self.key_prefix().to_vec();
                    key.extend_from_slice(board);
                    key.extend_from_slice(counter);
                    invocation.key(key);
                }
            }
            invocation.arg(instance).arg(ttl_ms);
            for (_, envoys) in chunk {
                let listed: Vec<String> = envoys.iter().map(u64::to_string).collect();
                let total = envoys.iter().fold(0u64, |sum, &c| sum.saturating_add(c));
                invocation.arg(listed.join(",")).arg(total);
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
