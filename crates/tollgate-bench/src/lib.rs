//! Benchmarks of Tollgate side by side with the `governor` crate; the code is in `benches/`.
//!
//! * `cargo bench -p tollgate-bench --bench decisions` — time per decision:
//!   one key (allow, deny, precise and coarse clocks), 1M distinct keys, a
//!   hot key on 2 threads (allow, deny), first-seen keys, and each algorithm.
//! * `cargo bench -p tollgate-bench --bench memory` — heap bytes per key at
//!   1M keys, counted by a wrapping allocator.
//!
//! `docs/benchmarks.md` holds the latest figures and how quiet the machine was.

#![forbid(unsafe_code)]
