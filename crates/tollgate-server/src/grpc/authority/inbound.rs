//! The client-to-server byte stream of one connection as the authority front sees it: whole frames in, whole frames out, deciding at the first header block whether to step out or to rewrite.
//!
//! [`Inbound::process`] takes the bytes read so far and moves every
//! complete frame to the output for hyper:
//!
//! * **Deciding** (from the start): the preface and every frame before the
//!   first header block go out unchanged as soon as they are complete, so
//!   hyper answers the client's SETTINGS and PINGs at once (gRPC-Go clients
//!   wait for the server's preface before their first call). The first
//!   HEADERS frame and its CONTINUATIONs are held and decoded. If every
//!   `:authority` in it is acceptable (or there is none), the held bytes go
//!   out unchanged and the mode becomes **passing through**: the front
//!   steps out and the connection costs nothing more. Anything unexpected
//!   while deciding (no HTTP/2 preface, an oversized frame, bad HPACK) also
//!   passes through untouched, so hyper answers it exactly as it would
//!   without the front.
//! * **Rewriting** (the first block had an unacceptable `:authority`): for
//!   the rest of the connection every header block is decoded and re-encoded
//!   by the [`HeaderBlockRewriter`] and written out as fresh HEADERS +
//!   CONTINUATION frames (END_STREAM and priority kept, padding dropped);
//!   every other frame goes out byte for byte. Malformed framing or HPACK,
//!   a frame over the frame size or a header list over the bound is an
//!   error, and the connection is closed, as h2 closes it.

use bytes::BytesMut;

use super::error::FrontError;
use super::frame::{
    CONTINUATION, END_HEADERS, END_STREAM, FrameHeader, HEADER_LEN, HEADERS, MIN_MAX_FRAME_SIZE,
    PREFACE, PRIORITY_LEN, headers_payload, write_header_block,
};
use super::rewriter::{HeaderBlockRewriter, has_unacceptable_authority};

/// The bounds a connection's inbound frames are held to: the values hyper's server announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboundLimits {
    /// The server's `SETTINGS_MAX_FRAME_SIZE`: the longest frame payload a client may send.
    pub max_frame_size: usize,
    /// The server's `SETTINGS_MAX_HEADER_LIST_SIZE`: bounds a header block's fragments and its decoded list.
    pub max_header_list_size: usize,
}

/// What the front is doing with a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Waiting for the first header block.
    Deciding,
    /// Every authority of the first block was acceptable (or the input was not one to judge): bytes go to hyper as they are.
    PassingThrough,
    /// Every header block is re-encoded with an acceptable `:authority`.
    Rewriting,
}

/// A header block whose END_HEADERS has not been seen yet.
struct PendingBlock {
    /// The stream it opens (or ends, for trailers).
    stream: u32,
    /// The HEADERS frame's END_STREAM.
    end_stream: bool,
    /// The HEADERS frame's priority fields.
    priority: Option<[u8; PRIORITY_LEN]>,
    /// The fragments so far.
    fragments: Vec<u8>,
    /// The frames as received, while deciding (to hand over unchanged).
    raw: BytesMut,
}

/// One connection's client-to-server direction.
pub struct Inbound {
    /// The current mode.
    mode: Mode,
    /// Whether the 24-byte preface has gone out.
    preface_done: bool,
    /// The bounds.
    limits: InboundLimits,
    /// The header block being collected.
    pending: Option<PendingBlock>,
    /// The HPACK state of both sides.
    rewriter: HeaderBlockRewriter,
}

impl Inbound {
    /// A new connection, deciding.
    #[must_use]
    pub fn new(limits: InboundLimits) -> Inbound {
        Inbound {
            mode: Mode::Deciding,
            preface_done: false,
            limits,
            pending: None,
            rewriter: HeaderBlockRewriter::new(limits.max_header_list_size),
        }
    }

    /// The current mode.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Moves every complete frame of `input` to `output` (rewritten when rewriting); an incomplete frame stays in `input`.
    ///
    /// When passing through, everything goes, held bytes first.
    ///
    /// # Errors
    ///
    /// Only while rewriting: see the module documentation.
    pub fn process(
        &mut self,
        input: &mut BytesMut,
        output: &mut BytesMut,
    ) -> Result<(), FrontError> {
        if !self.preface_done && self.mode == Mode::Deciding {
            let seen = input.len().min(PREFACE.len());
            if input[..seen] != PREFACE[..seen] {
                self.step_out(output);
            } else if seen < PREFACE.len() {
                return Ok(());
            } else {
                output.extend_from_slice(&input.split_to(PREFACE.len()));
                self.preface_done = true;
            }
        }
        loop {
            if self.mode == Mode::PassingThrough {
                output.extend_from_slice(input);
                input.clear();
                return Ok(());
            }
            let Some(header) = FrameHeader::parse(input) else {
                return Ok(());
            };
            if header.length > self.limits.max_frame_size {
                self.fail(
                    FrontError::FrameTooLarge {
                        length: header.length,
                        max: self.limits.max_frame_size,
                    },
                    output,
                )?;
                continue;
            }
            if input.len() < HEADER_LEN + header.length {
                return Ok(());
            }
            let frame = input.split_to(HEADER_LEN + header.length);
            if let Err(error) = self.frame(header, frame, output) {
                self.fail(error, output)?;
            }
        }
    }

    /// The input has ended: while deciding, every byte held or left in `input` goes to `output` unchanged (hyper judges the truncated stream); while rewriting, an incomplete frame is dropped.
    pub fn finish(&mut self, input: &mut BytesMut, output: &mut BytesMut) {
        if self.mode == Mode::Deciding {
            self.step_out(output);
        }
        if self.mode == Mode::PassingThrough {
            output.extend_from_slice(input);
        }
        input.clear();
    }

    /// One complete frame.
    fn frame(
        &mut self,
        header: FrameHeader,
        frame: BytesMut,
        output: &mut BytesMut,
    ) -> Result<(), FrontError> {
        let deciding = self.mode == Mode::Deciding;
        let payload = &frame[HEADER_LEN..];
        let fragment_of = |pending: &mut PendingBlock, fragment: &[u8], max: usize| {
            pending.fragments.extend_from_slice(fragment);
            if deciding {
                pending.raw.extend_from_slice(&frame);
            }
            if pending.fragments.len() > max {
                return Err(FrontError::HeaderListTooLarge { max });
            }
            Ok(())
        };
        let max = self.limits.max_header_list_size;
        if let Some(pending) = &mut self.pending {
            if header.kind != CONTINUATION || header.stream != pending.stream {
                if deciding {
                    pending.raw.extend_from_slice(&frame);
                }
                return Err(FrontError::Malformed(
                    "a header block interrupted before END_HEADERS",
                ));
            }
            fragment_of(pending, payload, max)?;
        } else if header.kind == HEADERS {
            let parsed = match headers_payload(&header, payload) {
                Ok(parsed) => parsed,
                Err(error) => {
                    self.hold(frame);
                    return Err(error);
                }
            };
            let mut pending = PendingBlock {
                stream: header.stream,
                end_stream: header.has(END_STREAM),
                priority: parsed.priority,
                fragments: Vec::new(),
                raw: BytesMut::new(),
            };
            let added = fragment_of(&mut pending, parsed.fragment, max);
            self.pending = Some(pending);
            added?;
        } else if header.kind == CONTINUATION {
            self.hold(frame);
            return Err(FrontError::Malformed("CONTINUATION without a header block"));
        } else {
            output.extend_from_slice(&frame);
            return Ok(());
        }
        if header.has(END_HEADERS) {
            self.block(output)?;
        }
        Ok(())
    }

    /// The pending block is complete: decide, or rewrite it.
    fn block(&mut self, output: &mut BytesMut) -> Result<(), FrontError> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        let list = match self.rewriter.decode(&pending.fragments) {
            Ok(list) => list,
            Err(error) => {
                self.pending = Some(pending);
                return Err(error);
            }
        };
        if self.mode == Mode::Deciding && !has_unacceptable_authority(&list) {
            output.extend_from_slice(&pending.raw);
            self.mode = Mode::PassingThrough;
            return Ok(());
        }
        if self.mode == Mode::Deciding {
            tracing::debug!(
                "rewriting this gRPC connection's :authority values (`_` for each byte no URI may hold)"
            );
            self.mode = Mode::Rewriting;
        }
        let block = self.rewriter.encode_acceptable(&list);
        write_header_block(
            output,
            pending.stream,
            pending.end_stream,
            pending.priority,
            &block,
            MIN_MAX_FRAME_SIZE,
        );
        Ok(())
    }

    /// Keeps `frame` with the held bytes while deciding, so stepping out hands it on.
    fn hold(&mut self, frame: BytesMut) {
        if self.mode == Mode::Deciding {
            let pending = self.pending.get_or_insert_with(|| PendingBlock {
                stream: 0,
                end_stream: false,
                priority: None,
                fragments: Vec::new(),
                raw: BytesMut::new(),
            });
            pending.raw.extend_from_slice(&frame);
        }
    }

    /// `error` while deciding steps out (hyper judges the bytes); while rewriting it ends the connection.
    fn fail(&mut self, error: FrontError, output: &mut BytesMut) -> Result<(), FrontError> {
        if self.mode == Mode::Deciding {
            self.step_out(output);
            Ok(())
        } else {
            Err(error)
        }
    }

    /// Hands the held bytes on and passes everything through from now on.
    fn step_out(&mut self, output: &mut BytesMut) {
        if let Some(pending) = self.pending.take() {
            output.extend_from_slice(&pending.raw);
        }
        self.mode = Mode::PassingThrough;
    }
}
