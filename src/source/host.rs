//! What the node's own files say, for preflight: the cgroup hierarchy (version, controllers, the
//! pod cgroups and which driver's layout they follow), the kubelet's checkpoints under its root
//! directory, its config file and the flags kubeadm gives it. Only read, never written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::kubelet::once_keys::value_from_slice;
use crate::source::manifests::documents;

/// Where to look.
#[derive(Debug, Clone)]
pub struct HostPaths {
    /// The cgroup mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// The kubelet's root directory (`/var/lib/kubelet`).
    pub kubelet_root: PathBuf,
    /// The kubelet's config file (`/var/lib/kubelet/config.yaml`).
    pub kubelet_config: PathBuf,
    /// Files of kubelet flags (`VAR="…"` lines, as systemd's `EnvironmentFile=` reads them), in
    /// the order the kubelet's unit gives them ([`KUBELET_FLAG_FILES`]). A later flag overrides
    /// an earlier one.
    pub kubelet_flags: Vec<PathBuf>,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            cgroup_root: "/sys/fs/cgroup".into(),
            kubelet_root: "/var/lib/kubelet".into(),
            kubelet_config: "/var/lib/kubelet/config.yaml".into(),
            kubelet_flags: KUBELET_FLAG_FILES.iter().map(PathBuf::from).collect(),
        }
    }
}

/// Where kubeadm and the kubelet packages keep the kubelet's flags: kubeadm's
/// `KUBELET_KUBEADM_ARGS`, then `KUBELET_EXTRA_ARGS` (deb, then rpm), as the kubeadm drop-in
/// `10-kubeadm.conf` passes them; and kubespray's `kubelet.env` (`KUBELET_ARGS` and the rest).
pub const KUBELET_FLAG_FILES: &[&str] = &[
    "/var/lib/kubelet/kubeadm-flags.env",
    "/etc/default/kubelet",
    "/etc/sysconfig/kubelet",
    "/etc/kubernetes/kubelet.env",
];

/// The checkpoint files preflight reads, relative to the kubelet's root directory.
pub const CHECKPOINTS: &[&str] = &[
    "cpu_manager_state",
    "memory_manager_state",
    "dra_manager_state",
    "device-plugins/kubelet_internal_checkpoint",
    "allocated_pods_state",
    "actuated_pods_state",
];

/// The node's files, as read.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// cgroup v2 (unified): `cgroup.controllers` at the root.
    pub cgroup_v2: bool,
    /// Controllers available at the root (v2) or mounted hierarchies (v1).
    pub root_controllers: Vec<String>,
    /// The controllers enabled for pods, in the `kubepods` cgroup (v2), by layout.
    pub kubepods_controllers: Option<Vec<String>>,
    /// Pod UID (with `-`) → the driver whose layout its cgroup follows (`systemd`, `cgroupfs`).
    pub pod_cgroups: BTreeMap<String, &'static str>,
    /// The kubelet's config file, parsed (`None` when absent or unreadable).
    pub kubelet_config: Option<Value>,
    /// Why the kubelet's config file, which exists, could not be read or parsed.
    pub kubelet_config_error: Option<String>,
    /// Flags from the flags files, in order.
    pub kubelet_flags: Vec<String>,
    /// Checkpoint name → its JSON, or why it could not be read as JSON.
    pub checkpoints: BTreeMap<String, Result<Value, String>>,
    /// Files that exist but could not be read, with why.
    pub problems: Vec<String>,
}

impl Host {
    /// Reads what exists; what is missing stays empty.
    pub fn read(paths: &HostPaths) -> Host {
        let mut h = Host::default();
        let root = &paths.cgroup_root;
        match std::fs::read_to_string(root.join("cgroup.controllers")) {
            Ok(text) => {
                h.cgroup_v2 = true;
                h.root_controllers = words(&text);
            }
            Err(_) => {
                h.root_controllers = std::fs::read_dir(root)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .flat_map(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .split(',')
                            .map(str::to_string)
                            .collect::<Vec<_>>()
                    })
                    .collect();
            }
        }
        // v1 keeps one tree per controller; the memory tree has every pod cgroup.
        let base = if h.cgroup_v2 {
            root.clone()
        } else {
            root.join("memory")
        };
        for (driver, top) in [("systemd", "kubepods.slice"), ("cgroupfs", "kubepods")] {
            let top = base.join(top);
            if !top.is_dir() {
                continue;
            }
            if h.cgroup_v2 && h.kubepods_controllers.is_none() {
                h.kubepods_controllers = std::fs::read_to_string(top.join("cgroup.controllers"))
                    .ok()
                    .map(|t| words(&t));
            }
            for dir in subdirs(&top).into_iter().chain(
                subdirs(&top)
                    .iter()
                    .flat_map(|d| subdirs(d))
                    .collect::<Vec<_>>(),
            ) {
                if let Some(uid) = pod_uid(&dir) {
                    h.pod_cgroups.insert(uid, driver);
                }
            }
        }
        match read_config(&paths.kubelet_config) {
            Ok(config) => h.kubelet_config = config,
            Err(e) => {
                h.problems.push(e.clone());
                h.kubelet_config_error = Some(e);
            }
        }
        for path in &paths.kubelet_flags {
            match std::fs::read_to_string(path) {
                Ok(text) => h.kubelet_flags.extend(flags(&text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => h.problems.push(format!("{}: {e}", path.display())),
            }
        }
        for name in CHECKPOINTS {
            let path = paths.kubelet_root.join(name);
            if let Ok(bytes) = std::fs::read(&path) {
                let parsed = value_from_slice(&bytes).map_err(|e| e.to_string());
                h.checkpoints.insert(name.to_string(), parsed);
            }
        }
        h
    }

    /// Feature gate `gate` as the kubelet's flags files and config set it
    /// ([`crate::source::kubelet_args::feature_gate`]), read on its own: files that cannot be
    /// read count as not setting it (the preflight checks say what they are).
    pub fn kubelet_feature_gate(paths: &HostPaths, gate: &str) -> Option<bool> {
        let config = read_config(&paths.kubelet_config).ok().flatten();
        let args: Vec<String> = paths
            .kubelet_flags
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .flat_map(|text| flags(&text))
            .collect();
        crate::source::kubelet_args::feature_gate(&args, config.as_ref(), gate)
    }

    /// The cgroup driver the kubelet is configured with: its `--cgroup-driver` flag (deprecated,
    /// and over the config file, as every flag is), else the config's `cgroupDriver` (the
    /// kubelet's default, `cgroupfs`, when the file does not set it); `None` when neither is
    /// there to read.
    pub fn configured_driver(&self) -> Option<&str> {
        if let Some((_, Some(driver))) =
            crate::source::kubelet_args::flag_in(&self.kubelet_flags, "--cgroup-driver")
        {
            return Some(driver);
        }
        let config = self.kubelet_config.as_ref()?;
        Some(
            config
                .get("cgroupDriver")
                .and_then(Value::as_str)
                .unwrap_or("cgroupfs"),
        )
    }
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect()
}

/// `kubepods-burstable-pod1234_5678.slice` or `pod1234-5678` → `1234-5678`.
fn pod_uid(dir: &Path) -> Option<String> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let name = name.strip_suffix(".slice").unwrap_or(&name);
    let at = name.rfind("pod")?;
    let uid = &name[at + 3..];
    (!uid.is_empty()
        && uid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_'))
    .then(|| uid.replace('_', "-"))
}

/// The kubelet's config file, parsed: `Ok(None)` when there is none, `Err` naming the file when
/// it exists and cannot be read or parsed.
fn read_config(path: &Path) -> Result<Option<Value>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    match documents(&bytes) {
        Ok(mut docs) if !docs.is_empty() => Ok(Some(docs.remove(0))),
        Ok(_) => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The words of every `VAR=value` assignment of an environment file, as systemd's
/// `EnvironmentFile=` reads it: a line ending in a backslash goes on with the next one, `#` and
/// `;` begin comments, and the value's surrounding quotes are not part of it.
fn flags(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        match line.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => lines.push(std::mem::take(&mut pending) + line),
        }
    }
    lines.push(pending);
    lines
        .iter()
        .filter(|l| !l.trim_start().starts_with(['#', ';']))
        .filter_map(|l| l.split_once('='))
        .flat_map(|(_, v)| words(v.trim().trim_matches(|c| c == '"' || c == '\'')))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_cgroup_names_of_both_drivers() {
        let uid = |s: &str| pod_uid(Path::new(s));
        assert_eq!(
            uid("kubepods-burstable-pod12ab_34cd.slice").as_deref(),
            Some("12ab-34cd")
        );
        assert_eq!(uid("pod12ab-34cd").as_deref(), Some("12ab-34cd"));
        assert_eq!(uid("kubepods-burstable.slice"), None);
    }

    #[test]
    fn environment_files_are_read_as_systemd_reads_them() {
        assert_eq!(
            flags("KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-labels=a=b\"\n"),
            ["--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--node-labels=a=b"]
        );
        // /etc/default/kubelet as the deb package ships it, then as an operator fills it in.
        assert!(flags(
            "# Note: KUBELET_EXTRA_ARGS=--foo is sourced by the unit\nKUBELET_EXTRA_ARGS=\n"
        )
        .is_empty());
        assert_eq!(
            flags("KUBELET_EXTRA_ARGS=--cloud-provider=aws --node-ip=10.0.0.1\n"),
            ["--cloud-provider=aws", "--node-ip=10.0.0.1"]
        );
        // kubespray's kubelet.env: a value carried over lines by backslashes, CRLF, a PATH.
        let kubespray = "KUBE_LOGTOSTDERR=\"--logtostderr=true\"\r\nKUBELET_ARGS=\"--config=/etc/kubernetes/kubelet-config.yaml \\\r\n--pod-infra-container-image=registry.k8s.io/pause:3.9 \\\n --node-labels=a=b\"\n; KUBELET_X=--commented\nKUBELET_CLOUDPROVIDER=''\nPATH=/usr/local/bin:/usr/bin\n";
        assert_eq!(
            flags(kubespray),
            [
                "--logtostderr=true",
                "--config=/etc/kubernetes/kubelet-config.yaml",
                "--pod-infra-container-image=registry.k8s.io/pause:3.9",
                "--node-labels=a=b",
                "/usr/local/bin:/usr/bin"
            ]
        );
    }
}
