//! The answer on the wire, with what the renderer adds: the one place gRPC's `ShouldRateLimit` and the HTTP API's `/json` build it, so both carry the same headers.

use super::render::{DELAY_HEADER, ResponseHeaders};
use crate::rls::convert::wire_response;
use crate::rls::model::{Descriptor, RateLimitResponse};
use crate::rls::wire;

impl ResponseHeaders {
    /// `response` (the answer to a request with `descriptors`) as its wire
    /// message, with the rendered headers in `response_headers_to_add`, the
    /// rendered body in `raw_body`, and a shaper's wait in [`DELAY_HEADER`].
    pub fn wire_answer(
        &self,
        descriptors: &[Descriptor],
        response: &RateLimitResponse,
    ) -> wire::RateLimitResponse {
        let mut wire = wire_response(response);
        let rendered = self.render(descriptors, response);
        wire.response_headers_to_add = rendered
            .headers
            .into_iter()
            .map(|(key, value)| wire::HeaderValue { key, value })
            .collect();
        wire.raw_body = rendered.raw_body.unwrap_or_default();
        if !response.delay.is_zero() {
            // A shaper's wait, visible to the client the request reaches.
            wire.response_headers_to_add.push(wire::HeaderValue {
                key: DELAY_HEADER.to_owned(),
                value: response.delay.as_millis().to_string(),
            });
        }
        wire
    }
}
