//! Pod specs and node versions from saved JSON: `kubectl get pods -A -o json` (a PodList or List),
//! single Pods, JSON arrays, or a directory of `.json` files; nodes from `kubectl get nodes -o json`.
//!
//! A PodList is read as a stream: each item is handed to the caller as soon as it is parsed and
//! dropped after, so a multi-gigabyte list scans in the memory of one pod. The owner chain of a
//! pod (Pod → ReplicaSet → Deployment, DaemonSet, StatefulSet, Job → CronJob) is resolved from
//! the pod's own metadata, since saved pod lists do not carry the owners' objects.
//!
//! Not here: the API server (live clusters), which is a separate source.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::error::Problem;
use crate::kubelet::json::{Json, JsonValue};

/// What kind of container slot in the pod.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    Init,
    /// An init container with `restartPolicy: Always` (a native sidecar).
    Sidecar,
    Regular,
    Ephemeral,
}

impl ContainerKind {
    /// Why the kubelet never restarts a running container of this kind for a hash change:
    /// `computePodActions` compares hashes only for regular containers, and
    /// `computeInitContainerActions` only for sidecars (a regular init container runs to its
    /// end; an ephemeral container is never restarted). `None` for a regular container or a
    /// sidecar.
    pub fn hash_never_compared(self) -> Option<&'static str> {
        match self {
            ContainerKind::Init => {
                Some("a regular init container: the kubelet does not restart it for a hash change")
            }
            ContainerKind::Ephemeral => {
                Some("an ephemeral container: the kubelet never restarts it")
            }
            ContainerKind::Regular | ContainerKind::Sidecar => None,
        }
    }
}

/// One container of one pod, with what the report needs to group it.
#[derive(Debug, Clone)]
pub struct PodContainer {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub node: String,
    pub workload: Workload,
    pub kind: ContainerKind,
    pub name: String,
    pub json: Value,
    /// Why a hash change cannot restart this container (from the pod's status), or `None` when
    /// it runs or may run (no status says otherwise).
    pub not_running: Option<String>,
    /// For a static pod's mirror pod: the UID the kubelet runs the pod under (its
    /// `kubernetes.io/config.hash`), which is what the runtime's labels carry.
    pub static_uid: Option<String>,
}

/// Why the kubelet restarts no container of this pod for a hash change: it is being deleted
/// (`metadata.deletionTimestamp`), and the kubelet tears such a pod down instead of syncing it
/// (`pod_workers.go` `UpdatePod`; before 1.22, `syncPod` killed it). Not for a mirror pod: its
/// deletion has the kubelet make the mirror pod again, and the static pod runs on.
pub fn being_deleted(pod: &Value) -> Option<&'static str> {
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    (deleting && static_pod_uid(pod).is_none()).then_some(
        "the pod is being deleted (metadata.deletionTimestamp): the kubelet stops its containers and restarts none",
    )
}

/// Why no container of a pod in a terminal phase is ever restarted: `Succeeded` and `Failed`
/// are phases a pod never leaves.
fn finished(pod: &Value) -> Option<&'static str> {
    match pod.pointer("/status/phase").and_then(Value::as_str) {
        Some("Succeeded") => {
            Some("the pod has finished (Succeeded): its containers are never restarted")
        }
        Some("Failed") => Some("the pod has finished (Failed): its containers are never restarted"),
        _ => None,
    }
}

/// [`being_deleted`], or a pod the API server says has finished (`Succeeded`, `Failed`):
/// `UpdatePod` tears that down as well, whatever its containers still run. Not for a mirror pod, whose static pod the
/// kubelet runs from its file.
pub fn torn_down(pod: &Value) -> Option<&'static str> {
    being_deleted(pod).or(finished(pod).filter(|_| static_pod_uid(pod).is_none()))
}

/// A mirror pod (annotation `kubernetes.io/config.mirror`) is a static pod; the kubelet's UID for
/// it is its `kubernetes.io/config.hash` annotation (the mirror annotation holds the same hash).
pub fn static_pod_uid(pod: &Value) -> Option<String> {
    let a = pod.pointer("/metadata/annotations")?;
    let mirror = a.get("kubernetes.io/config.mirror")?.as_str()?;
    Some(
        a.get("kubernetes.io/config.hash")
            .and_then(Value::as_str)
            .unwrap_or(mirror)
            .to_string(),
    )
}

/// The top of a pod's owner chain.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Workload {
    pub kind: String,
    pub name: String,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// The owner chain from the pod's metadata: a ReplicaSet named `<deployment>-<pod-template-hash>`
/// belongs to that Deployment, a Job named `<cronjob>-<digits>` is taken to be a CronJob's; a mirror
/// pod (owned by a Node) is a static pod; a pod without owner is a bare Pod.
pub fn workload_of(pod: &Value) -> Workload {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let owner = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .or_else(|| refs.first())
        });
    let Some(owner) = owner else {
        return Workload {
            kind: "Pod".into(),
            name: name.into(),
        };
    };
    let kind = owner.get("kind").and_then(Value::as_str).unwrap_or("");
    let oname = owner.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "ReplicaSet" => {
            let hash = pod
                .pointer("/metadata/labels/pod-template-hash")
                .and_then(Value::as_str);
            match hash.and_then(|h| oname.strip_suffix(h)?.strip_suffix('-')) {
                Some(dep) => Workload {
                    kind: "Deployment".into(),
                    name: dep.into(),
                },
                None => Workload {
                    kind: "ReplicaSet".into(),
                    name: oname.into(),
                },
            }
        }
        "Job" => match oname.rsplit_once('-') {
            Some((cron, ts)) if ts.len() >= 8 && ts.bytes().all(|b| b.is_ascii_digit()) => {
                Workload {
                    kind: "CronJob".into(),
                    name: cron.into(),
                }
            }
            _ => Workload {
                kind: "Job".into(),
                name: oname.into(),
            },
        },
        "Node" => Workload {
            kind: "StaticPod".into(),
            name: name.into(),
        },
        _ => Workload {
            kind: kind.into(),
            name: oname.into(),
        },
    }
}

/// What a pod's container lists hold, in the order the kubelet starts containers; `J` is a
/// container's JSON: owned ([`take_container_slots`]) or a view ([`container_slots`]).
pub enum ContainerSlot<J> {
    Container {
        /// `initContainers`, `containers` or `ephemeralContainers`.
        list: &'static str,
        index: usize,
        json: J,
    },
    /// The list is there but is not a JSON list.
    NotAList { list: &'static str, got: J },
}

/// The pod's container lists, in start order.
pub const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// Takes every container out of a pod object (init, regular, ephemeral), leaving the lists null.
/// [`container_slots`] is the same over a view.
pub fn take_container_slots(pod: &mut Value) -> Vec<ContainerSlot<Value>> {
    let mut out = Vec::new();
    for list in CONTAINER_LISTS {
        match pod.pointer_mut(&format!("/spec/{list}")).map(Value::take) {
            None | Some(Value::Null) => {}
            Some(Value::Array(cs)) => out.extend(
                cs.into_iter()
                    .enumerate()
                    .map(|(index, json)| ContainerSlot::Container { list, index, json }),
            ),
            Some(got) => out.push(ContainerSlot::NotAList { list, got }),
        }
    }
    out
}

/// Every container of a pod object (init, regular, ephemeral), read through a view.
/// [`take_container_slots`] is the same, taking them out of a `Value`.
pub fn container_slots<'a, J: Json<'a>>(pod: J) -> Vec<ContainerSlot<J>> {
    let mut out = Vec::new();
    let spec = pod.field("spec");
    for list in CONTAINER_LISTS {
        let Some(got) = spec.and_then(|s| s.field(list)) else {
            continue;
        };
        match got.view() {
            JsonValue::Null => {}
            JsonValue::Array(_, cs) => out.extend(
                cs.enumerate()
                    .map(|(index, json)| ContainerSlot::Container { list, index, json }),
            ),
            _ => out.push(ContainerSlot::NotAList { list, got }),
        }
    }
    out
}

/// What a pod's status says about which of its containers run. The kubelet compares hashes only
/// for running regular containers (`computePodActions`) and running sidecars
/// (`computeInitContainerActions`); it never restarts regular init containers or ephemeral
/// containers for a hash change, nor any container of a pod that has finished.
struct ContainerStates {
    /// Why no container of the pod can be restarted (finished, not started).
    pod: Option<String>,
    /// Container name → running, from `status.*ContainerStatuses[].state`.
    running: BTreeMap<String, bool>,
}

impl ContainerStates {
    fn of(pod: &Value, scheduled: bool) -> ContainerStates {
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut running = BTreeMap::new();
        for list in [
            "containerStatuses",
            "initContainerStatuses",
            "ephemeralContainerStatuses",
        ] {
            for s in pod
                .pointer(&format!("/status/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = s.get("name").and_then(Value::as_str) {
                    let is_running = s.pointer("/state/running").is_some_and(|r| !r.is_null());
                    running.insert(n.to_string(), is_running);
                }
            }
        }
        let torn_down = finished(pod).or_else(|| being_deleted(pod));
        let pod_reason = match phase {
            _ if torn_down.is_some() => torn_down.map(str::to_string),
            _ if !scheduled => Some("the pod is not scheduled to a node".to_string()),
            "Pending" if running.values().all(|r| !r) => {
                Some("the pod is Pending: its containers have not started".to_string())
            }
            _ => None,
        };
        ContainerStates {
            pod: pod_reason,
            running,
        }
    }

    fn not_running(&self, kind: ContainerKind, name: &str) -> Option<String> {
        if let Some(r) = &self.pod {
            return Some(r.clone());
        }
        if let Some(why) = kind.hash_never_compared() {
            return Some(why.into());
        }
        match self.running.get(name) {
            Some(false) => {
                Some("the container is not running (its status says waiting or terminated)".into())
            }
            _ => None,
        }
    }
}

/// What to say of text read where an object belongs when it is `kubectl get`'s table (YAML reads
/// those lines as one string): the output to save instead.
pub fn kubectl_table_hint(text: &str) -> &'static str {
    if text.trim_start().starts_with("NAME ") {
        " (kubectl's table: save `kubectl get pods -A -o json` instead)"
    } else {
        ""
    }
}

/// Splits a pod object into its containers (init, sidecar, regular, ephemeral), taking the
/// container values out of it. An object that is not a pod, or a pod without containers, is an
/// error naming it.
pub fn pod_containers(mut pod: Value) -> std::result::Result<Vec<PodContainer>, Problem> {
    if !pod.is_object() {
        let what = (&pod).view().a_kind();
        let hint = pod.as_str().map_or("", kubectl_table_hint);
        return Err(format!("expected a Pod object, got {what}{hint}").into());
    }
    let meta = |k: &str| {
        pod.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (namespace, name, uid) = (meta("namespace"), meta("name"), meta("uid"));
    let kind = pod.get("kind").and_then(Value::as_str).unwrap_or("Pod");
    if kind != "Pod" {
        // Named as kubectl names it, where the object has a name.
        return Err(match (namespace.as_str(), name.as_str()) {
            (_, "") => format!("a {kind} is not a Pod"),
            ("", name) => format!("{kind} {name} is not a Pod"),
            (namespace, name) => format!("{kind} {namespace}/{name} is not a Pod"),
        }
        .into());
    }
    if name.is_empty() {
        return Err("a pod without metadata.name".into());
    }
    let id = format!("{namespace}/{name}");
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let workload = workload_of(&pod);
    let status = ContainerStates::of(&pod, !node.is_empty());
    let static_uid = static_pod_uid(&pod);
    let mut out = Vec::new();
    for slot in take_container_slots(&mut pod) {
        let (list, i, c) = match slot {
            ContainerSlot::NotAList { list, .. } => {
                return Err(format!("{id}: spec.{list} is not a list").into())
            }
            ContainerSlot::Container { list, index, json } => (list, index, json),
        };
        let Some(cname) = c.get("name").and_then(Value::as_str).map(str::to_string) else {
            return Err(format!("{id}: spec.{list}[{i}] has no name").into());
        };
        let kind = match list {
            "initContainers"
                if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") =>
            {
                ContainerKind::Sidecar
            }
            "initContainers" => ContainerKind::Init,
            "containers" => ContainerKind::Regular,
            _ => ContainerKind::Ephemeral,
        };
        out.push(PodContainer {
            not_running: status.not_running(kind, &cname),
            static_uid: static_uid.clone(),
            namespace: namespace.clone(),
            pod: name.clone(),
            pod_uid: uid.clone(),
            node: node.clone(),
            workload: workload.clone(),
            kind,
            name: cname,
            json: c,
        });
    }
    if out.is_empty() {
        return Err(format!("{id}: pod has no containers").into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owner_chains() {
        let w = |v: Value| workload_of(&v).to_string();
        assert_eq!(
            w(
                json!({"metadata":{"name":"web-6c8f-x","labels":{"pod-template-hash":"6c8f"},
                "ownerReferences":[{"kind":"ReplicaSet","name":"web-6c8f","controller":true}]}})
            ),
            "Deployment/web"
        );
        assert_eq!(
            w(
                json!({"metadata":{"name":"r-1","ownerReferences":[{"kind":"Job","name":"report-29311200","controller":true}]}})
            ),
            "CronJob/report"
        );
        assert_eq!(
            w(
                json!({"metadata":{"name":"m","ownerReferences":[{"kind":"Job","name":"migrate","controller":true}]}})
            ),
            "Job/migrate"
        );
        assert_eq!(
            w(
                json!({"metadata":{"name":"etcd-a","ownerReferences":[{"kind":"Node","name":"a","controller":true}]}})
            ),
            "StaticPod/etcd-a"
        );
        assert_eq!(w(json!({"metadata":{"name":"solo"}})), "Pod/solo");
    }

    #[test]
    fn sidecars_are_init_containers_that_always_restart() {
        let pod = json!({"metadata":{"name":"p","namespace":"n"},"spec":{"nodeName":"a",
            "initContainers":[{"name":"i"},{"name":"s","restartPolicy":"Always"}],"containers":[{"name":"c"}]}});
        let kinds: Vec<_> = pod_containers(pod)
            .unwrap()
            .iter()
            .map(|c| (c.name.clone(), c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("i".into(), ContainerKind::Init),
                ("s".into(), ContainerKind::Sidecar),
                ("c".into(), ContainerKind::Regular)
            ]
        );
        assert!(pod_containers(json!({"metadata":{"name":"p"},"spec":{}})).is_err());
    }

    #[test]
    fn an_object_that_is_not_a_pod_is_named() {
        use serde_json::json;
        let why = |object: Value| pod_containers(object).err().map(|e| e.0);
        let cm = json!({"kind":"ConfigMap","metadata":{"namespace":"ns","name":"c"}});
        assert_eq!(why(cm).as_deref(), Some("ConfigMap ns/c is not a Pod"));
        let node = json!({"kind":"Node","metadata":{"name":"n"}});
        assert_eq!(why(node).as_deref(), Some("Node n is not a Pod"));
        let service = json!({"kind":"Service"});
        assert_eq!(why(service).as_deref(), Some("a Service is not a Pod"));
        assert_eq!(
            why(json!(5)).as_deref(),
            Some("expected a Pod object, got a number")
        );
        assert_eq!(
            why(json!("NAME   READY   STATUS web-1 1/1 Running")).as_deref(),
            Some("expected a Pod object, got a string (kubectl's table: save `kubectl get pods -A -o json` instead)")
        );
    }

    #[test]
    fn which_containers_a_hash_change_can_restart() {
        use serde_json::json;
        let pod = |phase: &str, node: Option<&str>, statuses: Value| {
            let mut p = json!({"metadata":{"namespace":"ns","name":"p","uid":"u"},
                "spec":{"initContainers":[{"name":"init"},{"name":"side","restartPolicy":"Always"}],
                        "containers":[{"name":"a"},{"name":"b"}],
                        "ephemeralContainers":[{"name":"debug"}]},
                "status":{"phase":phase,"containerStatuses":statuses}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
            }
            pod_containers(p)
                .unwrap()
                .into_iter()
                .map(|c| (c.name, c.not_running.is_none()))
                .collect::<Vec<_>>()
        };
        let running = json!([{"name":"a","state":{"running":{}}},{"name":"b","state":{"waiting":{"reason":"CrashLoopBackOff"}}}]);
        assert_eq!(
            pod("Running", Some("n1"), running.clone()),
            [
                ("init".to_string(), false),
                ("side".to_string(), true),
                ("a".to_string(), true),
                ("b".to_string(), false),
                ("debug".to_string(), false)
            ]
        );
        for (phase, node) in [
            ("Succeeded", Some("n1")),
            ("Failed", Some("n1")),
            ("Pending", None),
        ] {
            assert!(
                pod(phase, node, running.clone()).iter().all(|(_, r)| !r),
                "{phase}"
            );
        }
        // No status at all: assumed running (a restart is reported rather than missed).
        assert!(pod("", Some("n1"), Value::Null)
            .iter()
            .any(|(n, r)| n == "a" && *r));
    }

    #[test]
    fn a_pod_being_deleted_is_torn_down_but_a_mirror_pod_runs_on() {
        use serde_json::json;
        let pod = |meta: Value| {
            let mut p = json!({"metadata":{"namespace":"ns","name":"p","uid":"u"},
                "spec":{"nodeName":"n1","containers":[{"name":"a"}]},
                "status":{"phase":"Running","containerStatuses":[{"name":"a","state":{"running":{}}}]}});
            for (k, v) in meta.as_object().unwrap() {
                p["metadata"][k] = v.clone();
            }
            pod_containers(p).unwrap().remove(0).not_running
        };
        let deleting = json!({"deletionTimestamp":"2026-12-07T10:00:00Z"});
        assert_eq!(
            pod(deleting.clone()).as_deref(),
            Some("the pod is being deleted (metadata.deletionTimestamp): the kubelet stops its containers and restarts none")
        );
        assert_eq!(pod(json!({"deletionTimestamp":null})), None);
        let mut mirror = deleting;
        mirror["annotations"] =
            json!({"kubernetes.io/config.mirror":"h","kubernetes.io/config.hash":"h"});
        assert_eq!(pod(mirror), None);
    }
}
