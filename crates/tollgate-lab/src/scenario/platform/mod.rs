//! The platform scenario: many keys, many instances, a per-key limit and a platform-wide one, every mode on one trace in virtual time.
//!
//! The public-API platform of issue 23 in miniature: arrivals at a rate
//! (steady or Poisson) over `keys` keys (uniform or Zipf), each to one of
//! the instances live at that moment (a schedule scales them out and in),
//! every request checked against its key's token bucket and the platform's
//! (admitted only if both admit). Each mode is a lane fed the same trace:
//!
//! * **exact** — one store call per decision carrying both descriptors; it
//!   is also the reference the others are judged against;
//! * **leased** — the quota leases of `tollgate serve --lease-period`;
//! * **shares** — the share protocol ([`tollgate_core::share`]) against an
//!   in-memory authority, or the production one on Redis
//!   ([`PlatformScenario::run_on`]), calls and replies each taking half a
//!   round trip;
//! * **local** — each instance applies both limits on its own.
//!
//! Per lane the report counts store calls (a batched call is one) and the
//! keys they carried, feeds every admitted request to exact buckets of its
//! key and of the platform at its decision time (what they refuse is
//! over-admission), compares what it admitted with the exact lane
//! (under-admission) and records how long decisions waited on the store.

mod authority;
mod exact;
mod lane;
mod leased;
mod model;
mod report;
mod shares;
mod summary;
#[cfg(test)]
mod tests;
mod trace;

pub use authority::SharesAuthority;
pub use model::{
    KeyDistribution, MAX_PLATFORM_INSTANCES, MAX_PLATFORM_KEYS, PlatformMode, PlatformReport,
    PlatformScenario,
};
pub use report::PlatformLaneReport;
pub use summary::{IN_MEMORY, PlatformSummary, parse_scale_step};
