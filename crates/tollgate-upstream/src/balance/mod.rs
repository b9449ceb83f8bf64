//! A tower layer that sends each request to an endpoint of a cluster and reports the outcome.
//!
//! For every request the service picks an endpoint (with the hash key the
//! caller's function extracts, if any), records it in the request's
//! extensions as a [`SelectedEndpoint`] for the inner service (the HTTP
//! client) to connect to, and calls the inner service. When the inner call
//! ends, the outcome goes back to the cluster: the response's status
//! through [`Outcome::from_status`](crate::Outcome::from_status), any inner
//! error as a gateway failure (connect error, timeout, reset). A call
//! dropped before it ends reports nothing and frees its slot.
//!
//! The request counts as in flight until the inner future resolves (the
//! response head), not until the body has streamed. A pick that fails
//! fails the call with the [`PickError`](crate::PickError), converted into
//! the inner service's error type (`S::Error: From<PickError>`; a boxed
//! error, or the caller's own enum).

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::BalanceLayer;
pub use service::{Balance, SelectedEndpoint};
