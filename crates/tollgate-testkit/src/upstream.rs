//! A loopback upstream for proxy tests: `200 upstream ok` to every request, one thread per
//! connection, keep-alive; `GET /echo…` answers with the request's `x-*` and `traceparent` headers, one per line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::thread::{self, JoinHandle};

use crate::http::{CONNECT_TIMEOUT, IO_TIMEOUT};

/// The test's upstream: `200 upstream ok` to every request, one thread per
/// connection, keep-alive; `GET /echo…` answers with the request's `x-*` and `traceparent`
/// headers, one per line. Counts the requests it answered.
#[derive(Debug)]
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// How many requests it answered.
    pub served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    /// Starts it on a free loopback port.
    #[must_use]
    pub fn spawn() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("the upstream binds");
        let addr = listener.local_addr().expect("the upstream has an address");
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let flag = Arc::clone(&stop);
        let count = Arc::clone(&served);
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let count = Arc::clone(&count);
                thread::spawn(move || serve_upstream_connection(stream, &count));
            }
        });
        Upstream {
            addr,
            served,
            stop,
            thread: Some(thread),
        }
    }
}

fn serve_upstream_connection(stream: TcpStream, count: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let path = request_line.split(' ').nth(1).unwrap_or("/").to_owned();
        let mut echoed = String::new();
        let mut length = 0u64;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                if name == "content-length" {
                    length = value.trim().parse().unwrap_or(0);
                }
                if name == "transfer-encoding" && value.to_ascii_lowercase().contains("chunked") {
                    chunked = true;
                }
                if name.starts_with("x-") || name == "traceparent" {
                    echoed.push_str(&format!("{name}: {}\n", value.trim()));
                }
            }
        }
        let whole = if chunked {
            read_chunked(&mut reader)
        } else {
            // Read without holding it: a length may be far larger than what arrives.
            std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink())
                .is_ok_and(|read| read == length)
        };
        if !whole {
            // Only a complete request counts, and the connection ends.
            return;
        }
        count.fetch_add(1, Ordering::SeqCst);
        let text = if path.starts_with("/echo") {
            echoed
        } else {
            "upstream ok".to_owned()
        };
        let written = write!(
            writer,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if written.is_err() || writer.flush().is_err() {
            return;
        }
    }
}

/// The largest chunk the upstream reads (a test's bodies are small).
const MAX_CHUNK_BYTES: usize = 16 << 20;

/// Reads a chunked body to its end (chunks, the last chunk, trailers);
/// whether it was whole and well formed.
fn read_chunked(reader: &mut impl BufRead) -> bool {
    loop {
        let mut size_line = String::new();
        if reader.read_line(&mut size_line).unwrap_or(0) == 0 {
            return false;
        }
        let size = size_line.trim_end().split(';').next().unwrap_or("");
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            return false;
        };
        if size > MAX_CHUNK_BYTES {
            return false;
        }
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return false;
                }
                if line.trim_end().is_empty() {
                    return true;
                }
            }
        }
        let mut chunk = vec![0u8; size + 2];
        if reader.read_exact(&mut chunk).is_err() || !chunk.ends_with(b"\r\n") {
            return false;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
