//! The protobuf codec of `ShouldRateLimit`, with buffers sized for RLS messages.
//!
//! tonic allocates the codec's buffer for every call; its default of 8 KiB
//! is far more than an RLS request or answer needs (a few hundred bytes),
//! and that much per call costs the allocator more than the call's own
//! work. Larger messages still fit: the buffer grows in steps of this size.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// A prost codec with [`CODEC_BUFFER_BYTES`] buffers.
///
/// `E` is the message sent, `D` the one received: a server encodes
/// responses, a client encodes requests.
pub struct RlsCodec<E, D>(PhantomData<fn(E) -> D>);

impl<E, D> Default for RlsCodec<E, D> {
    fn default() -> Self {
        RlsCodec(PhantomData)
    }
}

impl<E, D> std::fmt::Debug for RlsCodec<E, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RlsCodec")
    }
}

/// The codec buffer's size and growth step, in bytes.
pub const CODEC_BUFFER_BYTES: usize = 512;

/// tonic's own yield threshold (32 KiB), which only streams ever reach.
pub const CODEC_YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

impl<E, D> Codec for RlsCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = ProstEncoder<E>;
    type Decoder = ProstDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(buffer_settings())
    }
}

/// The buffer settings of both directions.
fn buffer_settings() -> BufferSettings {
    BufferSettings::new(CODEC_BUFFER_BYTES, CODEC_YIELD_THRESHOLD_BYTES)
}
