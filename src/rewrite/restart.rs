//! Making the runtime load rewritten records: containerd's CRI plugin reads its records only at
//! start-up, so the runtime is restarted, by systemd (`node apply --restart-containerd`) or by
//! the operator's command (the agent's `--restart-containerd CMD`), with a time limit.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};

/// A command that restarts the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartCommand {
    program: String,
    args: Vec<String>,
}

impl RestartCommand {
    /// `systemctl restart UNIT`; an error where systemd is not running.
    pub fn systemd(unit: &str) -> Result<Self> {
        if !Path::new("/run/systemd/system").exists() {
            return Err(Error::Restart {
                command: format!("systemctl restart {unit}"),
                reason: "systemd is not running here; restart the runtime yourself".into(),
            });
        }
        Ok(RestartCommand {
            program: "systemctl".into(),
            args: vec!["restart".into(), unit.into()],
        })
    }

    /// A shell command line, run with `sh -c`.
    pub fn shell(command: &str) -> Self {
        RestartCommand {
            program: "sh".into(),
            args: vec!["-c".into(), command.into()],
        }
    }

    fn describe(&self) -> String {
        match self.args.as_slice() {
            [c, line] if self.program == "sh" && c == "-c" => line.clone(),
            args => format!("{} {}", self.program, args.join(" ")),
        }
    }

    /// Runs the command; an error if it cannot start, fails, or outlives `timeout` (it is then
    /// killed).
    pub async fn run(&self, timeout: Duration) -> Result<()> {
        let fail = |reason: String| Error::Restart {
            command: self.describe(),
            reason,
        };
        let run = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .kill_on_drop(true)
            .status();
        match tokio::time::timeout(timeout, run).await {
            Err(_) => Err(fail(format!(
                "did not finish within {timeout:?}; killed it"
            ))),
            Ok(Err(e)) => Err(fail(format!("cannot run it: {e}"))),
            Ok(Ok(s)) if !s.success() => Err(fail(format!("failed ({s})"))),
            Ok(Ok(_)) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_or_slow_command_is_an_error_naming_it() {
        let ok = RestartCommand::shell("true")
            .run(Duration::from_secs(5))
            .await;
        assert!(ok.is_ok());
        let failed = RestartCommand::shell("exit 3")
            .run(Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            failed.contains("`exit 3`") && failed.contains("failed"),
            "{failed}"
        );
        let slow = RestartCommand::shell("sleep 5")
            .run(Duration::from_millis(100))
            .await
            .unwrap_err()
            .to_string();
        assert!(slow.contains("killed it"), "{slow}");
    }
}
