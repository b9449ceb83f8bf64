//! Quota leases in Redis: one atomic call of `lease.lua` grants or takes back units of one counter's budget.
//!
//! The arithmetic and its proof are in [`tollgate_core::lease`]; the
//! function keeps the counter in the very value `check.lua` decides, so
//! instances in exact mode and in leased mode share one budget, and each
//! call touches one key (one cluster slot).

use std::time::Duration;

use tollgate_core::lease::{Grant, Leasing, Return};
use tollgate_store::{Counter, StoreError};

use crate::RedisStore;
use crate::library::Entry;
use crate::script_params::ScriptParams;

impl RedisStore {
    /// Takes up to `want` units of `counter`'s budget, at most `1/divisor` of what remains.
    ///
    /// A grant of 0 units (near exhaustion, or an algorithm that is not
    /// leased) writes nothing. The counter's `hits` and `give_back` are ignored.
    pub async fn grant_lease(
        &self,
        counter: &Counter<'_>,
        want: u64,
        divisor: u64,
    ) -> Result<Grant, StoreError> {
        if Leasing::of(&counter.algorithm).is_none() {
            return Ok(Grant {
                units: 0,
                lasts: Duration::ZERO,
                remaining: 0,
                token: (0, 0),
            });
        }
        let reply = self
            .run_lease(counter, "g", [want, divisor.max(1), 0])
            .await?;
        Ok(Grant {
            units: reply[0],
            lasts: Duration::from_nanos(reply[1]),
            remaining: reply[2],
            token: (reply[3], reply[4]),
        })
    }

    /// Gives back the unused units of a lease of `counter`; returns how many the store took back.
    ///
    /// The store takes them back only when that cannot let a burst through
    /// (see `lease.lua`); otherwise they stay spent and run out with time.
    pub async fn return_lease(
        &self,
        counter: &Counter<'_>,
        lease: Return,
    ) -> Result<u64, StoreError> {
        if Leasing::of(&counter.algorithm).is_none() || lease.units == 0 {
            return Ok(0);
        }
        let reply = self
            .run_lease(counter, "r", [lease.units, lease.token.0, lease.token.1])
            .await?;
        Ok(reply[0])
    }

    async fn run_lease(
        &self,
        counter: &Counter<'_>,
        op: &str,
        args: [u64; 3],
    ) -> Result<[u64; 5], StoreError> {
        if crate::key::as_upstream(counter.key).is_some() {
            return Err(StoreError::Unsupported(
                "an envoyproxy/ratelimit key is counted exactly, never leased".to_owned(),
            ));
        }
        let params = ScriptParams::of(&counter.algorithm)?;
        let mut cmd = self.calls.command(Entry::Lease, self.encoding, 1);
        cmd.arg(self.key_of(counter))
            .arg(op)
            .arg(params.kind)
            .arg(params.p1)
            .arg(params.p2)
            .arg(args[0])
            .arg(args[1])
            .arg(args[2]);
        let reply: Vec<i64> = self.invoke(Entry::Lease, &cmd).await?;
        let mut out = [0u64; 5];
        if reply.len() != out.len() {
            return Err(StoreError::Unavailable(format!(
                "the lease script answered {} values, not 5",
                reply.len()
            )));
        }
        for (slot, value) in out.iter_mut().zip(reply) {
            *slot = u64::try_from(value).unwrap_or(0);
        }
        Ok(out)
    }
}
