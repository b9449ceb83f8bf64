//! HTTP/2 framing as the authority front needs it: the client preface, frame headers, the header block fragment inside HEADERS, and writing a header block back out as HEADERS + CONTINUATION frames.
//!
//! The facts it relies on (RFC 9113):
//!
//! * A client connection starts with the 24-byte preface
//!   `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`, then frames.
//! * Every frame starts with a 9-byte header: a 24-bit payload length, an
//!   8-bit type, 8 bits of flags and a reserved bit followed by a 31-bit
//!   stream identifier. A payload may not exceed the receiver's
//!   `SETTINGS_MAX_FRAME_SIZE`, which is never less than 16 384.
//! * HEADERS (type 1) carries, in order: a pad length octet when PADDED
//!   (0x8) is set, 5 priority octets when PRIORITY (0x20) is set, a header
//!   block fragment, then the padding. END_STREAM is 0x1, END_HEADERS 0x4.
//! * Without END_HEADERS, the block continues in CONTINUATION frames (type
//!   9, only END_HEADERS as a flag, no padding) on the same stream, and no
//!   other frame may come in between.

use bytes::{BufMut, BytesMut};

use super::error::FrontError;

/// What a client sends before its first frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The length of a frame header.
pub const HEADER_LEN: usize = 9;

/// The frame type of HEADERS.
pub const HEADERS: u8 = 0x1;
/// The frame type of CONTINUATION.
pub const CONTINUATION: u8 = 0x9;

/// HEADERS flag: the last frame the client sends on this stream.
pub const END_STREAM: u8 = 0x1;
/// HEADERS / CONTINUATION flag: the last frame of a header block.
pub const END_HEADERS: u8 = 0x4;
/// HEADERS flag: a pad length octet and padding are present.
pub const PADDED: u8 = 0x8;
/// HEADERS flag: 5 octets of stream dependency and weight are present.
pub const PRIORITY: u8 = 0x20;

/// The length of the priority fields of a HEADERS frame.
pub const PRIORITY_LEN: usize = 5;

/// The smallest `SETTINGS_MAX_FRAME_SIZE` a peer may announce, and the one every peer accepts.
pub const MIN_MAX_FRAME_SIZE: usize = 16_384;

/// A parsed frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The payload's length in bytes.
    pub length: usize,
    /// The frame type.
    pub kind: u8,
    /// The flags.
    pub flags: u8,
    /// The stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl FrameHeader {
    /// The header at the start of `bytes`, or `None` while fewer than [`HEADER_LEN`] bytes are there.
    #[must_use]
    pub fn parse(bytes: &[u8]) -> Option<FrameHeader> {
        let header: &[u8; HEADER_LEN] = bytes.get(..HEADER_LEN)?.try_into().ok()?;
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *header;
        Some(FrameHeader {
            length: usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2),
            kind,
            flags,
            stream: u32::from_be_bytes([s0 & 0x7f, s1, s2, s3]),
        })
    }

    /// Whether `flags` has `flag` set.
    #[must_use]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Appends this header to `out`.
    pub fn write(&self, out: &mut BytesMut) {
        let length = u32::try_from(self.length).unwrap_or(u32::MAX).to_be_bytes();
        out.put_slice(&length[1..]);
        out.put_u8(self.kind);
        out.put_u8(self.flags);
        out.put_u32(self.stream & 0x7fff_ffff);
    }
}

/// What a HEADERS frame's payload holds besides padding.
#[derive(Debug, PartialEq, Eq)]
pub struct HeadersPayload<'a> {
    /// The priority fields, when the PRIORITY flag is set.
    pub priority: Option<[u8; PRIORITY_LEN]>,
    /// The header block fragment.
    pub fragment: &'a [u8],
}

/// Splits a HEADERS frame's payload into its priority fields and header block fragment, dropping the padding.
///
/// # Errors
///
/// [`FrontError::Malformed`] when the pad length or the priority fields do
/// not fit in the payload (a PROTOCOL_ERROR or FRAME_SIZE_ERROR to h2).
pub fn headers_payload<'a>(
    header: &FrameHeader,
    payload: &'a [u8],
) -> Result<HeadersPayload<'a>, FrontError> {
    let mut rest = payload;
    let padding = if header.has(PADDED) {
        let (&length, tail) = rest.split_first().ok_or(FrontError::Malformed(
            "a padded HEADERS frame without its pad length",
        ))?;
        rest = tail;
        usize::from(length)
    } else {
        0
    };
    let priority = if header.has(PRIORITY) {
        let (fields, tail) =
            rest.split_first_chunk::<PRIORITY_LEN>()
                .ok_or(FrontError::Malformed(
                    "a HEADERS frame too short for its priority fields",
                ))?;
        rest = tail;
        Some(*fields)
    } else {
        None
    };
    let fragment_len = rest
        .len()
        .checked_sub(padding)
        .ok_or(FrontError::Malformed(
            "HEADERS padding longer than the frame",
        ))?;
    Ok(HeadersPayload {
        priority,
        fragment: &rest[..fragment_len],
    })
}

/// Appends `block` to `out` as one HEADERS frame on `stream` and as many CONTINUATION frames as frames of at most `max_frame` payload bytes need.
///
/// The HEADERS frame keeps `end_stream` and `priority`; padding is not
/// written; END_HEADERS is set on the last frame.
pub fn write_header_block(
    out: &mut BytesMut,
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; PRIORITY_LEN]>,
    block: &[u8],
    max_frame: usize,
) {
    let prefix = priority.map_or(0, |_| PRIORITY_LEN);
    let first_len = block.len().min(max_frame - prefix);
    let (first, mut rest) = block.split_at(first_len);
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if priority.is_some() {
        flags |= PRIORITY;
    }
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    out.reserve(block.len() + prefix + HEADER_LEN * (1 + block.len() / max_frame));
    FrameHeader {
        length: prefix + first.len(),
        kind: HEADERS,
        flags,
        stream,
    }
    .write(out);
    if let Some(fields) = priority {
        out.put_slice(&fields);
    }
    out.put_slice(first);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(max_frame));
        rest = tail;
        FrameHeader {
            length: chunk.len(),
            kind: CONTINUATION,
            flags: if rest.is_empty() { END_HEADERS } else { 0 },
            stream,
        }
        .write(out);
        out.put_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_the_reserved_bit_is_dropped() {
        let header = FrameHeader {
            length: 0x01_02_03,
            kind: HEADERS,
            flags: END_HEADERS | END_STREAM,
            stream: 7,
        };
        let mut out = BytesMut::new();
        header.write(&mut out);
        assert_eq!(&out[..], &[1, 2, 3, 1, 5, 0, 0, 0, 7]);
        assert_eq!(FrameHeader::parse(&out), Some(header));
        assert_eq!(FrameHeader::parse(&out[..8]), None);
        let reserved = [0, 0, 0, 0, 0, 0x80, 0, 0, 1];
        assert_eq!(FrameHeader::parse(&reserved).map(|h| h.stream), Some(1));
    }

    #[test]
    fn padding_and_priority_are_taken_off_the_fragment() {
        let header = FrameHeader {
            length: 0,
            kind: HEADERS,
            flags: PADDED | PRIORITY,
            stream: 1,
        };
        let payload = [2, 0, 0, 0, 3, 16, b'a', b'b', 0, 0];
        let parsed = headers_payload(&header, &payload).expect("well formed");
        assert_eq!(parsed.priority, Some([0, 0, 0, 3, 16]));
        assert_eq!(parsed.fragment, b"ab");
        assert!(headers_payload(&header, &[9, 0, 0, 0, 3, 16]).is_err());
        assert!(headers_payload(&header, &[0, 0, 0]).is_err());
        assert!(headers_payload(&header, &[]).is_err());
    }

    #[test]
    fn a_long_block_is_split_into_continuations() {
        let block: Vec<u8> = (0..40u8).collect();
        let mut out = BytesMut::new();
        write_header_block(&mut out, 3, true, Some([0, 0, 0, 1, 5]), &block, 16);
        let first = FrameHeader::parse(&out).expect("a header");
        assert_eq!(
            first,
            FrameHeader {
                length: 16,
                kind: HEADERS,
                flags: END_STREAM | PRIORITY,
                stream: 3
            }
        );
        let mut at = HEADER_LEN + 16;
        let mut fragments = out[HEADER_LEN + PRIORITY_LEN..at].to_vec();
        let mut last = first;
        while at < out.len() {
            last = FrameHeader::parse(&out[at..]).expect("a header");
            assert_eq!((last.kind, last.stream), (CONTINUATION, 3));
            fragments.extend_from_slice(&out[at + HEADER_LEN..at + HEADER_LEN + last.length]);
            at += HEADER_LEN + last.length;
        }
        assert_eq!(last.flags, END_HEADERS);
        assert_eq!(fragments, block);
    }
}
