//! The `tollgate` command: rate limiting for service meshes and API gateways.
//!
//! Each subcommand is one variant of [`Command`] with its own module.

use std::fmt;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod duration;
mod simulate;
mod validate;

/// Rate limiting for service meshes and API gateways.
#[derive(Parser, Debug)]
#[command(name = "tollgate", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once at startup; boxing the flags would gain nothing"
)]
enum Command {
    /// Run a rate-limit algorithm against simulated traffic in virtual time.
    Simulate(simulate::SimulateArgs),
    /// Check limits files (a file or a directory) without starting a server.
    Validate(validate::ValidateArgs),
}

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
    let result = match &cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Validate(args) => validate::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            error.exit_code()
        }
    }
}
