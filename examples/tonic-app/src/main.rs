//! Serves the example: `cargo run -p tonic-app [ADDR]` (default 127.0.0.1:50051), then call
//! `grpc.health.v1.Health/Check` four times in a second with the same `x-api-key`.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:50051".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    tonic_app::server(listener).await?;
    Ok(())
}
