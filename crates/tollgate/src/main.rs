//! The `tollgate` command: rate limiting for service meshes and API gateways.
//!
//! Must not know (the README's layout table): algorithms' internals: it wires crates together.
//!
//! Each subcommand is one variant of [`Command`] with its own module.

#![forbid(unsafe_code)]

use std::fmt;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod check;
mod generate;
mod lab;
mod limits_args;
mod limits_command;
mod limits_file;
mod logging;
mod otlp_http;
mod proxy;
mod proxy_limits;
mod serve;
mod simulate;
mod stdout_text;
mod telemetry;
mod tls_args;
mod upstream_env;
mod upstream_redis;
mod validate;
mod version;

/// The process's allocator: mimalloc, whose per-thread free lists make the
/// many small allocations of a check (HTTP/2 frames, header maps, a Redis
/// call's buffers) cheaper than the system allocator's (docs/benchmarks.md,
/// "The allocator"). Building without the default `mimalloc` feature keeps
/// the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(test)]
#[path = "../build/git.rs"]
mod build_git;

/// Rate limiting for service meshes and API gateways.
#[derive(Parser, Debug)]
#[command(name = "tollgate", version = version::VERSION, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Run a rate-limit algorithm against simulated traffic in virtual time.
    Simulate(Box<simulate::SimulateArgs>),
    /// Check limits files (a file or a directory) without starting a server.
    Validate(validate::ValidateArgs),
    /// Serve Envoy's rate limit service (RLS v3, gRPC) from limits files.
    Serve(Box<serve::ServeArgs>),
    /// Ask a running rate limit service for one decision and print it
    /// (exit 0 OK, 3 OVER_LIMIT, 1 error).
    Check(check::CheckArgs),
    /// Load a running service and report its throughput and latency.
    Bench(bench::BenchArgs),
    /// Serve the live lab: a web page that runs algorithms against simulated traffic.
    Lab(lab::LabArgs),
    /// Set, read, list and delete overrides, and read a descriptor's usage, through a running `serve` (its overrides API).
    Limits(limits_command::LimitsArgs),
    /// Run the HTTP sidecar / edge proxy: Envoy local_ratelimit semantics, Istio EnvoyFilters, the global RLS.
    Proxy(Box<proxy::ProxyArgs>),
    /// Write the completion script for a shell on stdout (bash, zsh, fish, elvish, powershell).
    Completions(generate::CompletionsArgs),
    /// Write the man page of `tollgate` (or of one subcommand) on stdout, in roff.
    Man(generate::ManArgs),
}

/// The exit code of `tollgate check` when the answer is OVER_LIMIT.
const OVER_LIMIT_EXIT: u8 = 3;

/// Why a subcommand failed, which decides the exit code.
#[derive(Debug)]
pub enum CommandError {
    /// The command line asks for something impossible (exit code 2, like clap's own errors).
    Usage(String),
    /// The command ran but could not do its job: a file it had to write,
    /// or the limits it checked have errors (exit code 1).
    Failed(String),
}

impl CommandError {
    fn exit_code(&self) -> ExitCode {
        match self {
            CommandError::Usage(_) => ExitCode::from(2),
            CommandError::Failed(_) => ExitCode::from(1),
        }
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Usage(message) | CommandError::Failed(message) => f.write_str(message),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // serve and proxy install their own subscriber (their level and format flags).
    let tool_logs = match &cli.command {
        Command::Simulate(args) => Some((tracing::Level::WARN, args.log.log_format)),
        Command::Validate(args) => Some((tracing::Level::WARN, args.log.log_format)),
        Command::Check(args) => Some((tracing::Level::WARN, args.log.log_format)),
        Command::Bench(args) => Some((tracing::Level::WARN, args.log.log_format)),
        Command::Lab(args) => Some((tracing::Level::INFO, args.log.log_format)),
        Command::Serve(_)
        | Command::Limits(_)
        | Command::Proxy(_)
        | Command::Completions(_)
        | Command::Man(_) => None,
    };
    if let Some((level, format)) = tool_logs {
        logging::init(level, format);
    }
    let result = match &cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Check(args) => match check::run(args) {
            Ok(check::Verdict::Ok) => Ok(()),
            Ok(check::Verdict::OverLimit) => return ExitCode::from(OVER_LIMIT_EXIT),
            Err(error) => Err(error),
        },
        Command::Bench(args) => bench::run(args),
        Command::Lab(args) => lab::run(args),
        Command::Limits(args) => limits_command::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Completions(args) => generate::completions(args),
        Command::Man(args) => generate::man(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            logging::error(&error.to_string());
            error.exit_code()
        }
    }
}
