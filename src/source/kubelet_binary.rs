//! The kubelet as a program on the node: the version a kubelet binary says it is, and whether a
//! process is a kubelet (and which). Only read and run with `--version`, never changed.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::kubelet::version::KubeletVersion;

/// The version of the kubelet binary at `path`, from `path --version` (`Kubernetes v1.31.4`).
pub async fn binary_version(path: &Path) -> Result<KubeletVersion> {
    let fail = |reason: String| Error::Input {
        source_name: path.display().to_string(),
        reason,
    };
    let run = tokio::process::Command::new(path)
        .arg("--version")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .map_err(|_| fail("--version did not answer within 10 s".into()))?
        .map_err(|e| fail(format!("cannot run it: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .find(|w| w.starts_with("v1.") || w.starts_with("1."))
        .ok_or_else(|| fail(format!("--version said {:?}", text.trim())))?;
    version.parse().map_err(|e| fail(format!("--version: {e}")))
}

/// The name of process `pid` if it is a kubelet: a name that starts with `kubelet` (`kubelet`,
/// `kubelet-1.30`), by `/proc/PID/comm` or the program name in `/proc/PID/cmdline`. `None` when
/// it is not, or cannot be read (gone, or in no PID namespace this process sees).
pub fn kubelet_name(pid: u32) -> Option<String> {
    let dir = Path::new("/proc").join(pid.to_string());
    let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
    let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let program = String::from_utf8_lossy(argv0);
    let base = program.rsplit('/').next().unwrap_or_default();
    let name = [comm.trim(), base]
        .into_iter()
        .find(|name| name.starts_with("kubelet"))?;
    Some(name.to_string())
}

/// Every process this one sees that is a kubelet ([`kubelet_name`]): its pid and name. Only
/// processes in this process's PID namespace are visible: a pod needs `hostPID`.
pub fn kubelet_processes() -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            kubelet_name(pid).map(|name| (pid, name))
        })
        .collect()
}

/// The command line of a running kubelet ([`kubelet_processes`], the first seen): its pid and
/// its arguments after the program name. `None` when no kubelet is seen (or it is gone).
pub fn kubelet_command_line() -> Option<(u32, Vec<String>)> {
    let (pid, _) = kubelet_processes().into_iter().next()?;
    Some((pid, arguments(pid)?))
}

/// The arguments of process `pid` after its program name (`/proc/PID/cmdline`).
fn arguments(pid: u32) -> Option<Vec<String>> {
    let bytes = std::fs::read(Path::new("/proc").join(pid.to_string()).join("cmdline")).ok()?;
    Some(
        bytes
            .split(|&b| b == 0)
            .skip(1)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// The version of the kubelet running as process `pid`: its own binary (`/proc/PID/exe`, the
/// file it runs even if another was put at its path since) asked `--version`. `None` when the
/// process is not a kubelet ([`kubelet_name`]).
pub async fn process_kubelet_version(pid: u32) -> Option<Result<KubeletVersion>> {
    kubelet_name(pid)?;
    let exe = Path::new("/proc").join(pid.to_string()).join("exe");
    Some(binary_version(&exe).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process named `kubelet` (a copy of `sleep`) is seen as one, with its arguments.
    #[test]
    fn a_kubelets_arguments_are_read_from_proc() {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = dir.path().join("kubelet");
        let Some(sleep) = ["/bin/sleep", "/usr/bin/sleep"]
            .into_iter()
            .find(|p| Path::new(p).exists())
        else {
            return;
        };
        std::fs::copy(sleep, &kubelet).unwrap();
        let mut child = std::process::Command::new(&kubelet)
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        // A vfork-style spawn returns once the child has left the parent's memory, which the
        // kernel does before it renames the child and sets out its arguments: wait for those.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let (mut seen, mut args) = (false, None);
        while std::time::Instant::now() < deadline {
            seen = kubelet_processes().iter().any(|(p, _)| *p == pid);
            args = arguments(pid);
            if seen && args.as_deref() == Some(&["30".to_string()][..]) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(seen, "the copy named kubelet is a kubelet");
        assert_eq!(args, Some(vec!["30".to_string()]));
        assert_eq!(kubelet_name(pid), None, "gone");
    }
}
