//! The authority the shares lane's holders call: the core's in-memory one, or (feature `redis`) the production Redis authority at virtual time.

use tollgate_core::Timestamp;
use tollgate_core::share::{Authority, SyncCall, SyncReply};

/// One fleet's shares authority as the platform scenario sees it.
///
/// A [`crate::StoreFactory`] makes one per run
/// ([`crate::StoreFactory::shares_authority`]); keys are the simulated keys'
/// numbers (the platform limit is [`u32::MAX`]).
pub trait SharesAuthority: Send {
    /// Answers `call` at virtual time `now`; `None` once the store has failed (see [`SharesAuthority::failure`]).
    fn sync(&mut self, now: Timestamp, call: &SyncCall<u32>) -> Option<SyncReply<u32>>;

    /// Forgets books nobody holds whose pool is full again (a store that expires them itself does nothing).
    fn forget_idle(&mut self, now: Timestamp) {
        let _ = now;
    }

    /// Script calls sent to a remote store so far (0 in memory).
    fn store_calls(&self) -> u64 {
        0
    }

    /// Why the store stopped answering, once it has.
    fn failure(&self) -> Option<&str> {
        None
    }
}

impl SharesAuthority for Authority<u32> {
    fn sync(&mut self, now: Timestamp, call: &SyncCall<u32>) -> Option<SyncReply<u32>> {
        Some(Authority::sync(self, now, call))
    }

    fn forget_idle(&mut self, now: Timestamp) {
        Authority::forget_idle(self, now);
    }
}
