//! The `kubelet-starts` check: flags, config and runtime the new kubelet refuses to start with;
//! a node that stays NotReady has its pods evicted.

use serde_json::Value;

use crate::kubelet::facts::{fact, holds, FactId, DOCKERSHIM_FLAGS};
use crate::kubelet::version::KubeletVersion;

use super::{check, Check, Facts, Status};

/// Flags and defaults the new kubelet refuses: the node stays NotReady, which leads to eviction.
pub(super) fn kubelet_starts(f: &Facts, to: KubeletVersion) -> Check {
    let mut c = check(
        "kubelet-starts",
        "a kubelet that refuses to start leaves the node NotReady until its pods are evicted",
    );
    let h = &f.host;
    let mut fail = Vec::new();
    let flag = |name: &str| {
        h.kubelet_flags
            .iter()
            .find(|a| *a == name || a.starts_with(&format!("{name}=")))
    };
    if holds(FactId::DockershimRemoved, to) {
        for name in DOCKERSHIM_FLAGS {
            if let Some(a) = flag(name) {
                fail.push(format!("{a} ({})", fact(FactId::DockershimRemoved).what));
            }
        }
        if flag("--container-runtime").is_some_and(|a| a.ends_with("=docker")) {
            fail.push("--container-runtime=docker (the dockershim is removed)".into());
        }
    }
    if holds(FactId::ContainerRuntimeFlagRemoved, to) {
        if let Some(a) = flag("--container-runtime") {
            fail.push(format!(
                "{a} ({})",
                fact(FactId::ContainerRuntimeFlagRemoved).what
            ));
        }
    }
    if holds(FactId::CriV1Alpha2Dropped, to) && f.cri_api == "v1alpha2" {
        fail.push(format!(
            "the runtime serves CRI {} only ({})",
            f.cri_api,
            fact(FactId::CriV1Alpha2Dropped).what
        ));
    }
    if holds(FactId::FailCgroupV1Default, to) && !h.cgroup_v2 && !h.root_controllers.is_empty() {
        let opted_out = h
            .kubelet_config
            .as_ref()
            .and_then(|c| c.get("failCgroupV1"))
            .and_then(Value::as_bool)
            == Some(false);
        if !opted_out {
            fail.push(format!(
                "the node runs cgroup v1 ({})",
                fact(FactId::FailCgroupV1Default).what
            ));
        }
    }
    if holds(FactId::NodeLabelsRestricted, to) {
        if let Some(a) = flag("--node-labels") {
            let labels = a.split_once('=').map_or("", |(_, v)| v);
            for l in labels.split(',') {
                let key = l.split('=').next().unwrap_or("");
                if restricted_label(key) {
                    fail.push(format!(
                        "--node-labels sets {key} ({})",
                        fact(FactId::NodeLabelsRestricted).what
                    ));
                }
            }
        }
    }
    c.evidence = format!(
        "{} kubelet flags, config {}, CRI {}",
        h.kubelet_flags.len(),
        match (&h.kubelet_config, &h.kubelet_config_error) {
            (Some(_), _) => "read",
            (None, Some(_)) => "unreadable",
            (None, None) => "absent",
        },
        if f.cri_api.is_empty() {
            "?"
        } else {
            &f.cri_api
        }
    );
    if !fail.is_empty() {
        c.set(Status::Fail, fail.join("; "), "change the kubelet's flags, config or runtime first; a kubelet that does not start cannot keep any pod");
    } else if let Some(e) = &h.kubelet_config_error {
        // cmd/kubelet/app/server.go loadConfigFile: a --config file that does not decode stops
        // the kubelet. Whether this kubelet is given this file is not known here: a warning.
        c.set(
            Status::Warn,
            format!("the kubelet config does not parse ({e}): a kubelet started with --config naming it refuses to start"),
            "fix the kubelet's config file first (or give --kubelet-config the one the kubelet uses)",
        );
    }
    c
}

/// Labels in the `kubernetes.io` / `k8s.io` namespaces that a kubelet may not set on itself.
fn restricted_label(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    let ours = |p: &str| {
        p == "kubernetes.io"
            || p == "k8s.io"
            || p.ends_with(".kubernetes.io")
            || p.ends_with(".k8s.io")
    };
    if !ours(prefix) {
        return false;
    }
    let allowed_prefix = ["kubelet.kubernetes.io", "node.kubernetes.io"];
    let allowed = [
        "kubernetes.io/hostname",
        "kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
    ];
    !(allowed.contains(&key)
        || allowed_prefix
            .iter()
            .any(|a| prefix == *a || prefix.ends_with(&format!(".{a}"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::{systemd_v2, v, Files};

    #[test]
    fn a_kubelet_that_would_not_start_fails() {
        let f = Files::new();
        systemd_v2(&f, "cpuset cpu memory hugetlb pids");
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--network-plugin=cni --node-labels=node-role.kubernetes.io/worker=,team=a\"\n",
        );
        let c = kubelet_starts(&f.facts(), v("1.24"));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence.contains("--network-plugin")
                && c.evidence.contains("node-role.kubernetes.io/worker"),
            "{c:?}"
        );
        assert_eq!(kubelet_starts(&f.facts(), v("1.15")).status, Status::Pass);
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--node-labels=node.kubernetes.io/pool=a\"\n",
        );
        let mut facts = f.facts();
        assert_eq!(kubelet_starts(&facts, v("1.30")).status, Status::Pass);
        facts.cri_api = "v1alpha2".into();
        assert_eq!(kubelet_starts(&facts, v("1.26")).status, Status::Fail);
        assert_eq!(kubelet_starts(&facts, v("1.25")).status, Status::Pass);

        // cgroup v1: one directory per controller, no cgroup.controllers.
        let g = Files::new();
        g.dir("cgroup/memory").dir("cgroup/cpu,cpuacct");
        assert_eq!(kubelet_starts(&g.facts(), v("1.35")).status, Status::Fail);
        assert_eq!(kubelet_starts(&g.facts(), v("1.34")).status, Status::Pass);
        g.put("kubelet/config.yaml", "failCgroupV1: false\n");
        assert_eq!(kubelet_starts(&g.facts(), v("1.35")).status, Status::Pass);
        // A config file that exists and does not parse is no absent one: a warning, saying why.
        g.put("kubelet/config.yaml", "failCgroupV1: [\n");
        let c = kubelet_starts(&g.facts(), v("1.34"));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence.contains("the kubelet config does not parse")
                && c.evidence.contains("config.yaml")
                && c.evidence.contains("line 2"),
            "{c:?}"
        );
        assert_eq!(kubelet_starts(&g.facts(), v("1.35")).status, Status::Fail);
        assert!(restricted_label("kubernetes.io/role") && !restricted_label("kubernetes.io/os"));
        assert!(!restricted_label("example.com/a") && !restricted_label("plain"));
    }
}
