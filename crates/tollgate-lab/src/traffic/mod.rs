//! Where a run's arrivals come from: generated traffic profiles and recorded traces.
//!
//! A [`Traffic`] profile (`profile`) generates its [`Arrivals`] lazily
//! (`arrivals`); a [`Replay`] plays recorded timestamps back (`replay`); an
//! [`ArrivalSource`] is either. A [`TrafficSpec`] (`spec`) is a profile named
//! with its parameters, as the CLI's flags and the lab's query give them.

mod arrivals;
mod profile;
mod replay;
mod spec;

pub use arrivals::Arrivals;
pub use profile::{MAX_RATE, Traffic};
pub(crate) use replay::SourceArrivals;
pub use replay::{ArrivalSource, Replay};
pub use spec::{TrafficName, TrafficSpec};
