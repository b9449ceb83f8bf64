//! `tollgate bench`: load generators for a rate limit service (`rls`, RLS v3
//! over gRPC) and for an HTTP server or proxy (`http`, HTTP/1.1 keep-alive).
//!
//! Both send requests for a bounded time and report the answers by kind, the
//! request rate and the latency distribution (an HDR histogram,
//! microseconds). They share the load loop, the histogram and the report.
//!
//! * **Closed loop** (default): `-c` workers spread round-robin over
//!   `--connections` connections, each sending its next request as soon as
//!   the previous one returns. Latency is from send to answer.
//! * **Open loop** (`--rate R`): request `i` is scheduled at `start + i / R`;
//!   at most `-c` requests are in flight, and a request sent late because all
//!   were busy still has its latency measured from its *scheduled* time, so a
//!   slow server cannot hide behind a slowed-down client (no coordinated
//!   omission). The schedule's resolution is the runtime's timer (about 1 ms),
//!   and that lateness counts in the latency, so prefer the closed loop for
//!   sub-millisecond percentiles.
//! * **Window.** Requests that start (closed loop) or are scheduled (open
//!   loop) during the warm-up are not counted; requests that start in the
//!   measured window are all awaited (each for at most `--timeout`) and
//!   counted, and the rate is divided by the time from the window's start
//!   until the last of them returned.
//! * **Latency** is recorded for answered requests, not for errors, whose
//!   fast failures would flatter the percentiles.
//! * **`rls` keys.** `{k}` in a descriptor value is replaced, per request, by
//!   a key index drawn uniformly from `0..keys` by a seeded pseudo-random
//!   generator (one per worker, seeded from `--seed` and the worker's
//!   number), so a run is reproducible in which keys it asks for; `--keys 1`
//!   is one hot key.
//!
//! Errors never stop a run; failing to connect at the start does (exit 1).
//!
//! The pieces: `command` (the arguments and the dispatch), `load` (the
//! load loop and its open-loop pacing), `tally` (what each worker counts),
//! `report` (the one report writer, text or JSON), `rls` with its
//! descriptor `template`s and its gRPC calls made straight on `h2` (`grpc`),
//! and `http`.

mod command;
mod grpc;
mod http;
mod load;
mod report;
mod rls;
mod tally;
mod template;

pub use command::{BenchArgs, run};
