//! The HPACK side of the authority front: decode a client's header block against the client's dynamic table, and re-encode it, `:authority` made acceptable, against a table that mirrors hyper's decoder.
//!
//! HPACK (RFC 7541) is stateful per direction: each header block may add
//! fields to a dynamic table that later blocks refer to by index, and may
//! start with dynamic table size updates. So once a connection is rewritten,
//! *every* header block on it (requests and trailers) goes through here:
//!
//! * the [`Decoder`] sees the client's bytes exactly, so it follows the
//!   client's encoder, size updates included. Its ceiling is
//!   [`HEADER_TABLE_SIZE`], the `SETTINGS_HEADER_TABLE_SIZE` the server
//!   announces (hyper announces none, so the protocol's 4 096);
//! * the [`Encoder`] writes what hyper reads. It starts at the same 4 096
//!   octets as hyper's decoder and never changes size, so it never needs a
//!   size update, and every field it indexes hyper's decoder indexes too.
//!
//! Both come from `loona-hpack` (Huffman decoding included); nothing here
//! parses HPACK by hand. A decoded list is bounded by the server's header
//! list size (RFC 9113's measure: name + value + 32 octets per field) before
//! anything is kept, so a small block of indexed references cannot expand
//! into a large allocation.

use std::borrow::Cow;

use loona_hpack::{Decoder, Encoder};

use super::error::FrontError;
use super::sanitize::{AUTHORITY, acceptable_authority, is_acceptable};

/// The dynamic table size both directions of the rewrite assume: the protocol's initial `SETTINGS_HEADER_TABLE_SIZE`, which hyper's server keeps (it announces none).
pub const HEADER_TABLE_SIZE: usize = 4_096;

/// The overhead RFC 7541 counts per field on top of its name and value.
const FIELD_OVERHEAD: usize = 32;

/// A decoded header list: names and values, in order.
pub type HeaderList = Vec<(Vec<u8>, Vec<u8>)>;

/// Decodes a connection's header blocks and re-encodes them with `:authority` made acceptable, keeping both HPACK tables in step.
pub struct HeaderBlockRewriter {
    /// Follows the client's encoder.
    decoder: Decoder<'static>,
    /// Feeds hyper's decoder.
    encoder: Encoder<'static>,
    /// The largest decoded header list, in RFC 7541 bytes.
    max_list_bytes: usize,
}

impl HeaderBlockRewriter {
    /// A rewriter for a new connection, refusing header lists over `max_list_bytes`.
    #[must_use]
    pub fn new(max_list_bytes: usize) -> HeaderBlockRewriter {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        HeaderBlockRewriter {
            decoder,
            encoder: Encoder::new(),
            max_list_bytes,
        }
    }

    /// Decodes one complete header block (all its fragments, in order), updating the client's table.
    ///
    /// # Errors
    ///
    /// [`FrontError::Hpack`] for a block that is not valid HPACK (the
    /// connection cannot continue: the tables would disagree), and
    /// [`FrontError::HeaderListTooLarge`] for a list over the bound.
    pub fn decode(&mut self, block: &[u8]) -> Result<HeaderList, FrontError> {
        let max = self.max_list_bytes;
        let mut list = HeaderList::new();
        let mut size = 0usize;
        self.decoder
            .decode_with_cb(block, |name, value| {
                size = size.saturating_add(name.len() + value.len() + FIELD_OVERHEAD);
                if size <= max {
                    list.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|error| FrontError::Hpack(error.to_string()))?;
        if size > max {
            return Err(FrontError::HeaderListTooLarge { max });
        }
        Ok(list)
    }

    /// Encodes `list` for hyper, each `:authority` made acceptable (see [`acceptable_authority`]), updating hyper's table.
    pub fn encode_acceptable(&mut self, list: &HeaderList) -> Vec<u8> {
        let fields: Vec<(&[u8], Cow<'_, [u8]>)> = list
            .iter()
            .filter_map(|(name, value)| {
                if name == AUTHORITY {
                    acceptable_authority(value).map(|value| (&name[..], Cow::Owned(value)))
                } else {
                    Some((&name[..], Cow::Borrowed(&value[..])))
                }
            })
            .collect();
        self.encoder
            .encode(fields.iter().map(|(name, value)| (*name, &value[..])))
    }
}

/// Whether `list` has an `:authority` that h2 would refuse.
#[must_use]
pub fn has_unacceptable_authority(list: &HeaderList) -> bool {
    list.iter()
        .any(|(name, value)| name == AUTHORITY && !is_acceptable(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_indexed_flood_is_refused_before_it_is_kept() {
        let mut client = Encoder::new();
        let big = vec![b'v'; 3_000];
        let mut block = client.encode([(&b"x-big"[..], &big[..])]);
        // 2 000 references to the 3 KB entry: 6 MB decoded from 2 KB.
        let again = client.encode([(&b"x-big"[..], &big[..])]);
        for _ in 0..2_000 {
            block.extend_from_slice(&again);
        }
        let mut rewriter = HeaderBlockRewriter::new(16 * 1024);
        assert_eq!(
            rewriter.decode(&block),
            Err(FrontError::HeaderListTooLarge { max: 16 * 1024 })
        );
    }

    #[test]
    fn a_size_update_over_the_announced_table_is_an_error() {
        let mut block = loona_hpack::encoder::encode_integer(HEADER_TABLE_SIZE + 1, 5);
        block[0] |= 0x20;
        block.push(0x82); // :method GET
        let mut rewriter = HeaderBlockRewriter::new(16 * 1024);
        assert!(matches!(rewriter.decode(&block), Err(FrontError::Hpack(_))));
    }
}
