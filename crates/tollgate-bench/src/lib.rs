//! Benchmarks of Tollgate side by side with the `governor` crate; the code is in `benches/`.
//!
//! No crate depends on this one, and it must not know anything the public
//! APIs of `tollgate-core`, `tollgate-store` and `tollgate-lab` do not show:
//! a benchmark measures what a user of those crates gets.
//!
//! * `cargo bench -p tollgate-bench --bench decisions` — time per decision:
//!   one key (allow, deny, precise and coarse clocks), 1M distinct keys, a
//!   hot key on 2 threads (allow, deny), first-seen keys, and each algorithm.
//! * `cargo bench -p tollgate-bench --bench memory` — heap bytes per key at
//!   1M keys, counted by a wrapping allocator.
//!
//! `docs/benchmarks.md` holds the latest figures and how quiet the machine was.

#![forbid(unsafe_code)]
