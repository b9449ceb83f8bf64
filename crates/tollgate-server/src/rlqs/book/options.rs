//! The quota service's bounds (its flags and their defaults) and the counts it exposes on `/metrics`.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The default `--rlqs-max-buckets`: paying one tick for this many
/// buckets, each on its own counter, takes about a tenth of one core (about
/// 10 µs a bucket in memory; `benches/rlqs_tick.rs`, docs/quota.md).
pub const DEFAULT_MAX_BUCKETS: usize = 8192;

/// The default `--rlqs-max-stream-buckets`: half the total, so that one
/// Envoy cannot take every bucket from the others.
pub const DEFAULT_MAX_STREAM_BUCKETS: usize = 4096;

/// The default `--rlqs-assignment-ttl`: three payment rounds, renewed at
/// every round, so one round may be missed before an assignment lapses,
/// and a departed Envoy's share is held at most 5 s after its death (its
/// last renewal, this, and a round).
pub const DEFAULT_ASSIGNMENT_TTL: Duration = Duration::from_secs(3);

/// The bounds and settings of the quota service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlqsOptions {
    /// Streams open at once (`--rlqs-max-streams`); past it a stream is refused with RESOURCE_EXHAUSTED.
    pub max_streams: usize,
    /// Buckets tracked over all streams (`--rlqs-max-buckets`); a report past it ends its stream with RESOURCE_EXHAUSTED.
    pub max_buckets: usize,
    /// Buckets tracked for one stream (`--rlqs-max-stream-buckets`); a report past it ends its stream with RESOURCE_EXHAUSTED.
    pub max_stream_buckets: usize,
    /// Entries in one bucket id (the RLS `--max-descriptor-entries`).
    pub max_entries: usize,
    /// How long an assignment holds without a renewal (`--rlqs-assignment-ttl`):
    /// every payment round renews it before it lapses; an ended stream's
    /// shares stay reserved that long after its last renewal, and a round.
    pub assignment_ttl: Duration,
}

impl Default for RlqsOptions {
    fn default() -> Self {
        RlqsOptions {
            max_streams: 1024,
            max_buckets: DEFAULT_MAX_BUCKETS,
            max_stream_buckets: DEFAULT_MAX_STREAM_BUCKETS,
            max_entries: tollgate_protocol::rls::RequestCaps::default().max_descriptor_entries,
            assignment_ttl: DEFAULT_ASSIGNMENT_TTL,
        }
    }
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub struct RlqsStats {
    /// Streams open now.
    pub streams: AtomicU64,
    /// Buckets tracked now.
    pub buckets: AtomicU64,
    /// The most buckets one stream tracks now.
    pub stream_buckets: AtomicU64,
    /// Shared rule counters in the book now: each is paid for every tick.
    pub counters: AtomicU64,
    /// Assignments sent (answers to reports and pushes).
    pub assignments: AtomicU64,
    /// Requests the Envoys reported allowed.
    pub reported_allowed: AtomicU64,
    /// Requests the Envoys reported denied.
    pub reported_denied: AtomicU64,
    /// Units taken from the shared budget to pay for the shares in force.
    pub units_taken: AtomicU64,
    /// Shares cut because the shared budget had less than they cost.
    pub shares_cut: AtomicU64,
}
