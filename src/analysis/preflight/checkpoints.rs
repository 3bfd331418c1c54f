//! The `checkpoints` check: checkpoint files under the kubelet's root that the new kubelet does
//! not read (CPU, device and DRA managers), or whose policy is not the one it is configured
//! with (CPU and memory managers).

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::kubelet::facts::{crosses, fact, holds, FactId};
use crate::kubelet::version::KubeletVersion;
use crate::runtime::cri::proto;
use crate::source::kubelet_args::flag_in;

use super::{check, Check, Facts, Status};

/// The managers whose `restoreState` refuses a checkpoint written under another policy
/// ("configured policy %q differs from state checkpoint policy %q"), stopping the kubelet: the
/// checkpoint, the kubelet flag and config field that set the policy, and their default.
const POLICIES: &[(&str, &str, &str, &str)] = &[
    (
        "cpu_manager_state",
        "--cpu-manager-policy",
        "cpuManagerPolicy",
        "none",
    ),
    (
        "memory_manager_state",
        "--memory-manager-policy",
        "memoryManagerPolicy",
        "None",
    ),
];

/// Checkpoints under the kubelet's root that the new kubelet does not read (the CPU and DRA
/// managers refuse to start, the device manager starts empty), or that hold a policy other than
/// the configured one (the CPU and memory managers refuse to start).
pub(super) fn checkpoints(f: &Facts, to: KubeletVersion) -> Check {
    let mut c = check(
        "checkpoints",
        "a checkpoint the new kubelet cannot read, or written under another policy, stops it (CPU, memory, DRA managers) or empties it (device manager: double allocation, rejected pods)",
    );
    let mut fail = Vec::new();
    let mut warn = Vec::new();
    for (name, parsed) in &f.host.checkpoints {
        let v = match parsed {
            Ok(v) => v,
            Err(e) => {
                fail.push(format!("{name} is not JSON ({e})"));
                continue;
            }
        };
        if let Some(differs) = policy_differs(f, name, v) {
            fail.push(differs);
        }
        match name.as_str() {
            "cpu_manager_state" if holds(FactId::CpuManagerCheckpointByPod, to) => {
                // v1 (≤ 1.17): entries container ID → cpuset; v2: pod UID → container → cpuset.
                // The new kubelet migrates v1 (`migrateV1CheckpointToV2Checkpoint`), looking
                // each container ID up among the runtime's containers, and stops at one it
                // does not find.
                let by_id: Vec<&str> = v["entries"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, cpus)| cpus.is_string())
                    .map(|(id, _)| id.as_str())
                    .collect();
                // Said escaped: the keys are whatever the file holds, and the evidence is one line.
                let unknown: Vec<String> = by_id
                    .into_iter()
                    .filter(|id| {
                        f.container_ids
                            .as_ref()
                            .is_none_or(|ids| !ids.contains(*id))
                    })
                    .map(|id| id.escape_debug().to_string())
                    .collect();
                if !unknown.is_empty() {
                    let cpu = fact(FactId::CpuManagerCheckpointByPod);
                    fail.push(format!(
                        "{name} keys entries by container ID, the format before 1.{} ({}); kubelet {to} migrates it, and stops at an ID the runtime has no container of: {}{}",
                        cpu.since,
                        cpu.source,
                        unknown.join(", "),
                        if f.container_ids.is_none() {
                            " (the runtime's containers were not read)"
                        } else {
                            ""
                        }
                    ));
                }
            }
            // 1.20 – 1.22 and 1.30 + read only the NUMA format; 1.23 – 1.29 fall back to the old.
            "device-plugins/kubelet_internal_checkpoint"
                if holds(FactId::DeviceCheckpointByNuma, to)
                    && (!holds(FactId::DeviceCheckpointV1Read, to)
                        || holds(FactId::DeviceCheckpointV1Dropped, to)) =>
            {
                let old = v
                    .pointer("/Data/PodDeviceEntries")
                    .and_then(Value::as_array)
                    .is_some_and(|e| e.iter().any(|d| d["DeviceIDs"].is_array()));
                if old {
                    let dropped = fact(FactId::DeviceCheckpointV1Dropped);
                    warn.push(format!(
                        "{name} lists device IDs without NUMA nodes, the format before 1.{}, which kubelet {to} does not read{}: the device manager starts empty",
                        fact(FactId::DeviceCheckpointByNuma).since,
                        if holds(FactId::DeviceCheckpointV1Dropped, to) {
                            format!(" (1.{} – 1.{} did; {})", fact(FactId::DeviceCheckpointV1Read).since, dropped.since - 1, dropped.source)
                        } else {
                            String::new()
                        }
                    ));
                }
            }
            "dra_manager_state" if crosses(FactId::DraCheckpointV2, f.from, to) => {
                fail.push(format!(
                    "{name} was written before 1.{} ({})",
                    fact(FactId::DraCheckpointV2).since,
                    fact(FactId::DraCheckpointV2).source
                ));
            }
            _ => {}
        }
    }
    c.evidence = format!(
        "checkpoints read: {}",
        if f.host.checkpoints.is_empty() {
            "none".to_string()
        } else {
            f.host
                .checkpoints
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    if !fail.is_empty() {
        c.set(Status::Fail, fail.join("; "), "drain the node (the manager's state cannot carry over), remove the checkpoint, then upgrade");
    } else if !warn.is_empty() {
        c.set(
            Status::Warn,
            warn.join("; "),
            "check that device-plugin pods are re-admitted after the swap",
        );
    }
    c
}

/// The containers the kubelet knows at start, whose IDs a pre-1.18 CPU checkpoint may name
/// (`buildContainerMapAndRunningSetFromRuntime`): every container the runtime lists, in any
/// state, whose sandbox it lists too, and of those with the same pod and name only the newest,
/// as later kubelets keep one ID per pod and name (earlier ones keep every one: so this can only
/// fail a checkpoint such a kubelet would read, never pass one a kubelet would not).
pub(super) fn initial_containers(
    sandboxes: &[proto::PodSandbox],
    mut containers: Vec<proto::Container>,
) -> BTreeSet<String> {
    let uid: HashMap<&str, &str> = sandboxes
        .iter()
        .filter_map(|s| Some((s.id.as_str(), s.metadata.as_ref()?.uid.as_str())))
        .collect();
    // Oldest first, as the kubelet sorts them; a later one of the same pod and name wins.
    containers.sort_by_key(|c| c.created_at);
    let mut newest: HashMap<(&str, String), String> = HashMap::new();
    for c in &containers {
        let Some(pod) = uid.get(c.pod_sandbox_id.as_str()) else {
            continue;
        };
        let name = c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        newest.insert((pod, name), c.id.clone());
    }
    newest.into_values().collect()
}

/// Where checkpoint `name` holds a policy other than the one the kubelet is configured with (its
/// flag over its config, else the kubelet's default): what the kubelet says as it stops. `None`
/// when they agree, when `name` keeps no policy, or when neither flags nor a config were read.
fn policy_differs(f: &Facts, name: &str, v: &Value) -> Option<String> {
    let &(_, flag, field, default) = POLICIES.iter().find(|p| p.0 == name)?;
    let saved = v.get("policyName")?.as_str()?;
    let (configured, place) = match flag_in(&f.host.kubelet_flags, flag) {
        Some((_, Some(value))) => (value, flag.to_string()),
        _ => {
            let config = f.host.kubelet_config.as_ref()?;
            match config.get(field).and_then(Value::as_str) {
                Some(value) => (value, format!("the kubelet config's {field}")),
                None => (default, format!("the default, {field} unset")),
            }
        }
    };
    (configured != saved).then(|| {
        format!("{name} was written under policy {saved:?}, and the kubelet is configured {configured:?} ({place}): it refuses to start (\"configured policy differs from state checkpoint policy\")")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::{v, Files};

    #[test]
    fn checkpoints_in_each_upstream_format() {
        let old_cpu =
            r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"3f1e…":"1"},"checksum":1}"#;
        let new_cpu = r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"uid":{"c":"1"}},"checksum":1}"#;
        let f = Files::new();
        f.put("kubelet/cpu_manager_state", old_cpu);
        assert_eq!(checkpoints(&f.facts(), v("1.18")).status, Status::Fail);
        assert_eq!(checkpoints(&f.facts(), v("1.17")).status, Status::Pass);
        // The new kubelet migrates it while the runtime has every container it names.
        let mut facts = f.facts();
        facts.container_ids = Some(["3f1e…".to_string()].into());
        assert_eq!(checkpoints(&facts, v("1.18")).status, Status::Pass);
        facts.container_ids = Some(["9a7c…".to_string()].into());
        let c = checkpoints(&facts, v("1.18"));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence
                .ends_with("stops at an ID the runtime has no container of: 3f1e…"),
            "{c:?}"
        );
        // A key is said escaped: the evidence stays one line.
        f.put(
            "kubelet/cpu_manager_state",
            r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"a\nb":"1"},"checksum":1}"#,
        );
        let mut facts = f.facts();
        facts.container_ids = Some(Default::default());
        let c = checkpoints(&facts, v("1.18"));
        assert!(
            c.evidence.ends_with("no container of: a\\nb") && !c.evidence.contains('\n'),
            "{c:?}"
        );
        f.put("kubelet/cpu_manager_state", new_cpu);
        assert_eq!(checkpoints(&f.facts(), v("1.30")).status, Status::Pass);

        let old_dev = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":["d0"],"AllocResp":""}],"RegisteredDevices":{}},"Checksum":1}"#;
        let new_dev = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["d0"]},"AllocResp":""}],"RegisteredDevices":{}},"Checksum":1}"#;
        let g = Files::new();
        g.put(
            "kubelet/device-plugins/kubelet_internal_checkpoint",
            old_dev,
        );
        assert_eq!(checkpoints(&g.facts(), v("1.20")).status, Status::Warn);
        // Read again by 1.23 – 1.29, no longer by 1.30.
        assert_eq!(checkpoints(&g.facts(), v("1.23")).status, Status::Pass);
        assert_eq!(checkpoints(&g.facts(), v("1.29")).status, Status::Pass);
        let c = checkpoints(&g.facts(), v("1.30"));
        assert_eq!(c.status, Status::Warn);
        assert!(c.evidence.contains("which kubelet 1.30 does not read (1.23 – 1.29 did; pkg/kubelet/cm/devicemanager/manager.go readCheckpoint (kubernetes#123398))"), "{c:?}");
        g.put(
            "kubelet/device-plugins/kubelet_internal_checkpoint",
            new_dev,
        );
        assert_eq!(checkpoints(&g.facts(), v("1.20")).status, Status::Pass);

        let h = Files::new();
        h.put("kubelet/dra_manager_state", r#"{"Data":"{}","Checksum":1}"#);
        let mut facts = h.facts();
        facts.from = Some(v("1.30"));
        assert_eq!(checkpoints(&facts, v("1.31")).status, Status::Fail);
        facts.from = Some(v("1.31"));
        assert_eq!(checkpoints(&facts, v("1.32")).status, Status::Pass);
        h.put("kubelet/cpu_manager_state", "{not json");
        assert_eq!(checkpoints(&h.facts(), v("1.30")).status, Status::Fail);
    }

    #[test]
    fn the_kubelet_knows_each_pods_newest_container_of_a_name_in_a_listed_sandbox() {
        let sandbox = |id: &str, uid: &str| proto::PodSandbox {
            id: id.into(),
            metadata: Some(proto::PodSandboxMetadata {
                uid: uid.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let container = |id: &str, sandbox: &str, name: &str, created_at: i64| proto::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(proto::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            created_at,
            ..Default::default()
        };
        let known = initial_containers(
            &[sandbox("s1", "u1"), sandbox("s2", "u1")],
            vec![
                container("new", "s2", "web", 20),
                container("old", "s1", "web", 10),
                container("side", "s1", "log", 10),
                container("orphan", "gone", "web", 30),
            ],
        );
        // The same pod's older "web" is replaced by its newer one, whatever its sandbox; a
        // container whose sandbox the runtime does not list is not known.
        assert_eq!(known, ["new", "side"].map(String::from).into());
    }

    #[test]
    fn a_checkpoint_written_under_another_policy_stops_the_kubelet() {
        let f = Files::new();
        f.put(
            "kubelet/cpu_manager_state",
            r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{},"checksum":1}"#,
        );
        f.put(
            "kubelet/memory_manager_state",
            r#"{"policyName":"None","machineState":{},"entries":{},"checksum":1}"#,
        );
        // No config and no flags read: nothing to compare with.
        assert_eq!(checkpoints(&f.facts(), v("1.30")).status, Status::Pass);
        f.put("kubelet/config.yaml", "cpuManagerPolicy: static\n");
        assert_eq!(checkpoints(&f.facts(), v("1.30")).status, Status::Pass);
        // The config's default ("none") against a static checkpoint.
        f.put("kubelet/config.yaml", "{}\n");
        let c = checkpoints(&f.facts(), v("1.30"));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence.starts_with("cpu_manager_state was written under policy \"static\", and the kubelet is configured \"none\" (the default, cpuManagerPolicy unset)"),
            "{c:?}"
        );
        // A flag wins over the config, for each manager.
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--cpu-manager-policy=static --memory-manager-policy=Static\"\n",
        );
        let c = checkpoints(&f.facts(), v("1.30"));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence.starts_with("memory_manager_state was written under policy \"None\", and the kubelet is configured \"Static\" (--memory-manager-policy)"),
            "{c:?}"
        );
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--cpu-manager-policy=static\"\n",
        );
        assert_eq!(checkpoints(&f.facts(), v("1.30")).status, Status::Pass);
    }
}
