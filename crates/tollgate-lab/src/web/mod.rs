//! The web lab: a page served from the binary and runs streamed to it over Server-Sent Events.
//!
//! * `GET /` (and `/lab.js`, `/platform.js`, `/lab.css`): the page, embedded in the binary (`assets`).
//! * `GET /api/fields`: every parameter's range and default, for the page's inputs (`fields`, from `params`).
//! * `GET /api/expect?…`: the expectation for a run's parameters, or 400 naming the bad field (`plan`).
//! * `GET /api/run?…`: the run itself as an SSE stream: a `start` event, one
//!   `tick` event per tick of virtual time, and an `end` event with the totals.
//!   A browser that reads slowly misses ticks (each carries running totals,
//!   so nothing is lost but detail); a browser that goes away stops the run (`stream`).
//! * `GET /api/platform?…`: the platform scenario of `tollgate simulate --modes`
//!   (many keys, many instances, every mode a lane), its summary as JSON (`platform`).
//! * `GET /api/summary?…`: the same run's totals without streaming (`summary`).
//! * `POST /api/replays`: upload a CSV of timestamps; answers its id for `traffic=replay&replay=ID` (`replay_upload`).
//! * `GET /api/status`: runs in progress, started, and ticks skipped, for tests and operators (`counters`).
//!
//! [`Lab`] (`lab`) is the state every route shares; `routes` wires the routes
//! and [`serve`]s them; `query` reads a run's query and picks its store;
//! `reply` writes the JSON answers.

mod assets;
mod counters;
mod fields;
mod lab;
mod params;
mod plan;
mod platform;
mod query;
mod replay_upload;
mod reply;
mod routes;
mod stream;
mod summary;

pub use counters::{RunCounters, Status};
pub use lab::{Lab, MAX_REPLAY_BYTES};
pub use params::{
    CHOICES, FIELDS, Field, MAX_LAB_ARRIVALS, MAX_REPLAYS, Mode, ParamError, RunRequest, parse,
    parse_with_replays,
};
pub use platform::{
    MAX_PLATFORM_ARRIVALS, MAX_PLATFORM_RUNS, MAX_PLATFORM_SCALE_STEPS, PLATFORM_CHOICES,
    PLATFORM_FIELDS, parse_platform,
};
pub use query::MAX_REMOTE_CALLS;
pub use routes::serve;
pub use stream::TICK_BUFFER;
