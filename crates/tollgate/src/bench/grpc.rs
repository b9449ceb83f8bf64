//! A gRPC unary call made straight on an `h2` connection: the RLS load's client.
//!
//! A load generator has to cost less per call than the server it loads, or
//! it measures itself. tonic's `Channel` puts a buffer task and hyper's
//! dispatch task between a caller and its HTTP/2 connection, each reached
//! over a channel; here the caller's own task opens the stream, sends the
//! framed message and reads the answer, and only the connection's task sits
//! between it and the socket (docs/benchmarks.md, "A load generator lighter
//! than the server"). The message is framed as gRPC frames it (one
//! uncompressed length-prefixed message), and the answer's `grpc-status`
//! (trailers, or headers for a trailers-only answer) decides between the
//! decoded message and an error status, as a gRPC client would.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use h2::{Reason, RecvStream};
use http::header::{CONTENT_TYPE, TE};
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tonic::{Code, Status};

/// The length of a gRPC message's prefix: a compression flag and a 4-byte length.
const PREFIX: usize = 5;

/// The largest answer read, prefix included: tonic's default limit on a
/// decoded message (4 MiB), so a service cannot make the load hold more.
const MAX_ANSWER: usize = 4 << 20;

/// One HTTP/2 connection to a gRPC service, shared by the calls made on it,
/// and opened again when the service closes it (a GOAWAY at its maximum
/// connection age, as Envoy's clients see it): the calls still to start go
/// on the new connection, the ones in flight finish on the old.
pub(super) struct GrpcConnection {
    /// Where it connects (`http://host:port`).
    addr: Uri,
    /// How long a connection may take to open.
    timeout: Duration,
    /// The connection calls start on, and how many times it was opened.
    current: Mutex<(u64, SendRequest<Bytes>)>,
    /// Held while the connection is opened again, so it is opened once.
    reopening: tokio::sync::Mutex<()>,
}

impl GrpcConnection {
    /// Connects to `addr` (`http://host:port`; HTTP/2 with prior knowledge)
    /// within `timeout`; the connection's task runs on the current runtime.
    pub(super) async fn connect(addr: Uri, timeout: Duration) -> Result<Arc<Self>, String> {
        let send = open(&addr, timeout).await?;
        Ok(Arc::new(Self {
            addr,
            timeout,
            current: Mutex::new((0, send)),
            reopening: tokio::sync::Mutex::new(()),
        }))
    }

    /// The connection calls start on now, and its number.
    fn current(&self) -> (u64, SendRequest<Bytes>) {
        self.current.lock().clone()
    }

    /// A connection ready for a new stream: the current one, or, when that
    /// one takes no more (the service said GOAWAY, or it failed), a new one
    /// opened once for every call that found it so.
    async fn ready(&self) -> Result<SendRequest<Bytes>, Status> {
        let (number, send) = self.current();
        if let Ok(send) = send.ready().await {
            return Ok(send);
        }
        let _reopening = self.reopening.lock().await;
        let (now, send) = self.current();
        if now != number {
            // Another call opened it again while this one waited.
            return send.ready().await.map_err(transport);
        }
        let send = open(&self.addr, self.timeout)
            .await
            .map_err(|error| Status::unavailable(format!("cannot reconnect: {error}")))?;
        *self.current.lock() = (number + 1, send.clone());
        send.ready().await.map_err(transport)
    }

    /// Calls the method at `uri` (scheme, authority and path) with `message`
    /// and decodes its answer, or the error status the call ended with; a
    /// call not answered within `timeout` is `DEADLINE_EXCEEDED`.
    pub(super) fn unary<M: prost::Message + Default, Q: prost::Message>(
        self: Arc<Self>,
        uri: Uri,
        message: &Q,
        timeout: Duration,
    ) -> impl Future<Output = Result<M, Status>> + Send + use<M, Q> {
        let body = frame(message);
        async move {
            match tokio::time::timeout(timeout, self.call(uri, body)).await {
                Ok(answer) => answer,
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "no answer within {timeout:?}"
                ))),
            }
        }
    }

    /// Sends one framed message and reads the answer; a call the service
    /// closed its connection without taking goes once more, on the
    /// connection opened in its place.
    async fn call<M: prost::Message + Default>(&self, uri: Uri, body: Bytes) -> Result<M, Status> {
        let response = match self.answer_headers(uri.clone(), body.clone()).await? {
            Some(response) => response,
            None => self.answer_headers(uri, body).await?.ok_or_else(|| {
                Status::unavailable("the service closed two connections without taking the call")
            })?,
        };
        if response.status() != http::StatusCode::OK {
            return Err(Status::unknown(format!(
                "HTTP status {} instead of 200",
                response.status()
            )));
        }
        let (parts, mut body) = response.into_parts();
        if let Some(status) = status_of(&parts.headers) {
            // A trailers-only answer: the status came with the headers.
            return Err(status.unwrap_or_else(|| {
                Status::internal("a trailers-only answer with grpc-status 0 and no message")
            }));
        }
        let mut answer = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(transport)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            append(&mut answer, &chunk)?;
        }
        let trailers = body.trailers().await.map_err(transport)?;
        match trailers.as_ref().and_then(status_of) {
            Some(None) => unframe(answer.freeze()),
            Some(Some(status)) => Err(status),
            None => Err(Status::internal("the answer ended without grpc-status")),
        }
    }

    /// Opens a stream for `body` and waits for the answer's headers; `None`
    /// when the service did not take the call (it said GOAWAY before it, or
    /// refused the stream), which makes it safe to send again.
    async fn answer_headers(
        &self,
        uri: Uri,
        body: Bytes,
    ) -> Result<Option<Response<RecvStream>>, Status> {
        let not_taken_or_failed = |error: h2::Error| {
            if not_taken(&error) {
                Ok(None)
            } else {
                Err(transport(error))
            }
        };
        let mut send = self.ready().await?;
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        let (response, mut stream) = match send.send_request(request, false) {
            Ok(opened) => opened,
            Err(error) => return not_taken_or_failed(error),
        };
        if let Err(error) = stream.send_data(body, true) {
            return not_taken_or_failed(error);
        }
        response
            .await
            .map_or_else(not_taken_or_failed, |response| Ok(Some(response)))
    }
}

/// Opens an HTTP/2 connection to `addr` within `timeout` and runs its task.
async fn open(addr: &Uri, timeout: Duration) -> Result<SendRequest<Bytes>, String> {
    let host = addr.host().ok_or_else(|| format!("{addr} has no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = addr.port_u16().unwrap_or(80);
    let connect = async {
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|error| error.to_string())?;
        tcp.set_nodelay(true).map_err(|error| error.to_string())?;
        h2::client::handshake(tcp)
            .await
            .map_err(|error| format!("HTTP/2 handshake: {error}"))
    };
    let (send, connection) = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| format!("no connection within {timeout:?}"))??;
    tokio::spawn(async move {
        // The connection ends when the load does, when the service closes
        // it, or with an error the calls on it then report.
        let _ = connection.await;
    });
    Ok(send)
}

/// Adds `chunk` to the answer read so far, within [`MAX_ANSWER`].
fn append(answer: &mut BytesMut, chunk: &[u8]) -> Result<(), Status> {
    if answer.len() + chunk.len() > MAX_ANSWER {
        return Err(Status::out_of_range(format!(
            "an answer over {MAX_ANSWER} bytes"
        )));
    }
    answer.extend_from_slice(chunk);
    Ok(())
}

/// `message` as one uncompressed gRPC frame.
fn frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut framed = BytesMut::with_capacity(PREFIX + len);
    framed.put_u8(0);
    framed.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // Cannot fail: the buffer holds `encoded_len` bytes.
    let _ = message.encode(&mut framed);
    framed.freeze()
}

/// The one message of an answer's body.
fn unframe<M: prost::Message + Default>(mut body: Bytes) -> Result<M, Status> {
    if body.len() < PREFIX {
        return Err(Status::internal(format!(
            "an answer of {} bytes, shorter than a gRPC frame's prefix",
            body.len()
        )));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::internal("a compressed answer (none was asked for)"));
    }
    if body.len() != len {
        return Err(Status::internal(format!(
            "an answer framed as {len} bytes carries {}",
            body.len()
        )));
    }
    M::decode(body).map_err(|error| Status::internal(format!("cannot decode the answer: {error}")))
}

/// The gRPC status in `headers` (its message as sent): none if it has no
/// `grpc-status`, `Some(None)` for OK.
fn status_of(headers: &HeaderMap) -> Option<Option<Status>> {
    let code = Code::from_bytes(headers.get("grpc-status")?.as_bytes());
    if code == Code::Ok {
        return Some(None);
    }
    let message = headers
        .get("grpc-message")
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .unwrap_or_default();
    Some(Some(Status::new(code, message)))
}

/// Whether `error` says the service never took the stream: a GOAWAY
/// without error that came before it, or `REFUSED_STREAM` (RFC 9113,
/// section 8.7: such a request may be sent again).
fn not_taken(error: &h2::Error) -> bool {
    let graceful_go_away =
        error.is_go_away() && error.is_remote() && error.reason() == Some(Reason::NO_ERROR);
    graceful_go_away || error.reason() == Some(Reason::REFUSED_STREAM)
}

/// An HTTP/2 error as the status a gRPC client reports for it.
fn transport(error: h2::Error) -> Status {
    Status::unavailable(format!("HTTP/2: {error}"))
}

#[cfg(test)]
mod tests {
    use tollgate_protocol::rls::wire::{CODE_OVER_LIMIT, RateLimitResponse};

    use super::*;

    fn answer() -> RateLimitResponse {
        RateLimitResponse {
            overall_code: CODE_OVER_LIMIT,
            ..Default::default()
        }
    }

    #[test]
    fn a_framed_message_unframes_to_itself() {
        let framed = frame(&answer());
        assert_eq!(framed[0], 0, "not compressed");
        assert_eq!(
            u32::from_be_bytes([framed[1], framed[2], framed[3], framed[4]]) as usize,
            framed.len() - PREFIX
        );
        let decoded = unframe::<RateLimitResponse>(framed).expect("it decodes");
        assert_eq!(decoded, answer());
    }

    #[test]
    fn a_short_compressed_or_mislengthed_answer_is_an_internal_error() {
        let framed = frame(&answer());
        let mut compressed = BytesMut::from(&framed[..]);
        compressed[0] = 1;
        let mut longer = BytesMut::from(&framed[..]);
        longer.put_u8(0);
        for (body, says) in [
            (framed.slice(..3), "shorter than a gRPC frame's prefix"),
            (compressed.freeze(), "compressed"),
            (framed.slice(..framed.len() - 1), "carries"),
            (longer.freeze(), "carries"),
        ] {
            let status = unframe::<RateLimitResponse>(body).expect_err(says);
            assert_eq!(status.code(), Code::Internal);
            assert!(status.message().contains(says), "{status:?}");
        }
    }

    #[test]
    fn an_answer_is_read_up_to_its_bound_and_no_further() {
        let mut answer = BytesMut::new();
        append(&mut answer, &vec![7; MAX_ANSWER - 1]).expect("under the bound");
        append(&mut answer, &[7]).expect("at the bound");
        let status = append(&mut answer, &[7]).expect_err("over the bound");
        assert_eq!(status.code(), Code::OutOfRange);
        assert_eq!(answer.len(), MAX_ANSWER, "nothing kept past the bound");
    }

    #[test]
    fn only_a_refused_stream_or_a_graceful_go_away_is_sent_again() {
        assert!(not_taken(&h2::Error::from(Reason::REFUSED_STREAM)));
        for reason in [Reason::INTERNAL_ERROR, Reason::CANCEL, Reason::NO_ERROR] {
            assert!(!not_taken(&h2::Error::from(reason)), "{reason:?}");
        }
    }

    #[test]
    fn grpc_status_zero_is_ok_and_any_other_an_error_with_its_message() {
        let mut headers = HeaderMap::new();
        assert!(status_of(&headers).is_none(), "no grpc-status yet");
        headers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(matches!(status_of(&headers), Some(None)));
        headers.insert("grpc-status", HeaderValue::from_static("8"));
        headers.insert("grpc-message", HeaderValue::from_static("over capacity"));
        let status = status_of(&headers).flatten().expect("an error");
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.message(), "over capacity");
    }
}
