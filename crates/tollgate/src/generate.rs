//! `tollgate completions SHELL` and `tollgate man`: shell completions and a man page generated from the command line's own definition.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::{Cli, CommandError};

/// The arguments of `tollgate completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Writes the completion script for `args.shell` on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<(), CommandError> {
    let mut command = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut command, "tollgate", &mut out);
    out.flush()
        .map_err(|error| CommandError::Failed(format!("cannot write the completions: {error}")))
}

/// The arguments of `tollgate man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// A subcommand whose page to write (`serve`, `proxy`, ...); the top-level page when absent.
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

/// Writes the man page (roff, section 1) of `tollgate` or of one subcommand on stdout.
pub fn man(args: &ManArgs) -> Result<(), CommandError> {
    let top = Cli::command();
    let command = match &args.subcommand {
        None => top,
        Some(name) => {
            let names: Vec<&str> = top.get_subcommands().map(|s| s.get_name()).collect();
            let Some(sub) = top.find_subcommand(name) else {
                return Err(CommandError::Usage(format!(
                    "no subcommand {name:?}; one of {}",
                    names.join(", ")
                )));
            };
            let full = format!("tollgate-{name}");
            sub.clone()
                .display_name(full.clone())
                .bin_name(full)
                .version(crate::version::VERSION)
        }
    };
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .and_then(|()| {
            let mut out = std::io::stdout().lock();
            out.write_all(&page)?;
            out.flush()
        })
        .map_err(|error| CommandError::Failed(format!("cannot write the man page: {error}")))
}
