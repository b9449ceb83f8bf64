//! The arguments of `tollgate bench` and the choice of what to load.

use clap::{Args, Subcommand};

use super::http::{self, HttpArgs};
use super::rls::{self, RlsArgs};
use crate::CommandError;

/// The arguments of `tollgate bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// How log lines, warnings and errors are written.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// What to load.
    #[command(subcommand)]
    pub target: BenchTarget,
}

/// The services `tollgate bench` can load.
#[derive(Subcommand, Debug)]
pub enum BenchTarget {
    /// Load a rate limit service (RLS v3, gRPC) with ShouldRateLimit calls.
    Rls(RlsArgs),
    /// Load an HTTP server or proxy with GET requests over HTTP/1.1 keep-alive connections.
    Http(HttpArgs),
}

/// Runs `tollgate bench`.
pub fn run(args: &BenchArgs) -> Result<(), CommandError> {
    match &args.target {
        BenchTarget::Rls(args) => rls::run(args),
        BenchTarget::Http(args) => http::run(args),
    }
}
