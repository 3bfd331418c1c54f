//! The `sandboxes` check: a sandbox the new kubelet sees as changed is recreated with all its
//! containers (`PodSandboxChanged`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::runtime::cri::proto;
use crate::source::pods::static_pod_uid;

use super::{check, Check, Facts, Status};

/// `PodSandboxChanged`: more than one ready sandbox, the newest not ready, a network namespace
/// mode other than the pod's `hostNetwork`, or a pod-network sandbox without an IP: the sandbox
/// and all its containers are recreated.
pub(super) fn sandboxes(f: &Facts) -> Check {
    let mut c = check(
        "sandboxes",
        "a pod whose sandbox the new kubelet finds changed is recreated with all its containers (kuberuntime_manager.go PodSandboxChanged)",
    );
    let mut by_pod: BTreeMap<String, Vec<&proto::PodSandboxStatus>> = BTreeMap::new();
    for s in &f.sandboxes {
        let uid = s
            .metadata
            .as_ref()
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        by_pod.entry(uid).or_default().push(s);
    }
    // The sandbox carries the UID the kubelet runs the pod under: a static pod's is its mirror's
    // `kubernetes.io/config.hash`, not the mirror's own API UID.
    let mut host_network: BTreeMap<String, bool> = BTreeMap::new();
    for p in f.pods.iter().flatten() {
        let kubelet_uid =
            static_pod_uid(p).or_else(|| p.pointer("/metadata/uid")?.as_str().map(str::to_string));
        if let Some(uid) = kubelet_uid {
            let host = p.pointer("/spec/hostNetwork").and_then(Value::as_bool);
            host_network.entry(uid).or_insert(host.unwrap_or(false));
        }
    }
    let ready = proto::PodSandboxState::SandboxReady as i32;
    let mut changed = Vec::new();
    for (uid, mut list) in by_pod {
        list.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        let newest = list[0];
        let name = newest
            .metadata
            .as_ref()
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .unwrap_or_else(|| uid.clone());
        let ready_count = list.iter().filter(|s| s.state == ready).count();
        let node_network = newest
            .linux
            .as_ref()
            .and_then(|l| l.namespaces.as_ref())
            .and_then(|n| n.options.as_ref())
            .is_some_and(|o| o.network == proto::NamespaceMode::Node as i32);
        let ip = newest.network.as_ref().map(|n| n.ip.as_str()).unwrap_or("");
        if ready_count > 1 {
            changed.push(format!("{name}: {ready_count} ready sandboxes"));
        } else if newest.state != ready {
            // A pod whose every sandbox is gone is not running: nothing to recreate by surprise.
            if ready_count == 1 {
                changed.push(format!("{name}: the newest sandbox is not ready"));
            }
            continue;
        }
        if let Some(&host) = host_network.get(&uid) {
            if host != node_network {
                changed.push(format!(
                    "{name}: hostNetwork is {host} but the sandbox's network namespace is {}",
                    if node_network {
                        "the node's"
                    } else {
                        "its own"
                    }
                ));
            }
        }
        if !node_network && ip.is_empty() {
            changed.push(format!("{name}: a pod-network sandbox without an IP"));
        }
    }
    c.evidence = format!("{} sandboxes read over CRI", f.sandboxes.len());
    if !changed.is_empty() {
        c.set(Status::Fail, changed.join("; "), "these pods are recreated by any kubelet that syncs them; let the current kubelet settle them (or delete them) before the swap");
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::pod;
    use crate::runtime::cri::proto;
    use serde_json::json;

    fn sandbox(
        uid: &str,
        created: i64,
        ready: bool,
        host: bool,
        ip: &str,
    ) -> proto::PodSandboxStatus {
        proto::PodSandboxStatus {
            id: format!("{uid}-{created}"),
            metadata: Some(proto::PodSandboxMetadata {
                name: uid.into(),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            state: if ready { 0 } else { 1 },
            created_at: created,
            network: Some(proto::PodSandboxNetworkStatus { ip: ip.into() }),
            linux: Some(proto::LinuxPodSandboxStatus {
                namespaces: Some(proto::Namespace {
                    options: Some(proto::NamespaceOption {
                        network: if host { 2 } else { 0 },
                        ..Default::default()
                    }),
                }),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sandboxes_fail_as_pod_sandbox_changed_would() {
        let facts = |s: Vec<proto::PodSandboxStatus>, pods: Option<Vec<Value>>| Facts {
            sandboxes: s,
            pods,
            ..Facts::default()
        };
        let ok = facts(
            vec![
                sandbox("a", 1, true, false, "10.0.0.5"),
                sandbox("h", 1, true, true, ""),
            ],
            None,
        );
        assert_eq!(sandboxes(&ok).status, Status::Pass, "{:?}", sandboxes(&ok));
        for (bad, why) in [
            (
                vec![
                    sandbox("a", 1, true, false, "10.0.0.5"),
                    sandbox("a", 2, true, false, "10.0.0.6"),
                ],
                "2 ready",
            ),
            (
                vec![
                    sandbox("a", 1, true, false, "10.0.0.5"),
                    sandbox("a", 2, false, false, ""),
                ],
                "newest",
            ),
            (vec![sandbox("a", 1, true, false, "")], "without an IP"),
        ] {
            let c = sandboxes(&facts(bad, None));
            assert_eq!(c.status, Status::Fail, "{why}");
            assert!(c.evidence.contains(why), "{c:?}");
        }
        let host_pod = pod("a", json!({"hostNetwork": true, "containers": []}));
        let c = sandboxes(&facts(
            vec![sandbox("a", 1, true, false, "10.0.0.5")],
            Some(vec![host_pod]),
        ));
        assert!(c.evidence.contains("hostNetwork is true"), "{c:?}");
        // A static pod's sandbox carries the kubelet's UID, which its mirror keeps in an
        // annotation; the mirror's own API UID names no sandbox.
        let mut mirror = pod("api-uid", json!({"hostNetwork": true, "containers": []}));
        mirror["metadata"]["annotations"] = json!({
            "kubernetes.io/config.mirror": "a",
            "kubernetes.io/config.hash": "a",
        });
        let c = sandboxes(&facts(
            vec![sandbox("a", 1, true, false, "10.0.0.5")],
            Some(vec![mirror.clone()]),
        ));
        assert!(c.evidence.contains("hostNetwork is true"), "{c:?}");
        let c = sandboxes(&facts(
            vec![sandbox("api-uid", 1, true, false, "10.0.0.9")],
            Some(vec![mirror]),
        ));
        assert_eq!(c.status, Status::Pass, "{c:?}");
        // A pod whose only sandbox is stopped is not running: nothing to recreate by surprise.
        assert_eq!(
            sandboxes(&facts(vec![sandbox("a", 1, false, false, "")], None)).status,
            Status::Pass
        );
    }
}
