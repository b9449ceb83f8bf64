//! [`RequestBody`]: a client's request body on its way upstream, its first frame read before anything is sent and a broken body remembered.
//!
//! A body that breaks (a malformed chunk) before its first frame sends
//! nothing upstream; one that breaks later makes hyper's client abort the
//! upstream request without its final chunk, so the upstream never sees a
//! complete request. Either way [`BodyFault`] holds the reason and the
//! client gets 400, whatever the upstream answered.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// Why a request body broke, once it has.
#[derive(Clone, Debug, Default)]
pub struct BodyFault(Arc<OnceLock<String>>);

impl BodyFault {
    /// The reason, if the body broke.
    pub fn reason(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    fn record(&self, error: &hyper::Error) {
        let _ = self.0.set(error.to_string());
    }
}

/// The client's body, with its first frame already read.
#[derive(Debug)]
pub struct RequestBody {
    first: Option<Frame<Bytes>>,
    rest: Incoming,
    fault: BodyFault,
}

impl RequestBody {
    /// Reads `body`'s first frame (nothing when it is empty); a broken first frame is an error and is recorded in `fault`.
    pub async fn read_first(mut body: Incoming, fault: BodyFault) -> Result<Self, hyper::Error> {
        let first = if body.is_end_stream() {
            None
        } else {
            match body.frame().await {
                None => None,
                Some(Ok(frame)) => Some(frame),
                Some(Err(error)) => {
                    fault.record(&error);
                    return Err(error);
                }
            }
        };
        Ok(RequestBody {
            first,
            rest: body,
            fault,
        })
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(frame) = self.first.take() {
            return Poll::Ready(Some(Ok(frame)));
        }
        let polled = Pin::new(&mut self.rest).poll_frame(cx);
        if let Poll::Ready(Some(Err(error))) = &polled {
            self.fault.record(error);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.rest.size_hint();
        let first = self
            .first
            .as_ref()
            .and_then(Frame::data_ref)
            .map_or(0, |data| data.remaining() as u64);
        // Upper first: `set_lower` panics on a lower bound above the upper
        // one, which an exact hint (a `content-length` body) would have.
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(first));
        }
        hint.set_lower(hint.lower().saturating_add(first));
        hint
    }
}
