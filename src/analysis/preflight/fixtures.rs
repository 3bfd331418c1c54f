//! What the checks' tests share: a node's files in a temporary directory, pods and a Node.

use serde_json::{json, Value};

use crate::kubelet::version::KubeletVersion;
use crate::source::host::{Host, HostPaths};

use super::Facts;

pub(super) fn v(s: &str) -> KubeletVersion {
    s.parse().unwrap()
}

/// A node's files laid out in a temporary directory, as on a real node.
pub(super) struct Files(tempfile::TempDir);

impl Files {
    pub(super) fn new() -> Files {
        Files(tempfile::tempdir().unwrap())
    }
    pub(super) fn put(&self, rel: &str, text: &str) -> &Files {
        let p = self.0.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }
    pub(super) fn dir(&self, rel: &str) -> &Files {
        std::fs::create_dir_all(self.0.path().join(rel)).unwrap();
        self
    }
    pub(super) fn host(&self) -> Host {
        let r = self.0.path();
        Host::read(&HostPaths {
            cgroup_root: r.join("cgroup"),
            kubelet_root: r.join("kubelet"),
            kubelet_config: r.join("kubelet/config.yaml"),
            kubelet_flags: vec![
                r.join("kubelet/kubeadm-flags.env"),
                r.join("etc/default/kubelet"),
            ],
        })
    }
    pub(super) fn facts(&self) -> Facts {
        Facts {
            host: self.host(),
            cri_api: "v1".into(),
            ..Facts::default()
        }
    }
}

pub(super) const UID: &str = "6a1b2c3d-0000-4000-8000-00000000abcd";

/// cgroup v2 with the systemd layout, a burstable pod in it.
pub(super) fn systemd_v2(f: &Files, kubepods_controllers: &str) {
    f.put(
        "cgroup/cgroup.controllers",
        "cpuset cpu io memory hugetlb pids",
    )
    .put(
        "cgroup/kubepods.slice/cgroup.controllers",
        kubepods_controllers,
    )
    .dir(&format!(
        "cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        UID.replace('-', "_")
    ));
}

pub(super) fn pod(name: &str, spec: Value) -> Value {
    json!({"metadata": {"namespace": "ns", "name": name, "uid": name},
           "spec": spec, "status": {"phase": "Running"}})
}

pub(super) fn node(labels: Value, allocatable: Value) -> Value {
    json!({"kind": "Node", "metadata": {"name": "n", "labels": labels},
           "status": {"allocatable": allocatable}})
}
