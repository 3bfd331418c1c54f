//! Preflight: every other reason a new kubelet kills or recreates running pods right after a
//! binary swap, checked before it. A matching container hash is necessary, not sufficient.
//! Each check is named, reads only the facts gathered (nothing is ever modified), and says what
//! it saw and what to do. Version facts come from [`crate::kubelet::facts`].

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::kubelet::version::KubeletVersion;
use crate::runtime::cri::{proto, Cri};
use crate::source::claims::Claims;
use crate::source::host::{Host, HostPaths};

mod admission;
mod cgroups;
mod checkpoints;
mod eviction;
#[cfg(test)]
mod fixtures;
mod kubelet_starts;
mod resize;
mod sandboxes;
mod volumes;

pub use admission::{Admission, PodAdmission};
pub use eviction::Eviction;
pub use volumes::{removed_sources, Volumes};

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
    /// The IDs of the containers the kubelet finds at start (each pod's newest of a name, in a
    /// sandbox the runtime lists; `None`: not read).
    pub container_ids: Option<std::collections::BTreeSet<String>>,
    /// This node's pods (API objects), when known.
    pub pods: Option<Vec<Value>>,
    /// The persistent volumes behind claims (those with a removed plugin), when read.
    pub claims: Option<Claims>,
    /// This node's Node object, when known.
    pub node: Option<Value>,
    /// The running kubelet's pid and command line (after the program name), when one is seen.
    pub running_kubelet: Option<(u32, Vec<String>)>,
}

/// Reads the runtime's part of the facts over CRI.
pub async fn runtime_facts(cri: &mut Cri, facts: &mut Facts) -> Result<()> {
    facts.runtime_driver = cri.cgroup_driver().await?;
    facts.cri_api = cri.runtime_version().runtime_api_version.clone();
    let sandboxes = cri.list_pod_sandboxes().await?;
    for s in &sandboxes {
        facts.sandboxes.push(cri.pod_sandbox_status(&s.id).await?);
    }
    let containers = cri.list_containers().await?;
    facts.container_ids = Some(checkpoints::initial_containers(&sandboxes, containers));
    Ok(())
}

/// The checks for this node: its files (`host`), its runtime over CRI, and its pods, Node
/// object and claims' persistent volumes where known. Problems reading the files are returned
/// beside the checks.
pub async fn check_node(
    cri: &mut Cri,
    host: &HostPaths,
    pods: Option<Vec<Value>>,
    node: Option<Value>,
    claims: Option<Claims>,
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
        claims,
        running_kubelet: crate::source::kubelet_binary::kubelet_command_line(),
        ..Facts::default()
    };
    runtime_facts(cri, &mut facts).await?;
    Ok((run(&facts, to), problems))
}

/// Every check, in the order of the README.
pub fn run(f: &Facts, to: KubeletVersion) -> Vec<Check> {
    vec![
        cgroups::cgroups(f, to),
        admission::admission(f),
        sandboxes::sandboxes(f),
        resize::resize(f, to),
        checkpoints::checkpoints(f, to),
        kubelet_starts::kubelet_starts(f, to),
        volumes::volumes(f, to),
        eviction::eviction(f),
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
