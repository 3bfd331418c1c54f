//! The command line: arguments, every output format, the exit status, one file per subcommand.
//! `anyhow` lives here and nowhere else in the library.

/// `eprintln!` that never panics. With stderr closed (`kubehash … 2>&1 | head`), `eprintln!`
/// panics, and kubehash would exit 101, no documented code; a line that cannot be written is
/// dropped instead. `tests/code_rules.rs` holds the library to it. The line is one line for a
/// person: control characters in what it quotes are shown, not obeyed
/// ([`output::for_people`]).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($arg)*);
        let _ = writeln!(
            std::io::stderr(),
            "{}",
            $crate::cli::output::for_people(&line, false, false)
        );
    }};
}

pub mod args; // clap structs
pub mod exit; // ExitStatus
pub mod output; // every table and every -o format
pub mod hash_output; // hash rows, streamed in every -o format
mod support; // the async runtime, logs, signals, input files
mod node_pods; // where node commands get this node's pods, manifests and old kubelet

mod agent;
mod audit;
mod completion;
mod hash;
mod matrix;
mod node;
mod scan;
mod shim;

use std::io;

use clap::Parser;

use crate::cli::args::{Cli, Command};
use crate::cli::exit::ExitStatus;

/// Parses the arguments, runs the subcommand, and reports an error on one line of stderr.
pub fn main() -> ExitStatus {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match cli.command {
        Command::Hash(args) => hash::run(args),
        Command::Scan(args) => scan::run(args),
        Command::Matrix(args) => matrix::run(args),
        Command::Node { command } => node::run(command),
        Command::Shim(args) => shim::run(args),
        Command::Audit { command } => audit::run(command),
        Command::Agent(args) => agent::run(args),
        Command::Completion(args) => completion::run(args),
    };
    match result {
        Ok(status) => status,
        // `kubehash hash … | head` closing the pipe is not an error worth reporting.
        Err(e)
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            ExitStatus::Success
        }
        Err(e) => {
            say!("kubehash: {}", crate::error::causes(e.as_ref()));
            ExitStatus::Failure
        }
    }
}

/// `--help` and `--version` print as clap prints them; a usage error is one line on stderr and
/// [`ExitStatus::Failure`], never clap's exit 2, which means "some containers could not be
/// assessed" here.
fn usage_error(e: clap::Error) -> ExitStatus {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitStatus::Success;
    }
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).skip_while(|l| l.is_empty());
    let mut first = match e.kind() {
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => "a subcommand is missing".into(),
        _ => lines
            .next()
            .unwrap_or("bad arguments")
            .trim_start_matches("error: ")
            .to_string(),
    };
    if first.ends_with(':') {
        // "the following required arguments were not provided:" and the list below it.
        let list: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
        first = format!("{first} {}", list.join(", "));
    } else if let Some(values) = lines.find(|l| l.starts_with("[possible values:")) {
        // An invalid value: the ones that are valid, on the same line.
        first = format!("{first} {values}");
    }
    say!("kubehash: {first} (see kubehash --help)");
    ExitStatus::Failure
}
