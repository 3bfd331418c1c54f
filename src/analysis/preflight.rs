//! Preflight: every other reason a new kubelet kills or recreates running pods right after a
//! binary swap, checked before it. A matching container hash is necessary, not sufficient.
//! Each check is named, reads only the facts gathered (nothing is ever modified), and says what
//! it saw and what to do. Version facts come from [`crate::kubelet::facts`].

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::kubelet::facts::{crosses, fact, holds, FactId, DOCKERSHIM_FLAGS};
use crate::kubelet::quantity::parse_quantity_milli;
use crate::kubelet::version::KubeletVersion;
use crate::runtime::cri::{proto, Cri};
use crate::source::host::{Host, HostPaths};

/// A check's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Unknown,
    Warn,
    Fail,
}

/// One named check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    /// What a failure of it does to pods.
    pub protects: &'static str,
    pub status: Status,
    pub evidence: String,
    /// What to do (empty when nothing).
    pub action: String,
}

/// What the checks read.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub to: Option<KubeletVersion>,
    pub from: Option<KubeletVersion>,
    pub host: Host,
    /// The cgroup driver the runtime reports (`None`: it does not say).
    pub runtime_driver: Option<String>,
    /// The CRI API version the runtime serves (`v1`, `v1alpha2`).
    pub cri_api: String,
    pub sandboxes: Vec<proto::PodSandboxStatus>,
    /// This node's pods (API objects), when known.
    pub pods: Option<Vec<Value>>,
    /// This node's Node object, when known.
    pub node: Option<Value>,
}

/// Reads the runtime's part of the facts over CRI.
pub async fn runtime_facts(cri: &mut Cri, facts: &mut Facts) -> Result<()> {
    facts.runtime_driver = cri.cgroup_driver().await?;
    facts.cri_api = cri.runtime_version().runtime_api_version.clone();
    for s in cri.list_pod_sandboxes().await? {
        facts.sandboxes.push(cri.pod_sandbox_status(&s.id).await?);
    }
    Ok(())
}

/// The checks for this node: its files (`host`), its runtime over CRI, and its pods and Node
/// object where known. Problems reading the files are returned beside the checks.
pub async fn check_node(
    cri: &mut Cri,
    host: &HostPaths,
    pods: Option<Vec<Value>>,
    node: Option<Value>,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
) -> Result<(Vec<Check>, Vec<String>)> {
    let host = Host::read(host);
    let problems = host.problems.clone();
    let mut facts = Facts {
        to: Some(to),
        from,
        host,
        pods,
        node,
        ..Facts::default()
    };
    runtime_facts(cri, &mut facts).await?;
    Ok((run(&facts, to), problems))
}

/// Every check, in the order of the README.
pub fn run(f: &Facts, to: KubeletVersion) -> Vec<Check> {
    vec![
        cgroups(f, to),
        admission(f),
        sandboxes(f),
        resize(f, to),
        checkpoints(f, to),
        kubelet_starts(f, to),
        eviction(f),
    ]
}

/// The worst status of `checks`.
pub fn worst(checks: &[Check]) -> Status {
    checks
        .iter()
        .map(|c| c.status)
        .max()
        .unwrap_or(Status::Pass)
}

impl Check {
    /// The outcome: its status, the evidence read, and what to do.
    fn set(&mut self, status: Status, evidence: impl Into<String>, action: impl Into<String>) {
        self.status = status;
        self.evidence = evidence.into();
        self.action = action.into();
    }
}

fn check(name: &'static str, protects: &'static str) -> Check {
    Check {
        name,
        protects,
        status: Status::Pass,
        evidence: String::new(),
        action: String::new(),
    }
}

/// `syncPod`: a pod whose cgroup the kubelet does not find (`pcm.Exists`) is killed. The driver
/// decides the path it looks for; from 1.31 it is the runtime's when the runtime reports one.
fn cgroups(f: &Facts, to: KubeletVersion) -> Check {
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
        c.action = "give --kubelet-config".into();
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

/// `HandlePodAdditions` runs `canAdmitPod` for running pods too: a pod the new kubelet rejects
/// is set Failed and killed.
fn admission(f: &Facts) -> Check {
    let (Some(pods), Some(node)) = (&f.pods, &f.node) else {
        let mut c = check(ADMISSION.0, ADMISSION.1);
        c.set(
            Status::Unknown,
            "no Node object or pods (give --cluster)",
            "run with --cluster to check labels, allocatable and devices",
        );
        return c;
    };
    let mut tally = Admission::new(node);
    pods.iter().for_each(|p| tally.add(p));
    tally.check()
}

const ADMISSION: (&str, &str) = (
    "admission",
    "a running pod the new kubelet does not admit again is set Failed and killed (HandlePodAdditions → canAdmitPod)",
);

/// What one running pod brings to the admission check.
#[derive(Debug, Clone, Default)]
pub struct PodAdmission {
    refused: Vec<String>,
    devices: Vec<String>,
    requested: Vec<(String, i128)>,
}

/// The admission check, one pod at a time (a cluster-wide scan streams pods).
#[derive(Debug, Clone)]
pub struct Admission {
    labels: serde_json::Map<String, Value>,
    allocatable: serde_json::Map<String, Value>,
    pods: usize,
    refused: Vec<String>,
    devices: Vec<String>,
    requested: BTreeMap<String, i128>,
}

impl Admission {
    /// Against this Node object.
    pub fn new(node: &Value) -> Admission {
        let map = |ptr: &str| {
            node.pointer(ptr)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        Admission {
            labels: map("/metadata/labels"),
            allocatable: map("/status/allocatable"),
            pods: 0,
            refused: Vec::new(),
            devices: Vec::new(),
            requested: BTreeMap::new(),
        }
    }

    /// One of the node's pods (pods that do not run are not admitted again).
    pub fn add(&mut self, pod: &Value) {
        let judged = Admission::judge(&self.labels, pod);
        self.count(judged);
    }

    /// What admitting `pod` on a node with these labels finds, on its own: a scan judges pods
    /// on several threads and counts them in input order.
    pub fn judge(labels: &serde_json::Map<String, Value>, pod: &Value) -> Option<PodAdmission> {
        if !running(pod) {
            return None;
        }
        let mut out = PodAdmission::default();
        let name = pod_name(pod);
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        if let Some(sel) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object) {
            for (k, v) in sel {
                if label(k) != v.as_str() {
                    let want = v.as_str().unwrap_or("");
                    out.refused.push(format!("{name}: nodeSelector {k}={want}"));
                }
            }
        }
        let terms = pod
            .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
            .and_then(Value::as_array);
        if let Some(terms) = terms {
            if !terms.iter().any(|t| term_matches(t, labels)) {
                out.refused.push(format!("{name}: required node affinity"));
            }
        }
        for c in containers(pod, &["containers", "initContainers"]) {
            if let Some(req) = c.pointer("/resources/requests").and_then(Value::as_object) {
                for (k, v) in req {
                    if k.contains('/') && !k.starts_with("hugepages-") {
                        out.devices.push(format!("{name}: {k}"));
                    }
                    if let Some(m) = v.as_str().and_then(|q| parse_quantity_milli(q).ok()) {
                        out.requested.push((k.clone(), m));
                    }
                }
            }
        }
        Some(out)
    }

    /// Counts one pod judged by [`Admission::judge`] against this node's labels.
    pub fn count(&mut self, judged: Option<PodAdmission>) {
        let Some(p) = judged else { return };
        self.pods += 1;
        self.refused.extend(p.refused);
        self.devices.extend(p.devices);
        for (k, m) in p.requested {
            *self.requested.entry(k).or_default() += m;
        }
    }

    /// The check's result for the pods added.
    pub fn check(&self) -> Check {
        let mut c = check(ADMISSION.0, ADMISSION.1);
        let mut refused = self.refused.clone();
        for (k, total) in &self.requested {
            let cap = self
                .allocatable
                .get(k)
                .and_then(Value::as_str)
                .and_then(|q| parse_quantity_milli(q).ok());
            if cap.is_some_and(|cap| *total > cap) {
                refused.push(format!(
                    "running pods request more {k} than the node's allocatable"
                ));
            }
        }
        c.evidence = format!(
            "{} running pods against the Node's labels and allocatable",
            self.pods
        );
        if !refused.is_empty() {
            c.set(Status::Fail, refused.join("; "), "restore the node labels / allocatable these pods need before the swap, or move the pods");
        } else if !self.devices.is_empty() {
            c.status = Status::Warn;
            c.evidence = format!(
                "pods use device-plugin resources ({}): they are admitted only once the device plugin registers again",
                self.devices.join(", ")
            );
            c.action = "avoid kubelet 1.25.10, 1.26.5 and 1.27.2, which rejected such pods at restart (fixed upstream by #118635 and its backports)".into();
        }
        c
    }
}

fn term_matches(term: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let exprs = term
        .get("matchExpressions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    exprs.iter().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let have = label(key);
        match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => have.is_some_and(|h| values.contains(&h)),
            "NotIn" => !have.is_some_and(|h| values.contains(&h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            "Gt" | "Lt" => {
                let (Some(h), Some(v)) = (
                    have.and_then(|h| h.parse::<i64>().ok()),
                    values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if e["operator"] == "Gt" {
                    h > v
                } else {
                    h < v
                }
            }
            _ => false,
        }
    })
}

/// `PodSandboxChanged`: more than one ready sandbox, the newest not ready, a network namespace
/// mode other than the pod's `hostNetwork`, or a pod-network sandbox without an IP: the sandbox
/// and all its containers are recreated.
fn sandboxes(f: &Facts) -> Check {
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
    let host_network = |uid: &str| -> Option<bool> {
        f.pods.as_ref()?.iter().find_map(|p| {
            (p.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)).then(|| {
                p.pointer("/spec/hostNetwork")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            })
        })
    };
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
        if let Some(host) = host_network(&uid) {
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

/// In-place resize: a container whose resources differ from what was actuated, with
/// `resizePolicy: RestartContainer`, is restarted. The API server shows both sides: the spec, and
/// `status.containerStatuses[].resources` with the pod's `status.resize` / resize conditions.
fn resize(f: &Facts, to: KubeletVersion) -> Check {
    let mut c = check(
        "resize",
        "a container whose spec resources differ from what the kubelet actuated is restarted when its resizePolicy says RestartContainer",
    );
    let Some(pods) = &f.pods else {
        c.status = Status::Unknown;
        c.evidence = "no pods (give -i or --cluster)".into();
        return c;
    };
    let on = holds(FactId::InPlaceResizeDefault, to)
        || f.host
            .kubelet_config
            .as_ref()
            .and_then(|c| c.pointer("/featureGates/InPlacePodVerticalScaling"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let (mut pending, mut unseen, mut watched) = (Vec::new(), Vec::new(), 0);
    for p in pods.iter().filter(|p| running(p)) {
        let resize_pending = p.pointer("/status/resize").is_some_and(|r| !r.is_null())
            || p.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        matches!(
                            c["type"].as_str(),
                            Some("PodResizePending" | "PodResizeInProgress")
                        ) && c["status"] == "True"
                    })
                });
        for ctr in containers(p, &["containers"]) {
            let restarts = ctr
                .get("resizePolicy")
                .and_then(Value::as_array)
                .is_some_and(|r| r.iter().any(|r| r["restartPolicy"] == "RestartContainer"));
            if !restarts {
                continue;
            }
            watched += 1;
            let name = format!("{}/{}", pod_name(p), ctr["name"].as_str().unwrap_or(""));
            let actuated = p
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .and_then(|s| s.iter().find(|s| s["name"] == ctr["name"]))
                .and_then(|s| s.get("resources"));
            match actuated {
                _ if resize_pending => pending.push(format!("{name} (a resize is pending)")),
                Some(a) if !same_resources(a, ctr.get("resources")) => {
                    pending.push(format!("{name} (spec resources differ from status)"))
                }
                Some(_) => {}
                None => unseen.push(name),
            }
        }
    }
    c.evidence = format!(
        "in-place resize {} for kubelet {to}; {watched} containers restart on a resize",
        if on { "on" } else { "off" }
    );
    if !on || watched == 0 {
        return c;
    }
    if !pending.is_empty() {
        c.status = Status::Fail;
        c.evidence = format!("{}: {}", c.evidence, pending.join(", "));
        c.action = format!(
            "let these resizes finish (or revert the spec) before the swap ({})",
            fact(FactId::InPlaceResizeDefault).source
        );
    } else if !unseen.is_empty() {
        c.status = Status::Unknown;
        c.evidence = format!(
            "{}; the API server reports no actuated resources for {}",
            c.evidence,
            unseen.join(", ")
        );
        c.action = "compare their spec resources with what runs before the swap".into();
    }
    c
}

/// Whether the actuated resources equal the spec's, quantity by quantity.
fn same_resources(actuated: &Value, spec: Option<&Value>) -> bool {
    let amounts = |v: Option<&Value>, side: &str| -> BTreeMap<String, Option<i128>> {
        v.and_then(|v| v.get(side))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, q)| {
                        (
                            k.clone(),
                            q.as_str().and_then(|q| parse_quantity_milli(q).ok()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    ["requests", "limits"]
        .iter()
        .all(|side| amounts(Some(actuated), side) == amounts(spec, side))
}

/// Checkpoints under the kubelet's root whose format the new kubelet does not read: the CPU and
/// DRA managers refuse to start, the device manager starts empty.
fn checkpoints(f: &Facts, to: KubeletVersion) -> Check {
    let mut c = check(
        "checkpoints",
        "a checkpoint the new kubelet cannot read stops it (CPU, DRA managers) or empties it (device manager: double allocation, rejected pods)",
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
        match name.as_str() {
            "cpu_manager_state" if holds(FactId::CpuManagerCheckpointByPod, to) => {
                // v1 (≤ 1.17): entries container ID → cpuset; v2: pod UID → container → cpuset.
                let old = v["entries"]
                    .as_object()
                    .is_some_and(|e| e.values().any(Value::is_string));
                if old {
                    fail.push(format!(
                        "{name} keys entries by container ID, the format before 1.{} ({})",
                        fact(FactId::CpuManagerCheckpointByPod).since,
                        fact(FactId::CpuManagerCheckpointByPod).source
                    ));
                }
            }
            "device-plugins/kubelet_internal_checkpoint"
                if holds(FactId::DeviceCheckpointByNuma, to) =>
            {
                let old = v
                    .pointer("/Data/PodDeviceEntries")
                    .and_then(Value::as_array)
                    .is_some_and(|e| e.iter().any(|d| d["DeviceIDs"].is_array()));
                if old {
                    warn.push(format!(
                        "{name} lists device IDs without NUMA nodes, the format before 1.{}: the device manager starts empty",
                        fact(FactId::DeviceCheckpointByNuma).since
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

/// Flags and defaults the new kubelet refuses: the node stays NotReady, which leads to eviction.
fn kubelet_starts(f: &Facts, to: KubeletVersion) -> Check {
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
        if h.kubelet_config.is_some() {
            "read"
        } else {
            "absent"
        },
        if f.cri_api.is_empty() {
            "?"
        } else {
            &f.cri_api
        }
    );
    if !fail.is_empty() {
        c.set(Status::Fail, fail.join("; "), "change the kubelet's flags, config or runtime first; a kubelet that does not start cannot keep any pod");
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

/// While the kubelet is down the node gets NoExecute not-ready/unreachable taints, and pods go
/// after their `tolerationSeconds`.
fn eviction(f: &Facts) -> Check {
    let Some(pods) = &f.pods else {
        let mut c = check(EVICTION.0, EVICTION.1);
        c.status = Status::Unknown;
        c.evidence = "no pods (give -i or --cluster)".into();
        return c;
    };
    let mut tally = Eviction::default();
    pods.iter().for_each(|p| tally.add(p));
    tally.check(f.node.as_ref())
}

const EVICTION: (&str, &str) = (
    "eviction",
    "pods are evicted once the kubelet has been down longer than the node-monitor grace period plus their tolerationSeconds",
);

/// The eviction check, one pod at a time.
#[derive(Debug, Clone, Default)]
pub struct Eviction {
    /// The shortest toleration of a not-ready/unreachable node, and its pod.
    shortest: Option<(i64, String)>,
}

impl Eviction {
    pub fn add(&mut self, p: &Value) {
        self.count(Eviction::judge(p));
    }

    /// A running pod's shortest toleration of a not-ready/unreachable node, and its name.
    pub fn judge(p: &Value) -> Option<(i64, String)> {
        if !running(p) {
            return None;
        }
        let tolerations = p
            .pointer("/spec/tolerations")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // The API server gives every pod 300 s for both taints (DefaultTolerationSeconds).
        let secs = [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ]
        .iter()
        .map(|taint| {
            tolerations
                .iter()
                .filter(|t| t["effect"] == "NoExecute" || t["effect"].is_null())
                .filter(|t| t["key"] == *taint || (t["key"].is_null() && t["operator"] == "Exists"))
                .map(|t| t["tolerationSeconds"].as_i64().unwrap_or(i64::MAX))
                .max()
                .unwrap_or(300)
        })
        .min()
        .unwrap_or(300);
        Some((secs, pod_name(p)))
    }

    /// Counts one pod judged by [`Eviction::judge`]; the first pod with the shortest toleration
    /// is the one named.
    pub fn count(&mut self, judged: Option<(i64, String)>) {
        let Some((secs, pod)) = judged else { return };
        if self.shortest.as_ref().is_none_or(|(s, _)| secs < *s) {
            self.shortest = Some((secs, pod));
        }
    }

    /// The check's result for the pods added, on this Node (when known).
    pub fn check(&self, node: Option<&Value>) -> Check {
        let mut c = check(EVICTION.0, EVICTION.1);
        let tainted = node
            .and_then(|n| n.pointer("/spec/taints"))
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().any(|t| t["effect"] == "NoExecute"));
        if tainted {
            c.set(
                Status::Fail,
                "the Node already has a NoExecute taint",
                "find out why before stopping the kubelet",
            );
            return c;
        }
        match &self.shortest {
            None => c.evidence = "no running pods".into(),
            Some((secs, pod)) => {
                c.evidence = format!(
                    "the shortest toleration of a not-ready/unreachable node is {secs} s ({pod}); taints come after the node-monitor grace period (40 s by default)"
                );
                if *secs < 300 {
                    c.status = Status::Warn;
                    c.action = format!(
                        "keep the kubelet down for less than {secs} s plus the grace period, or raise {pod}'s tolerationSeconds"
                    );
                }
            }
        }
        c
    }
}

/// Whether a pod is one the checks look at: not ended and not pending (a pod without a phase,
/// as a hand-written file has it, counts as running). The admission, eviction and resize checks
/// count only these.
pub fn running(pod: &Value) -> bool {
    !matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed" | "Pending")
    )
}

fn pod_name(pod: &Value) -> String {
    let m = |k: &str| {
        pod.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    format!("{}/{}", m("namespace"), m("name"))
}

fn containers<'a>(pod: &'a Value, lists: &'a [&str]) -> impl Iterator<Item = &'a Value> + 'a {
    lists.iter().flat_map(move |l| {
        pod.pointer(&format!("/spec/{l}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::host::HostPaths;
    use serde_json::json;

    fn v(s: &str) -> KubeletVersion {
        s.parse().unwrap()
    }

    /// A node's files laid out in a temporary directory, as on a real node.
    struct Files(tempfile::TempDir);

    impl Files {
        fn new() -> Files {
            Files(tempfile::tempdir().unwrap())
        }
        fn put(&self, rel: &str, text: &str) -> &Files {
            let p = self.0.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
        fn dir(&self, rel: &str) -> &Files {
            std::fs::create_dir_all(self.0.path().join(rel)).unwrap();
            self
        }
        fn host(&self) -> Host {
            let r = self.0.path();
            Host::read(&HostPaths {
                cgroup_root: r.join("cgroup"),
                kubelet_root: r.join("kubelet"),
                kubelet_config: r.join("kubelet/config.yaml"),
                kubelet_flags: r.join("kubelet/kubeadm-flags.env"),
            })
        }
        fn facts(&self) -> Facts {
            Facts {
                host: self.host(),
                cri_api: "v1".into(),
                ..Facts::default()
            }
        }
    }

    const UID: &str = "6a1b2c3d-0000-4000-8000-00000000abcd";

    /// cgroup v2 with the systemd layout, a burstable pod in it.
    fn systemd_v2(f: &Files, kubepods_controllers: &str) {
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

    fn pod(name: &str, spec: Value) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "uid": name},
               "spec": spec, "status": {"phase": "Running"}})
    }

    fn node(labels: Value, allocatable: Value) -> Value {
        json!({"kind": "Node", "metadata": {"name": "n", "labels": labels},
               "status": {"allocatable": allocatable}})
    }

    #[test]
    fn admission_fails_on_labels_and_allocatable_and_warns_on_devices() {
        let spec = |extra: Value| {
            let mut s =
                json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]});
            s.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            s
        };
        let mut f = Facts {
            pods: Some(vec![pod(
                "a",
                spec(json!({"nodeSelector": {"disk": "ssd"}})),
            )]),
            node: Some(node(json!({"disk": "ssd"}), json!({"cpu": "2"}))),
            ..Facts::default()
        };
        assert_eq!(admission(&f).status, Status::Pass, "{:?}", admission(&f));
        f.node = Some(node(json!({"disk": "hdd"}), json!({"cpu": "2"})));
        assert_eq!(admission(&f).status, Status::Fail);
        let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}});
        f.pods = Some(vec![pod("b", spec(affinity))]);
        f.node = Some(node(json!({"zone": "a"}), json!({"cpu": "2"})));
        assert_eq!(admission(&f).status, Status::Pass);
        f.node = Some(node(json!({"zone": "b"}), json!({"cpu": "2"})));
        assert_eq!(admission(&f).status, Status::Fail);
        f.pods = Some(vec![pod("c", spec(json!({})))]);
        f.node = Some(node(json!({}), json!({"cpu": "250m"})));
        assert!(admission(&f).evidence.contains("allocatable"));
        f.pods = Some(vec![pod(
            "d",
            json!({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}),
        )]);
        f.node = Some(node(json!({}), json!({"nvidia.com/gpu": "1"})));
        assert_eq!(admission(&f).status, Status::Warn);
        assert_eq!(admission(&Facts::default()).status, Status::Unknown);
    }

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
        // A pod whose only sandbox is stopped is not running: nothing to recreate by surprise.
        assert_eq!(
            sandboxes(&facts(vec![sandbox("a", 1, false, false, "")], None)).status,
            Status::Pass
        );
    }

    #[test]
    fn resize_fails_on_a_pending_resize_of_a_restarting_container() {
        let p = |status: Value| {
            json!({"metadata": {"namespace": "ns", "name": "a", "uid": "a"},
                   "spec": {"containers": [{"name": "c",
                        "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                        "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}]},
                   "status": status})
        };
        let actuated = |mem: &str| {
            json!({"phase": "Running", "containerStatuses": [{"name": "c",
            "resources": {"requests": {"memory": mem}, "limits": {"memory": mem}}}]})
        };
        let facts = |pod: Value| Facts {
            pods: Some(vec![pod]),
            ..Facts::default()
        };
        assert_eq!(
            resize(&facts(p(actuated("1024Mi"))), v("1.33")).status,
            Status::Pass
        );
        let differs = resize(&facts(p(actuated("512Mi"))), v("1.33"));
        assert_eq!(differs.status, Status::Fail, "{differs:?}");
        let mut pending = actuated("1Gi");
        pending["resize"] = json!("InProgress");
        assert_eq!(resize(&facts(p(pending)), v("1.33")).status, Status::Fail);
        let unseen = resize(&facts(p(json!({"phase": "Running"}))), v("1.33"));
        assert_eq!(unseen.status, Status::Unknown);
        // Resize off (1.30 without the gate): nothing restarts on a resize.
        assert_eq!(
            resize(&facts(p(actuated("512Mi"))), v("1.30")).status,
            Status::Pass
        );
        let mut gated = facts(p(actuated("512Mi")));
        gated.host.kubelet_config =
            Some(json!({"featureGates": {"InPlacePodVerticalScaling": true}}));
        assert_eq!(resize(&gated, v("1.30")).status, Status::Fail);
    }

    #[test]
    fn checkpoints_in_each_upstream_format() {
        let old_cpu =
            r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"3f1e…":"1"},"checksum":1}"#;
        let new_cpu = r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"uid":{"c":"1"}},"checksum":1}"#;
        let f = Files::new();
        f.put("kubelet/cpu_manager_state", old_cpu);
        assert_eq!(checkpoints(&f.facts(), v("1.18")).status, Status::Fail);
        assert_eq!(checkpoints(&f.facts(), v("1.17")).status, Status::Pass);
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
        assert!(restricted_label("kubernetes.io/role") && !restricted_label("kubernetes.io/os"));
        assert!(!restricted_label("example.com/a") && !restricted_label("plain"));
    }

    #[test]
    fn eviction_warns_on_short_tolerations_and_fails_on_an_existing_taint() {
        let short = pod(
            "a",
            json!({"containers": [], "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]}),
        );
        let plain = pod("b", json!({"containers": []}));
        let mut f = Facts {
            pods: Some(vec![plain.clone()]),
            ..Facts::default()
        };
        assert_eq!(eviction(&f).status, Status::Pass);
        f.pods = Some(vec![plain, short]);
        let c = eviction(&f);
        assert_eq!(c.status, Status::Warn);
        assert!(c.evidence.contains("30 s (ns/a)"), "{c:?}");
        f.node = Some(json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}}));
        assert_eq!(eviction(&f).status, Status::Fail);
    }
}
