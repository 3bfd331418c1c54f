//! A node's static pods: each manifest joined to the sandbox the kubelet runs it in, and what
//! kubehash does about its UID.
//!
//! The kubelet names a static pod's sandbox `<metadata.name>-<node>` in the manifest's namespace,
//! and gives it the pod's annotations, among them `kubernetes.io/config.source: file` and
//! `kubernetes.io/config.hash` (the UID it derived). A manifest that already sets `metadata.uid`
//! keeps its pod across kubelet versions; one that does not is pinned to the UID its running
//! sandbox has ([`crate::rewrite::pin`]). A manifest that does not parse, holds several documents,
//! has no ready sandbox, or was modified well after that sandbox was created (two minutes) is
//! reported and left alone, and its pod is recreated by a new kubelet. The last because a pin
//! keeps the pod that runs: a manifest changed since may say another pod, and a change outside
//! the containers (a volume, the pod's security context) shows in no container's hash. Rollback
//! gives an unpinned manifest back its modification time, so that it can be pinned again.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::kubelet::facts::{fact, holds, removed_gate, FactId};
use crate::kubelet::static_refs::{api_object_reference, GATE};
use crate::kubelet::version::KubeletVersion;
use crate::runtime::cri::{keys, proto};
use crate::source::encoding;
use crate::source::manifests::{Manifest, Manifests};

/// The annotation the kubelet puts on a pod read from a manifest file.
pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";

/// What kubehash does with one static pod's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "action", content = "reason")]
pub enum PinAction {
    /// The manifest sets the UID the pod runs under: nothing to do.
    AlreadyPinned,
    /// Write the running UID into the manifest.
    Pin,
    /// Left alone, for this reason; a new kubelet recreates the pod.
    Refused(String),
    /// The new kubelet refuses the manifest itself, for this reason: it kills the pod and does
    /// not start it again. A pin would keep nothing.
    NotAdmitted(String),
}

/// One static pod manifest and its running sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaticPod {
    pub path: String,
    pub namespace: String,
    /// The manifest's `metadata.name` (the pod runs as `<name>-<node>`).
    pub name: String,
    /// The UID of its ready sandbox (empty when none).
    pub uid: String,
    #[serde(flatten)]
    pub action: PinAction,
}

/// Joins every manifest to the ready sandbox of its pod. With `node`, the sandbox must be named
/// `<name>-<node>`; without, any `<name>-…` sandbox of a file-sourced pod, if there is one only.
pub fn static_pods(
    sandboxes: &[proto::PodSandbox],
    manifests: &Manifests,
    node: Option<&str>,
) -> Vec<StaticPod> {
    manifests
        .all()
        .map(|m| {
            let ready: Vec<&proto::PodSandbox> = sandboxes
                .iter()
                .filter(|s| s.state == proto::PodSandboxState::SandboxReady as i32)
                .filter(|s| s.annotations.get(CONFIG_SOURCE).map(String::as_str) == Some("file"))
                .filter(|s| {
                    let Some(md) = &s.metadata else { return false };
                    md.namespace == m.namespace
                        && match node {
                            Some(n) => md.name == format!("{}-{n}", m.name),
                            None => md
                                .name
                                .strip_prefix(&m.name)
                                .is_some_and(|r| r.starts_with('-')),
                        }
                })
                .collect();
            // Pinning keeps the pod its sandbox runs; a manifest changed since may say another
            // pod, and a change outside the containers (volumes, pod security context) shows in
            // no container's hash.
            let changed_since = ready.as_slice().first().and_then(|s| {
                let started = UNIX_EPOCH + Duration::from_nanos(u64::try_from(s.created_at).ok()?);
                let modified = m.modified?;
                (modified > started + CHANGED_AFTER).then_some((modified, started))
            });
            let uid = match ready.as_slice() {
                [one] => one
                    .metadata
                    .as_ref()
                    .map(|md| md.uid.clone())
                    .filter(|u| !u.is_empty())
                    .or_else(|| one.labels.get(keys::POD_UID).cloned())
                    .unwrap_or_default(),
                _ => String::new(),
            };
            let action = if m.several {
                PinAction::Refused("the file holds several documents".into())
            } else if !m.others.is_empty() {
                PinAction::Refused(m.declared_twice())
            } else if ready.len() > 1 {
                PinAction::Refused(format!(
                    "{} ready sandboxes match it; give --node-name",
                    ready.len()
                ))
            } else if uid.is_empty() {
                PinAction::Refused("no ready sandbox runs it".into())
            } else {
                match (&m.uid, changed_since) {
                    (Some(u), _) if *u == uid => PinAction::AlreadyPinned,
                    (Some(u), _) => PinAction::Refused(format!(
                        "it pins metadata.uid {u}, but the pod runs as {uid}"
                    )),
                    (None, _) if m.link.is_some() => PinAction::Refused(format!(
                        "the file is a symbolic link to {}: replacing it would turn the link into a copy; to keep the pod, set its metadata.uid to {uid} by hand in the file it points to while the kubelet is stopped",
                        m.link.as_deref().unwrap_or(Path::new("")).display()
                    )),
                    (None, _) if encoding::is_utf16(&m.bytes) => PinAction::Refused(format!(
                        "the file is UTF-16 (its byte order mark says): kubehash reads such a file and never writes one; to keep the pod, set its metadata.uid to {uid} by hand while the kubelet is stopped"
                    )),
                    (None, Some((modified, started))) => PinAction::Refused(format!(
                        "the file was modified ({}) well after its pod's sandbox was created ({}): it may not say the pod that runs",
                        timestamp(modified),
                        timestamp(started)
                    )),
                    (None, None) => PinAction::Pin,
                }
            };
            StaticPod {
                path: m.path.display().to_string(),
                namespace: m.namespace.clone(),
                name: m.name.clone(),
                uid,
                action,
            }
        })
        .collect()
}

/// Why kubelet `to` refuses `manifest` itself, if it does: from 1.34 it reads no manifest that
/// references an API object ([`api_object_reference`]) unless `PreventStaticPodAPIReferences` is
/// set false (`gate`); from 1.37, which removed the gate, whatever it is set to. A pod that runs
/// from such a manifest was admitted by the old kubelet.
pub fn not_admitted(manifest: &Manifest, gate: Option<bool>, to: KubeletVersion) -> Option<String> {
    let removed = removed_gate(GATE, to);
    if !holds(FactId::StaticPodApiReferencesRefused, to)
        || (gate == Some(false) && removed.is_none())
    {
        return None;
    }
    let why = match api_object_reference(&manifest.pod) {
        Ok(None) => return None,
        Ok(Some(what)) => format!("static pods may not reference {what}"),
        Err(e) => e,
    };
    let or = match removed {
        None => format!(", or set the feature gate {GATE}=false"),
        Some(r) => format!(
            " (kubelet 1.{} removed the gate {GATE} that allowed it, {})",
            r.since, r.source
        ),
    };
    Some(format!(
        "kubelet {to} refuses the manifest ({why}; {}): it kills the pod and does not start it again; take the reference out of the manifest (a hostPath for a file, no serviceAccountName) before the upgrade{or}",
        fact(FactId::StaticPodApiReferencesRefused).source
    ))
}

/// How long after its pod's sandbox was created a manifest counts as changed since. The kubelet
/// reads the file before it creates the sandbox, so in a node's life the file is older. A file
/// written just after (a node laid out for a test, a copy made as the pod started) was written
/// while the kubelet that had just started the pod ran, which would have recreated the pod for a
/// change; one written long after may have been changed while no kubelet ran.
const CHANGED_AFTER: Duration = Duration::from_secs(120);

/// A time as RFC 3339, UTC.
fn timestamp(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{t:?}"))
}
