//! Serves the example app: `cargo run -p axum-app [ADDR]` (default 127.0.0.1:3000), then
//! `curl -i http://127.0.0.1:3000/` six times in a second.

use std::net::SocketAddr;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    let app = axum_app::app().into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await
}
