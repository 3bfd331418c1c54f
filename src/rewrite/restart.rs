//! Making the runtime load rewritten records: containerd's CRI plugin reads its records only at
//! start-up, so the runtime is restarted, by systemd or by the operator's command (`node apply`
//! and `node rollback --restart-containerd[=COMMAND]`, the agent's `--restart-containerd
//! COMMAND`), with a time limit; then [`reloaded`] checks what CRI reports.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::rewrite::journal;
use crate::rewrite::verify::{verify, Expect};
use crate::runtime::cri::Cri;
use crate::runtime::record::RecordStore;

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

    /// Checks a command line for [`RestartCommand::shell`] before anything is written, so that a
    /// mistyped one is not found out after apply, with the kubelet stopped and records
    /// rewritten: it must not be empty, and `sh -n` must parse it.
    pub fn check_shell(command: &str) -> Result<()> {
        let fail = |reason: String| Error::Restart {
            command: command.to_string(),
            reason,
        };
        if command.trim().is_empty() {
            return Err(fail("the command is empty".into()));
        }
        let parsed = std::process::Command::new("sh")
            .args(["-n", "-c", command])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|e| fail(format!("cannot run sh to check it: {e}")))?;
        if parsed.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&parsed.stderr);
        let said = said.lines().next().unwrap_or("").trim();
        Err(fail(format!("sh cannot parse it ({said})")))
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

/// After a restart of the runtime: of the containers a journal wrote, those CRI does not report
/// with the value `expect` names (the record holding it, and CRI its hash). A restart command
/// can exit 0 and restart nothing; only this says which hashes the next kubelet will see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// How many containers the journal wrote.
    pub containers: usize,
    /// The names of those not reported as expected, in journal order.
    pub unseen: Vec<String>,
}

impl Reloaded {
    /// How many are reported as expected.
    pub fn seen(&self) -> usize {
        self.containers - self.unseen.len()
    }

    /// The first few of those not reported as expected, for a message: `a, b, c, …`.
    pub fn unseen_named(&self) -> String {
        const NAMED: usize = 5;
        let mut named = self.unseen[..self.unseen.len().min(NAMED)].join(", ");
        if self.unseen.len() > NAMED {
            named.push_str(", …");
        }
        named
    }
}

/// How long the runtime just restarted has to answer CRI: containerd's CRI plugin recovers
/// every container before it serves, which takes seconds on a busy node.
pub const RELOAD_WAIT: Duration = Duration::from_secs(30);

/// What `node verify` checks, for the containers of `journal` (not its pinned manifests), on
/// the runtime `connect` reaches, tried once a second for up to [`RELOAD_WAIT`] while the
/// runtime does not answer. A journal that does not read is an error at once.
pub async fn reloaded<S, F, C>(connect: C, journal: &Path, expect: Expect) -> Result<Reloaded>
where
    S: RecordStore,
    F: Future<Output = Result<(Cri, S)>>,
    C: Fn() -> F,
{
    let contents = journal::read(journal)?;
    let deadline = tokio::time::Instant::now() + RELOAD_WAIT;
    loop {
        let checked = async {
            let (mut cri, store) = connect().await?;
            verify(&mut cri, &store, contents.clone(), expect).await
        }
        .await;
        match checked {
            Ok(out) => {
                let containers: Vec<_> = out.into_iter().filter(|o| o.manifest.is_none()).collect();
                return Ok(Reloaded {
                    containers: containers.len(),
                    unseen: containers
                        .into_iter()
                        .filter(|o| !o.ok)
                        .map(|o| o.name)
                        .collect(),
                });
            }
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_five_unseen_containers_are_named() {
        let r = |n: usize| Reloaded {
            containers: 7,
            unseen: (0..n).map(|i| format!("ns/p/c{i}")).collect(),
        };
        assert_eq!(
            (r(2).seen(), r(2).unseen_named()),
            (5, "ns/p/c0, ns/p/c1".into())
        );
        assert_eq!(r(5).unseen_named().matches("ns/p/").count(), 5);
        assert!(!r(5).unseen_named().ends_with('…'));
        let six = r(6).unseen_named();
        assert!(six.ends_with("ns/p/c4, …") && !six.contains("c5"), "{six}");
    }

    #[test]
    fn a_command_sh_cannot_parse_is_refused_before_it_is_needed() {
        assert!(RestartCommand::check_shell("systemctl restart containerd").is_ok());
        assert!(
            RestartCommand::check_shell("nsenter -t 1 -m -- systemctl restart containerd").is_ok()
        );
        for (bad, says) in [
            ("", "the command is empty"),
            ("  ", "the command is empty"),
            ("systemctl restart 'containerd", "sh cannot parse it"),
            (
                "if true; then systemctl restart containerd",
                "sh cannot parse it",
            ),
        ] {
            let err = RestartCommand::check_shell(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        // Parsed, never run.
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("ran");
        assert!(RestartCommand::check_shell(&format!("touch {}", mark.display())).is_ok());
        assert!(!mark.exists());
    }

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
