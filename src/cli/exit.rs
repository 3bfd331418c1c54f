//! The exit status of every subcommand, in one place (documented in the README and `--help`).

use std::process::ExitCode;

/// How a `kubehash` run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: done; everything was assessed (or written, verified, restored).
    Success,
    /// 1: unusable input or flags, or an error that stopped the run; nothing half-written. For
    /// `hash`, also a container that could not be hashed: every row is printed, that one with
    /// its error (as since the first release; `scan` and `matrix` say 2 for the same).
    Failure,
    /// 2: done, but some containers could not be assessed, written, verified or restored (each
    /// is in the output), or `apply` stopped writing because the evidence was gone.
    Incomplete,
    /// 3: with `--fail-on-restart`, some container would be restarted.
    Restarts,
}

impl ExitStatus {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Incomplete => 2,
            ExitStatus::Restarts => 3,
        }
    }

    /// `Incomplete` when `complete` is false.
    pub fn unless_incomplete(complete: bool) -> Self {
        if complete {
            ExitStatus::Success
        } else {
            ExitStatus::Incomplete
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> Self {
        ExitCode::from(s.code())
    }
}
