//! Response headers and the 429 body rendered from an RLS answer, by a service (`response_headers_to_add`, `raw_body`) or a proxy.
//!
//! All of it is off by default, like upstream. [`HeaderOptions`] switches on:
//!
//! * **The trio** (upstream's `LIMIT_RESPONSE_HEADERS_ENABLED`):
//!   `RateLimit-Limit: 3`, `RateLimit-Remaining: 0`, `RateLimit-Reset: 50`
//!   (names configurable), from one status picked by [`pick_status`].
//! * **IETF draft-10 fields** ([`ietf_fields`]): `RateLimit-Policy`, one
//!   item per status that has a limit (`"login";q=3;w=60,
//!   "user=alice";q=100;w=3600`), and `RateLimit` for the picked status
//!   (`"login";r=0;t=50`). Both are RFC 9651 lists, items separated by `, `.
//! * **`Retry-After`** on OVER_LIMIT: whole seconds, rounded up from the
//!   exact time the request could pass, plus an upward [`Jitter`].
//! * **A JSON body** for the 429 (`raw_body`), described at [`raw_body()`].
//!
//! Header values never depend on anything but the statuses, the request's
//! descriptors and the jitter source, which can be seeded ([`Jitter::seeded`]).
//! The same functions render a service's headers and a proxy's, so `t` and
//! `Retry-After` agree wherever they are written.

mod ietf;
mod jitter;
mod pick;
mod raw_body;
mod render;
mod retry_after;
mod trio;
#[cfg(feature = "grpc")]
mod wire_answer;

#[cfg(test)]
mod tests;

pub use ietf::{
    IetfFields, ietf_fields, limit_item, policy_item, policy_name, ratelimit_item,
    ratelimit_policy, sf_string, write_limit_item,
};
pub use jitter::Jitter;
pub use pick::{pick_among, pick_status};
pub use raw_body::raw_body;
pub use render::{DELAY_HEADER, HeaderOptions, Rendered, ResponseHeaders};
pub use retry_after::{overall_retry_after, retry_after_seconds};
pub use trio::{LimitHeaderNames, limit_headers};
