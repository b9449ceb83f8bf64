//! [`BackoffLayer`]: a tower layer for HTTP clients that does what a 429 or a 503 asks.
//!
//! Each request through a [`Backoff`] service:
//!
//! 1. **waits its turn** at the [`Pacer`](crate::Pacer): never before a
//!    `Retry-After` or a reset the server announced, and spaced out over the
//!    time to the reset as `remaining` nears 0;
//! 2. is refused at once with [`ClientError::CircuitOpen`] while the
//!    circuit breaker (`tollgate_core::breaker`) is open: consecutive 503s
//!    (and transport errors) open it, a probe closes it again;
//! 3. on its first try only, is rejected locally with
//!    [`ClientError::Throttled`] with the
//!    [adaptive throttle](crate::AdaptiveThrottle)'s probability;
//! 4. is sent. A **429** slows the whole client down (its hints feed the
//!    pacer) and is retried; a **503** counts towards the breaker and is
//!    retried unless the breaker opens (then the 503 is returned). A retry
//!    waits the server's `Retry-After` `T` spread over `[T, 2T]`
//!    ([`RetryJitter`](crate::RetryJitter)), and needs both a
//!    retry left (`max_retries`) and a token from the retry budget (tower's
//!    `TpsBudget`: retries stay a fraction of first tries). Without either,
//!    the 429 or 503 is returned to the caller.
//!
//! The request body must be `Clone` (`Full<Bytes>`, `String`, …) so that it
//! can be sent again. State is shared by clones of the layer and service:
//! one client, one pace.

mod attempts;
mod error;
mod future;
mod layer;
mod policy;
mod service;

#[cfg(feature = "reqwest")]
pub(crate) use attempts::{Answer, Resend, Transport, attempts};
pub use error::ClientError;
pub use future::ResponseFuture;
pub use layer::BackoffLayer;
pub use policy::ClientPolicy;
pub(crate) use policy::{Shared, Verdict};
pub use service::Backoff;
