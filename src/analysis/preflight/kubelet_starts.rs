//! The `kubelet-starts` check: flags, config and runtime the new kubelet refuses to start with;
//! a node that stays NotReady has its pods evicted.

use serde_json::Value;

use crate::kubelet::facts::{
    fact, holds, removed_gate, FactId, Locked, Removed, DOCKERSHIM_FLAGS, IN_TREE_CLOUD_PROVIDERS,
    KLOG_FLAGS, LOCKED_FEATURE_GATES, REMOVED_FLAGS,
};
use crate::kubelet::version::KubeletVersion;
use crate::source::kubelet_args::{feature_gate, feature_gates_set, flag_in};

use super::{check, Check, Facts, Status};

/// Flags and defaults the new kubelet refuses: the node stays NotReady, which leads to eviction.
pub(super) fn kubelet_starts(f: &Facts, to: KubeletVersion) -> Check {
    let mut c = check(
        "kubelet-starts",
        "a kubelet that refuses to start leaves the node NotReady until its pods are evicted",
    );
    let h = &f.host;
    let fail = refusals(f, &h.kubelet_flags, to);
    // What the running kubelet was started with that no flags file read holds (flags written
    // into its unit, or files kubehash was not shown): if the unit passes them again, the new
    // kubelet refuses them as well.
    let unread: Vec<String> = f
        .running_kubelet
        .iter()
        .flat_map(|(_, args)| refusals(f, args, to))
        .filter(|r| !fail.contains(r))
        .collect();
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
    } else if let (Some((pid, _)), false) = (&f.running_kubelet, unread.is_empty()) {
        c.set(
            Status::Warn,
            format!(
                "the running kubelet (pid {pid}) was started with what kubelet {to} refuses, and no flags file read holds it: {}",
                unread.join("; ")
            ),
            "if the kubelet's unit passes these again, remove them first (or give --kubelet-flags the file that holds them)",
        );
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

/// The rows of `table` removed by kubelet `to`.
fn removed_by(
    table: &'static [Removed],
    to: KubeletVersion,
) -> impl Iterator<Item = &'static Removed> {
    table.iter().filter(move |r| to.minor() >= r.since)
}

/// Why kubelet `to` would not start with the flags `args`, the config and the runtime in `f`.
fn refusals(f: &Facts, args: &[String], to: KubeletVersion) -> Vec<String> {
    let h = &f.host;
    let mut fail = Vec::new();
    let flag = |name: &str| flag_in(args, name);
    if holds(FactId::DockershimRemoved, to) {
        for name in DOCKERSHIM_FLAGS {
            if let Some((a, _)) = flag(name) {
                fail.push(format!("{a} ({})", fact(FactId::DockershimRemoved).what));
            }
        }
        if flag("--container-runtime").is_some_and(|(_, v)| v == Some("docker")) {
            fail.push("--container-runtime=docker (the dockershim is removed)".into());
        }
    }
    if holds(FactId::ContainerRuntimeFlagRemoved, to) {
        if let Some((a, _)) = flag("--container-runtime") {
            fail.push(format!(
                "{a} ({})",
                fact(FactId::ContainerRuntimeFlagRemoved).what
            ));
        }
    }
    for (id, names) in [
        (FactId::KlogFlagsRemoved, KLOG_FLAGS),
        (
            FactId::PodInfraImageFlagRemoved,
            &["--pod-infra-container-image"][..],
        ),
    ] {
        if holds(id, to) {
            for name in names {
                if let Some((a, _)) = flag(name) {
                    fail.push(format!("{a} ({})", fact(id).what));
                }
            }
        }
    }
    if let Some(why) = cloud_provider(f, args, to) {
        fail.push(why);
    }
    let swap = h
        .kubelet_config
        .as_ref()
        .and_then(|c| c.pointer("/memorySwap/swapBehavior"))
        .and_then(Value::as_str);
    if holds(FactId::UnlimitedSwapRemoved, to) && swap == Some("UnlimitedSwap") {
        fail.push(format!(
            "the kubelet config's memorySwap.swapBehavior is UnlimitedSwap ({})",
            fact(FactId::UnlimitedSwapRemoved).what
        ));
    }
    for r in removed_by(REMOVED_FLAGS, to) {
        for name in r.names {
            if let Some((a, _)) = flag(name) {
                fail.push(format!(
                    "{a} (removed in kubelet 1.{}, {}: the kubelet stops at an unknown flag)",
                    r.since, r.source
                ));
            }
        }
    }
    for (gate, r, place) in removed_gates(f, args, to) {
        fail.push(format!(
            "feature gate {gate} in {place} (removed in 1.{}, {}: the kubelet stops at an unrecognized feature gate)",
            r.since, r.source
        ));
    }
    for (l, place) in locked_gates(f, args, to) {
        fail.push(format!(
            "feature gate {}={} in {place} (locked to {} from 1.{}: the kubelet stops at a locked feature gate set otherwise)",
            l.name, !l.default, l.default, l.since
        ));
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
        if let Some((_, value)) = flag("--node-labels") {
            let labels = value.unwrap_or("");
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
    fail
}

/// Every feature gate the kubelet is told to set against the default kubelet `to` locks it to
/// (featuregate `SetFromMap`; the value the kubelet ends with, `--feature-gates` over the
/// config's `featureGates`): the gate's row and where that value is set. A gate `to` no
/// longer knows is [`removed_gates`]'s.
fn locked_gates(
    f: &Facts,
    args: &[String],
    to: KubeletVersion,
) -> Vec<(&'static Locked, &'static str)> {
    let mut found: Vec<(&'static Locked, &'static str)> = Vec::new();
    for (name, place) in feature_gates_set(args, f.host.kubelet_config.as_ref()) {
        let Some(l) = LOCKED_FEATURE_GATES
            .iter()
            .find(|l| l.name == name && to.minor() >= l.since)
        else {
            continue;
        };
        let removed = removed_gate(l.name, to).is_some();
        // The flag's entries come first: the first place a gate is named is where its value is.
        if removed || found.iter().any(|(seen, _)| seen.name == l.name) {
            continue;
        }
        if gate(f, args, l.name) == Some(!l.default) {
            found.push((l, place));
        }
    }
    found
}

/// Every feature gate the kubelet is given (`--feature-gates`, its config's `featureGates`)
/// that kubelet `to` no longer knows: the gate, its row and where it is set.
fn removed_gates(
    f: &Facts,
    args: &[String],
    to: KubeletVersion,
) -> Vec<(String, &'static Removed, &'static str)> {
    feature_gates_set(args, f.host.kubelet_config.as_ref())
        .into_iter()
        .filter_map(|(gate, place)| {
            let r = removed_gate(&gate, to)?;
            Some((gate, r, place))
        })
        .collect()
}

/// Feature gate `name` as the kubelet is told it ([`feature_gate`]).
fn gate(f: &Facts, args: &[String], name: &str) -> Option<bool> {
    feature_gate(args, f.host.kubelet_config.as_ref(), name)
}

/// Why kubelet `to` stops at its `--cloud-provider`, if it does: `NewMainKubelet` refuses an
/// in-tree provider once `DisableCloudProviders` is on (1.29 by default, 1.31 always, when only
/// `external` or none is left), and `InitCloudProvider` finds none whose code the build no longer
/// has. A name that is no upstream provider is left alone: a kubelet running with it is a build
/// of its own.
fn cloud_provider(f: &Facts, args: &[String], to: KubeletVersion) -> Option<String> {
    let (arg, value) = flag_in(args, "--cloud-provider")?;
    let provider = value.unwrap_or("");
    if provider.is_empty() || provider == "external" {
        return None;
    }
    let in_tree = IN_TREE_CLOUD_PROVIDERS.iter().find(|p| p.name == provider);
    let id = if holds(FactId::OnlyExternalCloudProvider, to) {
        FactId::OnlyExternalCloudProvider
    } else if holds(FactId::InTreeCloudProvidersOff, to)
        && in_tree.is_some()
        && gate(f, args, "DisableCloudProviders") != Some(false)
    {
        FactId::InTreeCloudProvidersOff
    } else {
        let p = in_tree.filter(|p| to.minor() >= p.removed)?;
        return Some(format!(
            "{arg} (the in-tree {} cloud provider is removed in kubelet 1.{}, {}: the kubelet stops at an unknown cloud provider)",
            p.name, p.removed, p.source
        ));
    };
    Some(format!("{arg} ({})", fact(id).what))
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

    /// Flags later kubelets took away, read as pflag reads them (`_` as `-`, `--name value`,
    /// the last one winning), and the cloud provider `NewMainKubelet` refuses.
    #[test]
    fn removed_flags_and_in_tree_cloud_providers_stop_the_new_kubelet() {
        let f = Files::new();
        systemd_v2(&f, "cpuset cpu memory hugetlb pids");
        let run = |flags: &str, to: &str| {
            f.put(
                "kubelet/kubeadm-flags.env",
                &format!("KUBELET_KUBEADM_ARGS=\"{flags}\"\n"),
            );
            kubelet_starts(&f.facts(), v(to))
        };
        let fails = |flags: &str, to: &str, said: &str| {
            let c = run(flags, to);
            assert_eq!(c.status, Status::Fail, "{flags} at {to}: {c:?}");
            assert!(c.evidence.contains(said), "{flags} at {to}: {c:?}");
        };
        let passes = |flags: &str, to: &str| {
            let c = run(flags, to);
            assert_eq!(c.status, Status::Pass, "{flags} at {to}: {c:?}");
        };
        // The klog flags (1.26), spelled either way.
        fails(
            "--v=2 --logtostderr=true",
            "1.26",
            "--logtostderr=true (the legacy klog flags",
        );
        fails(
            "--log_dir=/var/log/kubelet",
            "1.30",
            "--log_dir=/var/log/kubelet",
        );
        passes("--v=2 --vmodule=kubelet=4 --log-dir=/x", "1.25");
        passes("--v=2 --vmodule=kubelet=4", "1.37");
        // --pod-infra-container-image (1.35), as kubeadm wrote it for years.
        let kubeadm = "--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9";
        fails(
            kubeadm,
            "1.35",
            "--pod-infra-container-image=registry.k8s.io/pause:3.9",
        );
        passes(kubeadm, "1.34");
        // --cloud-provider: each in-tree provider is gone from the release that removed its
        // code (OpenStack 1.26, AWS 1.27, Azure and vSphere 1.30, GCE 1.31); every in-tree one
        // is off from 1.29 unless the gate is set false, which 1.31 refuses; only external or
        // none is left from 1.31.
        passes("--cloud-provider=aws", "1.26");
        fails(
            "--cloud-provider aws --v=2",
            "1.27",
            "--cloud-provider (the in-tree aws cloud provider is removed in kubelet 1.27",
        );
        passes("--cloud-provider=openstack", "1.25");
        fails(
            "--cloud-provider=openstack",
            "1.26",
            "in-tree openstack cloud provider is removed in kubelet 1.26, kubernetes#67782",
        );
        for p in ["azure", "vsphere"] {
            let flags = format!("--cloud-provider={p} --feature-gates=DisableCloudProviders=false");
            passes(&flags, "1.29");
            fails(
                &flags,
                "1.30",
                &format!("in-tree {p} cloud provider is removed in kubelet 1.30"),
            );
            // With the gate on, 1.29 already refuses it, as disabled.
            fails(&format!("--cloud-provider={p}"), "1.29", "on by default");
        }
        passes("--cloud-provider=gce", "1.28");
        fails(
            "--cloud-provider=gce",
            "1.29",
            "DisableCloudProviders is on by default",
        );
        passes(
            "--cloud-provider=gce --feature-gates=DisableCloudProviders=false",
            "1.30",
        );
        passes(
            "--cloud-provider=gce --feature-gates=A=true --feature-gates=DisableCloudProviders=0",
            "1.30",
        );
        fails("--cloud-provider=gce --feature-gates=DisableCloudProviders=false --feature-gates=DisableCloudProviders=true", "1.30", "on by default");
        fails(
            "--cloud-provider=aws --feature-gates=DisableCloudProviders=false",
            "1.30",
            "in-tree aws cloud provider is removed",
        );
        fails(
            "--cloud-provider=gce --feature-gates=DisableCloudProviders=false",
            "1.31",
            "cannot be set false",
        );
        fails(
            "--feature-gates=DisableCloudProviders=false",
            "1.31",
            "DisableCloudProviders=false",
        );
        fails(
            "--cloud-provider=mycloud",
            "1.31",
            "may only be empty or external",
        );
        passes("--cloud-provider=mycloud", "1.30");
        for ok in [
            "--cloud-provider=external",
            "--cloud-provider=",
            "--cloud-provider external",
        ] {
            passes(ok, "1.37");
        }
        // The config file's featureGates, where no flag says otherwise.
        f.put(
            "kubelet/config.yaml",
            "featureGates:\n  DisableCloudProviders: false\n",
        );
        passes("--cloud-provider=gce", "1.30");
        fails(
            "--cloud-provider=gce --feature-gates=DisableCloudProviders=true",
            "1.30",
            "on by default",
        );
        // Other removed flags, and feature gates no longer known, in flags or config.
        fails(
            "--keep-terminated-pod-volumes=false",
            "1.31",
            "removed in kubelet 1.31, kubernetes#122082",
        );
        passes("--keep-terminated-pod-volumes=false", "1.30");
        // AKS and CAPZ nodes passed this one for years.
        fails(
            "--azure-container-registry-config=/etc/kubernetes/azure.json",
            "1.30",
            "--azure-container-registry-config=/etc/kubernetes/azure.json (removed in kubelet 1.30",
        );
        passes(
            "--azure-container-registry-config=/etc/kubernetes/azure.json",
            "1.29",
        );
        fails(
            "--cloud-config /etc/kubernetes/cloud.conf",
            "1.34",
            "--cloud-config (removed in kubelet 1.34",
        );
        fails(
            "--feature-gates=RotateKubeletServerCertificate=true,DynamicKubeletConfig=false",
            "1.26",
            "feature gate DynamicKubeletConfig in --feature-gates (removed in 1.26",
        );
        passes(
            "--feature-gates=RotateKubeletServerCertificate=true,DynamicKubeletConfig=false",
            "1.25",
        );
        fails(
            "--feature-gates=DisableCloudProviders=true",
            "1.33",
            "feature gate DisableCloudProviders in --feature-gates (removed in 1.33",
        );
        let c = run("--feature-gates=DisableCloudProviders=false", "1.33");
        assert!(!c.evidence.contains("locked"), "said twice: {c:?}");
        f.put("kubelet/config.yaml", "{}\n");
        // Set true since the 1.28 alpha, accepted while locked to true (1.33), refused once
        // removed (1.37, kubernetes#137755).
        passes("--feature-gates=SidecarContainers=true", "1.36");
        fails(
            "--feature-gates=SidecarContainers=true",
            "1.37",
            "feature gate SidecarContainers in --feature-gates (removed in 1.37",
        );
        // The opt-out of 1.34's refusal of static pods that reference API objects, removed in
        // 1.37 (kubernetes#140226).
        passes(
            "--feature-gates=PreventStaticPodAPIReferences=false",
            "1.36",
        );
        fails(
            "--feature-gates=PreventStaticPodAPIReferences=false",
            "1.37",
            "feature gate PreventStaticPodAPIReferences in --feature-gates (removed in 1.37, kubernetes#140226",
        );
        // The deprecated cAdvisor flags k3s-style units pass: 1.37 moved to cadvisor/lib
        // (kubernetes#139870), which keeps their names "to avoid breaking existing command
        // lines" (cadvisorflags.Deprecated), and the kubelet registers them still.
        for cadvisor in [
            "--containerd=/run/k3s/containerd/containerd.sock",
            "--boot_id_file=/proc/sys/kernel/random/boot_id",
            "--housekeeping-interval=10s",
        ] {
            passes(cadvisor, "1.37");
        }
        // A gate locked to its default, set otherwise: ExecProbeTimeout=false was the advised
        // way out of exec probe timeouts for years, and 1.35 locks it.
        fails(
            "--feature-gates=ExecProbeTimeout=false",
            "1.35",
            "feature gate ExecProbeTimeout=false in --feature-gates (locked to true from 1.35",
        );
        passes("--feature-gates=ExecProbeTimeout=false", "1.34");
        // The way out of SELinux relabeling trouble until 1.36 made it GA (kubernetes#136912).
        fails(
            "--feature-gates=SELinuxMountReadWriteOncePod=false",
            "1.36",
            "SELinuxMountReadWriteOncePod=false in --feature-gates (locked to true from 1.36",
        );
        passes("--feature-gates=SELinuxMountReadWriteOncePod=false", "1.35");
        // The way to keep gitRepo volumes from 1.33, gone in 1.36 (kubernetes#136400).
        fails(
            "--feature-gates=GitRepoVolumeDriver=true",
            "1.36",
            "GitRepoVolumeDriver=true in --feature-gates (locked to false from 1.36",
        );
        passes("--feature-gates=GitRepoVolumeDriver=true", "1.35");
        passes("--feature-gates=GitRepoVolumeDriver=false", "1.36");
        passes("--feature-gates=ExecProbeTimeout=true", "1.35");
        passes(
            "--feature-gates=ExecProbeTimeout=false --feature-gates=ExecProbeTimeout=true",
            "1.35",
        );
        // Locked to false.
        fails(
            "--feature-gates=AllowOverwriteTerminationGracePeriodSeconds=true",
            "1.35",
            "AllowOverwriteTerminationGracePeriodSeconds=true in --feature-gates (locked to false",
        );
        passes(
            "--feature-gates=AllowOverwriteTerminationGracePeriodSeconds=false",
            "1.35",
        );
        // The in-tree provider's two gates, as 1.29 and 1.30 needed them: 1.31 refuses both.
        let c = run(
            "--feature-gates=DisableCloudProviders=false,DisableKubeletCloudCredentialProviders=false",
            "1.31",
        );
        assert!(
            c.status == Status::Fail
                && c.evidence.contains(
                    "DisableCloudProviders=false in --feature-gates (locked to true from 1.31"
                )
                && c.evidence
                    .contains("DisableKubeletCloudCredentialProviders=false in --feature-gates"),
            "{c:?}"
        );
        // Locked in 1.32 and removed in 1.35 (the 1.32 release notes said removed; it was
        // reverted into a lock).
        passes("--feature-gates=AllowServiceLBStatusOnNonLB=false", "1.34");
        fails(
            "--feature-gates=AllowServiceLBStatusOnNonLB=true",
            "1.32",
            "locked to false from 1.32",
        );
        fails(
            "--feature-gates=AllowServiceLBStatusOnNonLB=false",
            "1.35",
            "AllowServiceLBStatusOnNonLB in --feature-gates (removed in 1.35, kubernetes#134552",
        );
        // New in 1.35, and still there.
        passes(
            "--feature-gates=UserNamespacesHostNetworkSupport=true",
            "1.36",
        );
        // In the config, unless a flag says otherwise.
        f.put(
            "kubelet/config.yaml",
            "featureGates:\n  InPlacePodVerticalScaling: false\n",
        );
        fails(
            "--v=2",
            "1.35",
            "InPlacePodVerticalScaling=false in the kubelet config's featureGates (locked to true from 1.35",
        );
        passes("--feature-gates=InPlacePodVerticalScaling=true", "1.35");
        passes("--v=2", "1.34");
        f.put(
            "kubelet/config.yaml",
            "featureGates:\n  SizeMemoryBackedVolumes: true\n",
        );
        fails("--v=2", "1.35", "feature gate SizeMemoryBackedVolumes in the kubelet config's featureGates (removed in 1.35");
        passes("--v=2", "1.34");
        f.put(
            "kubelet/config.yaml",
            "memorySwap:\n  swapBehavior: UnlimitedSwap\n",
        );
        fails("--v=2", "1.30", "memorySwap.swapBehavior is UnlimitedSwap");
        passes("--v=2", "1.29");
        f.put(
            "kubelet/config.yaml",
            "memorySwap:\n  swapBehavior: LimitedSwap\n",
        );
        passes("--v=2", "1.37");
        // The running kubelet's own command line: what no flags file holds is a warning.
        f.put("kubelet/config.yaml", "{}\n");
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--v=2\"\n",
        );
        let mut facts = f.facts();
        facts.running_kubelet = Some((
            42,
            [
                "--config=/var/lib/kubelet/config.yaml",
                "--logtostderr=true",
                "--v=2",
            ]
            .map(String::from)
            .to_vec(),
        ));
        let c = kubelet_starts(&facts, v("1.26"));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence.contains("pid 42") && c.evidence.contains("--logtostderr=true ("),
            "{c:?}"
        );
        assert_eq!(kubelet_starts(&facts, v("1.25")).status, Status::Pass);
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--logtostderr=true\"\n",
        );
        facts.host = f.host();
        let c = kubelet_starts(&facts, v("1.26"));
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(!c.evidence.contains("pid 42"), "{c:?}");
        // The packages' KUBELET_EXTRA_ARGS come after kubeadm's flags and override them.
        f.put("kubelet/config.yaml", "{}\n");
        f.put(
            "etc/default/kubelet",
            "KUBELET_EXTRA_ARGS=--cloud-provider=external\n",
        );
        passes("--cloud-provider=aws", "1.31");
        f.put(
            "etc/default/kubelet",
            "KUBELET_EXTRA_ARGS=--log-dir=/var/log/k --cloud-provider=aws\n",
        );
        let c = run("--cloud-provider=external", "1.31");
        assert!(
            c.evidence.contains("--log-dir=/var/log/k (")
                && c.evidence.contains("--cloud-provider=aws ("),
            "{c:?}"
        );
    }
}
