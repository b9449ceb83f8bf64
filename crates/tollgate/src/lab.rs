//! `tollgate lab`: serve the live lab page on loopback.

use std::net::SocketAddr;

use clap::Args;
use tokio::net::TcpListener;
use tollgate_lab::web::{self, Lab};

use crate::CommandError;

/// The flags of `tollgate lab`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tollgate lab                        # then open http://127.0.0.1:8089/\n  \
    tollgate lab --addr 127.0.0.1:0     # any free port; the address is printed")]
pub struct LabArgs {
    /// Where to serve the page. Loopback by default: the lab has no authentication.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8089",
        env = "TOLLGATE_LAB_ADDR"
    )]
    addr: SocketAddr,
}

/// Runs `tollgate lab` until Ctrl-C or SIGTERM.
pub fn run(args: &LabArgs) -> Result<(), CommandError> {
    if !args.addr.ip().is_loopback() {
        eprintln!(
            "warning: serving the lab on {}, which is not loopback: anyone who can reach it can run simulations",
            args.addr
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tollgate-lab")
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.addr).await.map_err(|error| {
            CommandError::Failed(format!("cannot listen on {}: {error}", args.addr))
        })?;
        let addr = listener.local_addr().map_err(|error| {
            CommandError::Failed(format!("cannot read the listening address: {error}"))
        })?;
        println!("tollgate lab: open http://{addr}/");
        web::serve(listener, Lab::default(), crate::serve::shutdown_signal())
            .await
            .map_err(|error| CommandError::Failed(format!("the lab stopped: {error}")))
    })
}
