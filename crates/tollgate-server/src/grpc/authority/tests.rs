//! Property tests of the authority front: header lists a client encodes over one connection come out of the front decodable by a fresh decoder and equal to the input with `:authority` made acceptable; acceptable connections come out byte for byte; malformed input is an error, never a panic.

use bytes::BytesMut;
use loona_hpack::encoder::encode_integer;
use loona_hpack::{Decoder, Encoder};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::FrontError;
use super::frame::{
    CONTINUATION, END_HEADERS, FrameHeader, HEADER_LEN, HEADERS, PADDED, PREFACE, PRIORITY,
    headers_payload,
};
use super::front::AuthorityFront;
use super::inbound::{Inbound, InboundLimits, Mode};
use super::rewriter::{HeaderList, has_unacceptable_authority};
use super::sanitize::{AUTHORITY, acceptable_authority};

/// The bounds `tollgate serve` uses.
const LIMITS: InboundLimits = InboundLimits {
    max_frame_size: 16 * 1024,
    max_header_list_size: 16 * 1024,
};

/// An empty SETTINGS frame, as clients send after the preface.
const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
/// A PING frame.
const PING: [u8; 17] = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

/// How one header block is framed and prefixed.
#[derive(Clone, Debug)]
struct Framing {
    /// A dynamic table size update to start the block with.
    size_update: Option<usize>,
    /// Padding on the HEADERS frame.
    padding: Option<u8>,
    /// Priority fields on the HEADERS frame.
    priority: bool,
    /// The largest fragment per frame (small values force CONTINUATIONs).
    split: usize,
}

fn framing() -> impl Strategy<Value = Framing> {
    (
        proptest::option::weighted(0.2, 0usize..=4096),
        proptest::option::of(any::<u8>()),
        any::<bool>(),
        1usize..400,
    )
        .prop_map(|(size_update, padding, priority, split)| Framing {
            size_update,
            padding,
            priority,
            split,
        })
}

fn authority() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"outbound|8081||ratelimit.default.svc.cluster.local".to_vec()),
        Just(b"ratelimit:8081".to_vec()),
        Just(b"tollgate".to_vec()),
        Just(Vec::new()),
        "[a-z|/ :@%]{1,30}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 1..40),
    ]
}

fn header_list() -> impl Strategy<Value = HeaderList> {
    let field = (
        prop_oneof![
            Just(b"content-type".to_vec()),
            Just(b"te".to_vec()),
            Just(b"grpc-timeout".to_vec()),
            "x-[a-d]{1,2}".prop_map(String::into_bytes),
        ],
        prop_oneof![
            "[ -~]{0,12}".prop_map(String::into_bytes),
            (0usize..1500).prop_map(|n| vec![b'v'; n]),
        ],
    );
    (
        proptest::option::weighted(0.9, authority()),
        "/[a-z.]{1,8}/[A-Za-z]{1,8}",
        proptest::collection::vec(field, 0..6),
    )
        .prop_map(|(authority, path, fields)| {
            let mut list: HeaderList = vec![
                (b":method".to_vec(), b"POST".to_vec()),
                (b":scheme".to_vec(), b"http".to_vec()),
                (b":path".to_vec(), path.into_bytes()),
            ];
            if let Some(authority) = authority {
                list.push((AUTHORITY.to_vec(), authority));
            }
            list.extend(fields);
            list
        })
}

/// Appends a client's header block for `list` on `stream`, framed as `framing` says.
fn client_block(
    encoder: &mut Encoder<'_>,
    stream: u32,
    list: &HeaderList,
    framing: &Framing,
    out: &mut BytesMut,
) {
    let mut block = Vec::new();
    if let Some(size) = framing.size_update {
        encoder.set_max_table_size(size);
        let mut update = encode_integer(size, 5);
        update[0] |= 0x20;
        block.extend_from_slice(&update);
    }
    block.extend(encoder.encode(list.iter().map(|(n, v)| (&n[..], &v[..]))));
    let mut chunks = block.chunks(framing.split).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let mut payload = Vec::new();
    let mut flags = 0;
    if let Some(padding) = framing.padding {
        flags |= PADDED;
        payload.push(padding);
    }
    if framing.priority {
        flags |= PRIORITY;
        payload.extend_from_slice(&[0, 0, 0, 0, 15]);
    }
    payload.extend_from_slice(first);
    payload.extend(std::iter::repeat_n(
        0,
        usize::from(framing.padding.unwrap_or(0)),
    ));
    if chunks.peek().is_none() {
        flags |= END_HEADERS;
    }
    FrameHeader {
        length: payload.len(),
        kind: HEADERS,
        flags,
        stream,
    }
    .write(out);
    out.extend_from_slice(&payload);
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        FrameHeader {
            length: chunk.len(),
            kind: CONTINUATION,
            flags,
            stream,
        }
        .write(out);
        out.extend_from_slice(chunk);
    }
}

/// A whole client connection: preface, SETTINGS, then each block on its own stream with a PING after it.
fn client_connection(blocks: &[(HeaderList, Framing)]) -> BytesMut {
    let mut out = BytesMut::from(&PREFACE[..]);
    out.extend_from_slice(&SETTINGS);
    let mut encoder = Encoder::new();
    for (i, (list, framing)) in blocks.iter().enumerate() {
        let stream = u32::try_from(2 * i + 1).expect("few streams");
        client_block(&mut encoder, stream, list, framing, &mut out);
        out.extend_from_slice(&PING);
    }
    out
}

/// Feeds `input` to a new [`Inbound`] in chunks of `chunk` bytes, as a socket would deliver it.
fn through_inbound(input: &[u8], chunk: usize) -> (Result<BytesMut, FrontError>, Mode) {
    let mut inbound = Inbound::new(LIMITS);
    let mut pending = BytesMut::new();
    let mut output = BytesMut::new();
    for piece in input.chunks(chunk) {
        pending.extend_from_slice(piece);
        if let Err(error) = inbound.process(&mut pending, &mut output) {
            return (Err(error), inbound.mode());
        }
    }
    inbound.finish(&mut pending, &mut output);
    (Ok(output), inbound.mode())
}

/// What hyper reads: every header block decoded by one fresh decoder, and the other frames as they are.
fn server_view(output: &[u8]) -> (Vec<HeaderList>, Vec<Vec<u8>>) {
    assert_eq!(&output[..PREFACE.len()], PREFACE);
    let mut at = PREFACE.len();
    let mut decoder = Decoder::new();
    let mut lists = Vec::new();
    let mut others = Vec::new();
    let mut block = Vec::new();
    while at < output.len() {
        let header = FrameHeader::parse(&output[at..]).expect("a whole frame header");
        let payload = &output[at + HEADER_LEN..at + HEADER_LEN + header.length];
        assert!(header.length <= LIMITS.max_frame_size);
        match header.kind {
            HEADERS => {
                assert!(block.is_empty());
                block.extend_from_slice(
                    headers_payload(&header, payload)
                        .expect("well formed")
                        .fragment,
                );
            }
            CONTINUATION => block.extend_from_slice(payload),
            _ => others.push(output[at..at + HEADER_LEN + header.length].to_vec()),
        }
        if matches!(header.kind, HEADERS | CONTINUATION) && header.has(END_HEADERS) {
            lists.push(
                decoder
                    .decode(&block)
                    .expect("hyper's decoder accepts the block"),
            );
            block.clear();
        }
        at += HEADER_LEN + header.length;
    }
    assert!(block.is_empty());
    (lists, others)
}

/// `list` with its `:authority` made acceptable.
fn acceptable(list: &HeaderList) -> HeaderList {
    list.iter()
        .filter_map(|(name, value)| {
            if name == AUTHORITY {
                acceptable_authority(value).map(|value| (name.clone(), value))
            } else {
                Some((name.clone(), value.clone()))
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Many blocks over one shared client table: a connection whose first
    /// block is acceptable comes out byte for byte; any other comes out
    /// with every block decodable by a fresh decoder (the tables agree) and
    /// equal to the input made acceptable, and every other frame unchanged.
    #[test]
    fn blocks_come_out_acceptable_and_the_tables_agree(
        blocks in proptest::collection::vec((header_list(), framing()), 1..12),
        chunk in 1usize..600,
    ) {
        let input = client_connection(&blocks);
        let (output, mode) = through_inbound(&input, chunk);
        let output = output.expect("a well-formed connection passes");
        if has_unacceptable_authority(&blocks[0].0) {
            prop_assert_eq!(mode, Mode::Rewriting);
            let (lists, others) = server_view(&output);
            let expected: Vec<HeaderList> = blocks.iter().map(|(list, _)| acceptable(list)).collect();
            prop_assert_eq!(lists, expected);
            let mut frames = vec![SETTINGS.to_vec()];
            frames.extend(std::iter::repeat_n(PING.to_vec(), blocks.len()));
            prop_assert_eq!(others, frames);
        } else {
            prop_assert_eq!(mode, Mode::PassingThrough);
            prop_assert_eq!(&output[..], &input[..]);
        }
    }

    /// Arbitrary bytes after a rewritten first block: an error or more frames, never a panic.
    #[test]
    fn garbage_while_rewriting_is_an_error_not_a_panic(
        garbage in proptest::collection::vec(any::<u8>(), 0..2000),
        chunk in 1usize..300,
    ) {
        let mut input = client_connection(&[(istio_request(), plain())]);
        input.extend_from_slice(&garbage);
        let (_, mode) = through_inbound(&input, chunk);
        prop_assert_eq!(mode, Mode::Rewriting);
    }

    /// Arbitrary bytes where the first block would be: the front steps out and hyper gets them unchanged.
    #[test]
    fn garbage_while_deciding_is_handed_on_unchanged(
        garbage in proptest::collection::vec(any::<u8>(), 0..2000),
        chunk in 1usize..300,
    ) {
        let mut input = BytesMut::from(&PREFACE[..]);
        input.extend_from_slice(&garbage);
        let (output, mode) = through_inbound(&input, chunk);
        let output = output.expect("deciding never fails");
        if mode != Mode::Rewriting {
            prop_assert_eq!(&output[..], &input[..]);
        }
    }
}

/// A request as Envoy sends it from an Istio sidecar.
fn istio_request() -> HeaderList {
    vec![
        (b":method".to_vec(), b"POST".to_vec()),
        (b":scheme".to_vec(), b"http".to_vec()),
        (
            b":path".to_vec(),
            b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit".to_vec(),
        ),
        (
            AUTHORITY.to_vec(),
            b"outbound|8081||ratelimit.default.svc.cluster.local".to_vec(),
        ),
        (b"content-type".to_vec(), b"application/grpc".to_vec()),
        (b"te".to_vec(), b"trailers".to_vec()),
    ]
}

/// A block in one HEADERS frame, nothing else.
fn plain() -> Framing {
    Framing {
        size_update: None,
        padding: None,
        priority: false,
        split: usize::MAX,
    }
}

#[test]
fn rewriting_refuses_oversized_frames_and_stray_continuations() {
    let mut oversized = client_connection(&[(istio_request(), plain())]);
    FrameHeader {
        length: LIMITS.max_frame_size + 1,
        kind: 0,
        flags: 0,
        stream: 1,
    }
    .write(&mut oversized);
    assert_eq!(
        through_inbound(&oversized, 4096).0.err(),
        Some(FrontError::FrameTooLarge {
            length: LIMITS.max_frame_size + 1,
            max: LIMITS.max_frame_size
        })
    );
    let mut stray = client_connection(&[(istio_request(), plain())]);
    FrameHeader {
        length: 0,
        kind: CONTINUATION,
        flags: END_HEADERS,
        stream: 3,
    }
    .write(&mut stray);
    assert!(matches!(
        through_inbound(&stray, 4096).0,
        Err(FrontError::Malformed(_))
    ));
    // A HEADERS frame without END_HEADERS, then a PING instead of its CONTINUATION.
    let mut spliced = client_connection(&[(istio_request(), plain())]);
    FrameHeader {
        length: 1,
        kind: HEADERS,
        flags: 0,
        stream: 3,
    }
    .write(&mut spliced);
    spliced.extend_from_slice(&[0x83]);
    spliced.extend_from_slice(&PING);
    assert!(matches!(
        through_inbound(&spliced, 4096).0,
        Err(FrontError::Malformed(_))
    ));
}

/// The fast path: a connection with a host-name authority is read through
/// the front byte for byte, and after its first block the front has stepped
/// out (reads go straight to the socket).
#[tokio::test]
async fn an_acceptable_connection_is_handed_on_unchanged_and_the_front_steps_out() {
    let mut request = istio_request();
    request[3].1 = b"ratelimit.default.svc.cluster.local:8081".to_vec();
    let input = client_connection(&[(request.clone(), plain()), (istio_request(), plain())]);
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let mut front = AuthorityFront::new(server, LIMITS);
    assert_eq!(front.mode(), Mode::Deciding);
    client.write_all(&input).await.expect("written");
    drop(client);
    let mut read = Vec::new();
    front.read_to_end(&mut read).await.expect("read");
    assert_eq!(read, input);
    assert_eq!(front.mode(), Mode::PassingThrough);
    assert!(front.is_direct());
}

/// The same through the IO type, with an Istio cluster name: the front
/// stays in rewriting mode and hyper reads the authority with `_` for `|`.
#[tokio::test]
async fn an_istio_connection_is_rewritten_through_the_front() {
    let input = client_connection(&[(istio_request(), plain())]);
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let mut front = AuthorityFront::new(server, LIMITS);
    client.write_all(&input).await.expect("written");
    drop(client);
    let mut read = Vec::new();
    front.read_to_end(&mut read).await.expect("read");
    assert_eq!(front.mode(), Mode::Rewriting);
    assert!(!front.is_direct());
    let (lists, _) = server_view(&read);
    assert_eq!(lists, vec![acceptable(&istio_request())]);
    assert!(lists[0].contains(&(
        AUTHORITY.to_vec(),
        b"outbound_8081__ratelimit.default.svc.cluster.local".to_vec()
    )));
}
