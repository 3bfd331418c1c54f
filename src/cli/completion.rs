//! `kubehash completion SHELL`: a completion script, generated from the clap definitions, so it
//! names exactly the commands and flags `args.rs` defines.

use std::io::Write as _;

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::args::{Cli, CompletionArgs};
use crate::cli::exit::ExitStatus;
use crate::cli::support::stdout;

pub fn run(a: CompletionArgs) -> Result<ExitStatus> {
    // Into memory first: clap_complete panics on a write error, and `| head` is none here.
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "kubehash", &mut script);
    let mut out = stdout();
    out.write_all(&script)?;
    out.flush()?;
    Ok(ExitStatus::Success)
}
