//! `tollgate lab`: serve the live lab page on loopback.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Args;
use tokio::net::TcpListener;
use tollgate_lab::RedisStores;
use tollgate_lab::web::{self, Lab};

use crate::CommandError;

/// The flags of `tollgate lab`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tollgate lab                        # then open http://127.0.0.1:8089/\n  \
    tollgate lab --addr 127.0.0.1:0     # any free port; the address is printed\n  \
    tollgate lab --redis redis://127.0.0.1:6379   # runs decide on Redis with the production script")]
pub struct LabArgs {
    /// How log lines, warnings and errors are written.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// Where to serve the page. Loopback by default: the lab has no authentication.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8089",
        env = "TOLLGATE_LAB_ADDR"
    )]
    addr: SocketAddr,

    /// Decide the page's runs on this Redis (any URL `tollgate serve --store` takes) with the
    /// production Lua script at the virtual time; a run can still choose memory (store=memory).
    /// Redis runs are capped at 1,000,000 script calls: each decision is one.
    #[arg(long, value_name = "URL", env = "TOLLGATE_LAB_REDIS")]
    redis: Option<String>,
}

/// Runs `tollgate lab` until Ctrl-C or SIGTERM.
pub fn run(args: &LabArgs) -> Result<(), CommandError> {
    if !args.addr.ip().is_loopback() {
        crate::logging::warning(&format!(
            "serving the lab on {}, which is not loopback: anyone who can reach it can run simulations",
            args.addr
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tollgate-lab")
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    runtime.block_on(async {
        let mut lab = Lab::default();
        if let Some(url) = &args.redis {
            let redis = RedisStores::connect(url)
                .await
                .map_err(CommandError::Failed)?;
            println!("tollgate lab: runs decide on Redis {}", redis.describe());
            lab = lab.with_redis(Arc::new(redis));
        }
        let listener = TcpListener::bind(args.addr).await.map_err(|error| {
            CommandError::Failed(format!("cannot listen on {}: {error}", args.addr))
        })?;
        let addr = listener.local_addr().map_err(|error| {
            CommandError::Failed(format!("cannot read the listening address: {error}"))
        })?;
        // The signal handlers are in place before the address is announced.
        let signal = tollgate_runtime::shutdown_signal();
        println!("tollgate lab: open http://{addr}/");
        web::serve(listener, lab, signal)
            .await
            .map_err(|error| CommandError::Failed(format!("the lab stopped: {error}")))
    })
}
