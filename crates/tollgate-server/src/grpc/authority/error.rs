//! Why the authority front closed a connection it was rewriting: malformed framing or HPACK, or a bound exceeded.

use std::fmt;
use std::io;

/// Why a connection in rewriting mode is closed (h2 would close it too, or the input is over a bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontError {
    /// A frame's payload is longer than the `SETTINGS_MAX_FRAME_SIZE` the server announced.
    FrameTooLarge {
        /// The frame's payload length.
        length: usize,
        /// The largest payload allowed.
        max: usize,
    },
    /// A header block (all its fragments, or its decoded header list) is over the server's header list size.
    HeaderListTooLarge {
        /// The largest header list allowed, in RFC 7541 bytes (name + value + 32 per field).
        max: usize,
    },
    /// The framing breaks RFC 9113 (padding, priority fields, CONTINUATION order).
    Malformed(&'static str),
    /// The header block is not valid HPACK (RFC 7541).
    Hpack(String),
}

impl fmt::Display for FrontError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrontError::FrameTooLarge { length, max } => {
                write!(
                    f,
                    "HTTP/2 frame of {length} bytes is over the {max}-byte frame size"
                )
            }
            FrontError::HeaderListTooLarge { max } => {
                write!(
                    f,
                    "HTTP/2 header list is over the {max}-byte header list size"
                )
            }
            FrontError::Malformed(what) => write!(f, "malformed HTTP/2 framing: {what}"),
            FrontError::Hpack(what) => write!(f, "malformed HPACK header block: {what}"),
        }
    }
}

impl std::error::Error for FrontError {}

impl From<FrontError> for io::Error {
    fn from(error: FrontError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }
}
