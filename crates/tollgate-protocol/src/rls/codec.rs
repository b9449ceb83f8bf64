//! The protobuf codec of `ShouldRateLimit`, with buffers sized for RLS messages and a request checked against its caps before it is built.
//!
//! tonic allocates the codec's buffer for every call; its default of 8 KiB
//! is far more than an RLS request or answer needs (a few hundred bytes),
//! and that much per call costs the allocator more than the call's own
//! work. Larger messages still fit: the buffer grows in steps of this size.
//!
//! Decoding a `RateLimitRequest` first counts its descriptors and entries in
//! the raw bytes ([`RequestCaps::check_wire`]), so a request over a cap is
//! refused (INVALID_ARGUMENT) before its decoded form, ~8× its size, is
//! allocated; bytes that are not a valid message are INVALID_ARGUMENT too,
//! with the decoder's reason. The message size itself is tonic's
//! `max_decoding_message_size`, which refuses a message by its length prefix
//! before buffering it; a server sets it to [`RequestCaps::max_message_bytes`].

use std::marker::PhantomData;

use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

use super::caps::RequestCaps;
use super::wire::{RateLimitRequest, RateLimitResponse};

/// A prost codec with [`CODEC_BUFFER_BYTES`] buffers.
///
/// `E` is the message sent, `D` the one received: a server encodes
/// responses, a client encodes requests.
pub struct RlsCodec<E, D> {
    caps: RequestCaps,
    _messages: PhantomData<fn(E) -> D>,
}

impl<E, D> Default for RlsCodec<E, D> {
    fn default() -> Self {
        RlsCodec::with_caps(RequestCaps::default())
    }
}

impl<E, D> RlsCodec<E, D> {
    /// A codec whose decoder checks requests against `caps`.
    pub fn with_caps(caps: RequestCaps) -> Self {
        RlsCodec {
            caps,
            _messages: PhantomData,
        }
    }
}

impl<E, D> std::fmt::Debug for RlsCodec<E, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RlsCodec")
            .field("caps", &self.caps)
            .finish()
    }
}

/// The codec buffer's size and growth step, in bytes.
pub const CODEC_BUFFER_BYTES: usize = 512;

/// tonic's own yield threshold (32 KiB), which only streams ever reach.
pub const CODEC_YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// A message [`RlsCodec`] decodes: what it checks before decoding, and how a malformed one is answered.
pub trait RlsMessage: prost::Message + Default + Send + 'static {
    /// Checks the raw message against `caps`, before it is decoded.
    fn check_caps(bytes: &[u8], caps: &RequestCaps) -> Result<(), Status>;

    /// The status for bytes that are not a valid message.
    fn malformed(error: prost::DecodeError) -> Status;
}

impl RlsMessage for RateLimitRequest {
    fn check_caps(bytes: &[u8], caps: &RequestCaps) -> Result<(), Status> {
        caps.check_wire(bytes)
            .map_err(|error| Status::invalid_argument(error.to_string()))
    }

    /// A caller sent it: INVALID_ARGUMENT, which a client can act on.
    fn malformed(error: prost::DecodeError) -> Status {
        Status::invalid_argument(format!("malformed RateLimitRequest protobuf: {error}"))
    }
}

impl RlsMessage for RateLimitResponse {
    /// An answer has no caps.
    fn check_caps(_bytes: &[u8], _caps: &RequestCaps) -> Result<(), Status> {
        Ok(())
    }

    /// The service sent it: INTERNAL, as tonic answers.
    fn malformed(error: prost::DecodeError) -> Status {
        Status::internal(format!("malformed RateLimitResponse protobuf: {error}"))
    }
}

impl<E, D> Codec for RlsCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: RlsMessage,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProstEncoder<E>;
    type Decoder = RlsDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RlsDecoder {
            caps: self.caps,
            _message: PhantomData,
        }
    }
}

/// The decoder of [`RlsCodec`]: caps first, then prost.
#[derive(Debug)]
pub struct RlsDecoder<D> {
    caps: RequestCaps,
    _message: PhantomData<fn() -> D>,
}

impl<D: RlsMessage> Decoder for RlsDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        // tonic hands over one whole message in one contiguous buffer; were
        // it ever split, the first part is checked and decoding still succeeds.
        D::check_caps(buf.chunk(), &self.caps)?;
        D::decode(buf).map(Some).map_err(D::malformed)
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings()
    }
}

/// The buffer settings of both directions.
fn buffer_settings() -> BufferSettings {
    BufferSettings::new(CODEC_BUFFER_BYTES, CODEC_YIELD_THRESHOLD_BYTES)
}
