//! The `cgroups` check: every pod is killed when the new kubelet looks for pod cgroups where
//! they are not (`syncPod`: `!pcm.Exists(pod)`), which the cgroup driver decides.

use crate::kubelet::facts::{fact, holds, FactId};
use crate::kubelet::version::KubeletVersion;

use super::{check, Check, Facts, Status};

/// `syncPod`: a pod whose cgroup the kubelet does not find (`pcm.Exists`) is killed. The driver
/// decides the path it looks for; from 1.31 it is the runtime's when the runtime reports one.
pub(super) fn cgroups(f: &Facts, to: KubeletVersion) -> Check {
    let mut c = check(
        "cgroups",
        "every pod is killed when the new kubelet looks for pod cgroups where they are not (syncPod: !pcm.Exists)",
    );
    let h = &f.host;
    let driver = match (
        &f.runtime_driver,
        holds(FactId::CgroupDriverFromRuntime, to),
    ) {
        (Some(d), true) => Some(d.clone()),
        _ => h.configured_driver().map(str::to_string),
    };
    let Some(driver) = driver else {
        // Without the kubelet's config (and a runtime that does not say), which paths the new
        // kubelet looks for is not known: guessing its default would cry wolf on systemd nodes.
        c.status = Status::Unknown;
        c.evidence = format!(
            "cgroup driver unknown: no kubelet config read, and the runtime does not report one (cgroup v{}, {} pod cgroups found)",
            if h.cgroup_v2 { 2 } else { 1 },
            h.pod_cgroups.len()
        );
        c.action = match h.kubelet_config_error {
            Some(_) => "fix the kubelet's config file (it does not parse)".into(),
            None => "give --kubelet-config".into(),
        };
        return c;
    };
    let mut problems = Vec::new();
    let misplaced: Vec<&String> = h
        .pod_cgroups
        .iter()
        .filter(|(_, d)| **d != driver)
        .map(|(uid, _)| uid)
        .collect();
    if !misplaced.is_empty() {
        problems.push(format!(
            "{} pod cgroups follow the other driver's layout, but kubelet {to} will use {driver} (config cgroupDriver {}, runtime reports {}): {}",
            misplaced.len(),
            h.configured_driver().unwrap_or("unset"),
            f.runtime_driver.as_deref().unwrap_or("nothing"),
            misplaced.iter().take(3).map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    if h.cgroup_v2 {
        let mut needed = vec!["cpu", "cpuset", "memory", "pids"];
        if h.root_controllers.iter().any(|r| r == "hugetlb") {
            needed.push("hugetlb");
        }
        if let Some(have) = &h.kubepods_controllers {
            let missing: Vec<&str> = needed
                .iter()
                .copied()
                .filter(|n| !have.iter().any(|h| h == n))
                .collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "the kubepods cgroup lacks the controllers {}",
                    missing.join(", ")
                ));
            }
        }
    }
    c.evidence = format!(
        "cgroup v{}, {} pod cgroups found, driver for kubelet {to}: {driver}",
        if h.cgroup_v2 { 2 } else { 1 },
        h.pod_cgroups.len()
    );
    if h.root_controllers.is_empty() && h.pod_cgroups.is_empty() {
        c.set(
            Status::Unknown,
            "no cgroup hierarchy found (--cgroup-root)",
            "run on the node, or give --cgroup-root",
        );
    } else if !problems.is_empty() {
        c.status = Status::Fail;
        c.evidence = problems.join("; ");
        c.action = format!(
            "make the kubelet config's cgroupDriver and the runtime's (containerd: SystemdCgroup) agree with the layout the pods run in, and enable the controllers in kubepods, before the swap ({})",
            fact(FactId::CgroupDriverFromRuntime).source
        );
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::{systemd_v2, v, Files, UID};

    #[test]
    fn cgroups_fail_on_a_driver_mismatch_or_a_missing_controller() {
        let f = Files::new();
        systemd_v2(&f, "cpuset cpu memory hugetlb pids");
        f.put("kubelet/config.yaml", "cgroupDriver: systemd\n");
        let ok = cgroups(&f.facts(), v("1.30"));
        assert_eq!(ok.status, Status::Pass, "{ok:?}");

        // The kubelet config says cgroupfs: the new kubelet looks for kubepods/burstable/pod….
        f.put("kubelet/config.yaml", "cgroupDriver: cgroupfs\n");
        let bad = cgroups(&f.facts(), v("1.30"));
        assert_eq!(bad.status, Status::Fail, "{bad:?}");
        assert!(bad.evidence.contains(UID), "{bad:?}");
        // From 1.31 the runtime's driver wins, when it reports one.
        let mut facts = f.facts();
        facts.runtime_driver = Some("systemd".into());
        assert_eq!(cgroups(&facts, v("1.31")).status, Status::Pass);
        assert_eq!(cgroups(&facts, v("1.30")).status, Status::Fail);
        // The deprecated --cgroup-driver flag overrides the config file.
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--cgroup-driver=systemd\"\n",
        );
        assert_eq!(cgroups(&f.facts(), v("1.30")).status, Status::Pass);
        f.put("kubelet/config.yaml", "cgroupDriver: systemd\n");
        f.put(
            "etc/default/kubelet",
            "KUBELET_EXTRA_ARGS=--cgroup-driver cgroupfs\n",
        );
        assert_eq!(cgroups(&f.facts(), v("1.30")).status, Status::Fail);

        let g = Files::new();
        systemd_v2(&g, "cpuset cpu memory hugetlb");
        g.put("kubelet/config.yaml", "cgroupDriver: systemd\n");
        let missing = cgroups(&g.facts(), v("1.30"));
        assert_eq!(missing.status, Status::Fail);
        assert!(missing.evidence.contains("pids"), "{missing:?}");

        assert_eq!(
            cgroups(&Files::new().facts(), v("1.30")).status,
            Status::Unknown
        );
        // Pods in the systemd layout but no kubelet config to say the driver: unknown, not a
        // false alarm from the kubelet's built-in default.
        let n = Files::new();
        systemd_v2(&n, "cpuset cpu memory hugetlb pids");
        assert_eq!(cgroups(&n.facts(), v("1.30")).status, Status::Unknown);
    }
}
