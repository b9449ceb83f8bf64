//! One `ShouldRateLimit` call over HTTP/2: the request read by tonic's decoder, the answer framed once into a right-sized buffer, with fixed trailers.
//!
//! tonic's unary handler encodes an answer through its streaming encoder
//! (a buffer, a body that polls a one-message stream, a `Status` built and
//! rendered into a fresh trailer map for every OK answer); for one short
//! message known in full, that machinery costs more than the message. Here
//! the answer is encoded once, length prefix included, into a buffer of its
//! exact size, and the trailers are `grpc-status: 0`, always the same.
//!
//! The request side is tonic's own [`Streaming`] decoder, as in its unary
//! handler: the same bound on the message size (by its length prefix,
//! before it is buffered), the same errors for a broken frame or a
//! compressed request, which this service does not accept; a body that ends
//! without a message is INVALID_ARGUMENT (a bad request, where tonic's
//! handler says INTERNAL). Errors are answered as tonic renders a `Status`
//! (trailers-only).

use std::pin::{Pin, pin};
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use hyper::body::{Body, Frame};
use tonic::codec::{Codec, Streaming};
use tonic::codegen::{StdError, http};
use tonic::metadata::MetadataMap;
use tonic::server::UnaryService;
use tonic::{Request, Status};

/// The status of a call answered with a message.
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
/// Where a request names its compression.
const GRPC_ENCODING: http::HeaderName = http::HeaderName::from_static("grpc-encoding");
/// The compressions a server accepts, in its refusal of a compressed request.
const GRPC_ACCEPT_ENCODING: &str = "grpc-accept-encoding";

/// Answers one unary call: decodes its message with `codec` (at most
/// `max_message_bytes`), lets `service` answer it and frames the answer.
pub(super) async fn answer_unary<C, S, B>(
    mut codec: C,
    max_message_bytes: usize,
    mut service: S,
    request: http::Request<B>,
) -> http::Response<tonic::body::Body>
where
    C: Codec,
    C::Encode: prost::Message,
    S: UnaryService<C::Decode, Response = C::Encode>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send,
{
    let request = match decode(&mut codec, max_message_bytes, request).await {
        Ok(request) => request,
        Err(status) => return status.into_http(),
    };
    match service.call(request).await {
        Ok(response) => framed(response.get_ref()),
        Err(status) => status.into_http(),
    }
}

/// The call's message and metadata (headers, then any trailers the client sent).
async fn decode<C, B>(
    codec: &mut C,
    max_message_bytes: usize,
    request: http::Request<B>,
) -> Result<Request<C::Decode>, Status>
where
    C: Codec,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send,
{
    if let Some(encoding) = request.headers().get(GRPC_ENCODING)
        && encoding.as_bytes() != b"identity"
    {
        let mut status = Status::unimplemented(format!(
            "the request is compressed with `{}`; this service takes `identity` only",
            String::from_utf8_lossy(encoding.as_bytes())
        ));
        status.metadata_mut().insert(
            GRPC_ACCEPT_ENCODING,
            tonic::metadata::MetadataValue::from_static("identity"),
        );
        return Err(status);
    }
    let (parts, body) = request.into_parts();
    let mut stream = pin!(Streaming::new_request(
        codec.decoder(),
        body,
        None,
        Some(max_message_bytes),
    ));
    let message = stream
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("the request ended without its message"))?;
    let mut headers = parts.headers;
    if let Some(trailers) = stream.trailers().await? {
        headers.extend(trailers.into_headers());
    }
    Ok(Request::from_parts(
        MetadataMap::from_headers(headers),
        tonic::Extensions::default(),
        message,
    ))
}

/// The HTTP response carrying `message`: one gRPC frame, then `grpc-status: 0`.
fn framed<M: prost::Message>(message: &M) -> http::Response<tonic::body::Body> {
    let length = message.encoded_len();
    let mut frame = BytesMut::with_capacity(FRAME_PREFIX_BYTES + length);
    frame.put_u8(0); // not compressed
    // An answer is a few hundred bytes; the conversion cannot fail below 4 GiB.
    frame.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    message.encode_raw(&mut frame);
    let mut response = http::Response::new(tonic::body::Body::new(OneMessage {
        frame: Some(frame.freeze()),
        trailers_sent: false,
    }));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// A gRPC frame's prefix: the compressed flag and the message's length.
const FRAME_PREFIX_BYTES: usize = 5;

/// A response body of one gRPC frame and OK trailers.
struct OneMessage {
    /// The frame, until it is sent.
    frame: Option<Bytes>,
    /// Whether the trailers have been sent.
    trailers_sent: bool,
}

impl Body for OneMessage {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(frame) = this.frame.take() {
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        if this.trailers_sent {
            return Poll::Ready(None);
        }
        this.trailers_sent = true;
        let mut trailers = http::HeaderMap::with_capacity(1);
        trailers.insert(GRPC_STATUS, http::HeaderValue::from_static("0"));
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.trailers_sent
    }

    // No `size_hint`: an exact one would make hyper add a `content-length`
    // header to every answer, which gRPC does not send.
}
