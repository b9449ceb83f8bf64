//! Free loopback ports for servers that need their port before they start.

use std::net::TcpListener;

/// A loopback port that was free a moment ago.
#[must_use]
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A free port whose Redis cluster bus port (port + 10000) is free and valid too.
#[must_use]
pub fn free_cluster_port() -> u16 {
    // At most 100 tries; the ephemeral range leaves most ports usable.
    for _ in 0..100 {
        let port = free_port();
        if let Some(bus) = port.checked_add(10_000)
            && TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port with a free cluster bus port in 100 tries");
}

/// A tokio listener on an ephemeral port of 127.0.0.1, for servers run in-process.
pub async fn bind_loopback() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback")
}
