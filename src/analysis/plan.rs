//! Joining a node's containers (as the runtime reports them over CRI) to their pod specs, and the
//! verdict for each one (design §5).
//!
//! For a container C with stored hash H, the current spec S of its pod, the old kubelet F and the
//! new kubelet T:
//! * `unchanged`: `hash_T(S) == H`, the new kubelet keeps it as it is;
//! * `rewrite`: the proof rule holds: F is one known version (`--from`, or the Node's
//!   `kubeletVersion`), `hash_F(S) == H`, and F's hash covers everything T's hash covers in S
//!   ([`crate::analysis::coverage`]). C provably runs the current spec and only the hash format changes, so
//!   H may be replaced by `hash_T(S)`;
//! * `will-restart`: H is not kubelet F's hash of S (the spec really changed), or S sets a field
//!   that T hashes and F dropped (C never applied it), or the runtime records that C was created
//!   for another image, command, args, environment, working directory, stdin, tty or security
//!   context than S says (the hashes collide; [`crate::analysis::created_with`]). Never masked;
//! * `unprovable`: F is unknown, or F hashes less than T (a downgrade from name+image);
//! * `not-running`: C is created or exited, or a regular init or ephemeral container, or its pod
//!   is being deleted or has finished: the kubelet restarts a container for a hash change only
//!   while it runs, only a regular one or a sidecar (`computePodActions`,
//!   `computeInitContainerActions`), and only in a pod it syncs rather than tears down, so
//!   nothing to do;
//! * `recreated`: C belongs to a static pod whose manifest does not pin `metadata.uid`: the new
//!   kubelet derives a new pod UID and recreates the pod whatever the hashes say
//!   ([`crate::source::manifests`]);
//! * `killed`: C belongs to a static pod whose manifest the new kubelet refuses (it references
//!   an API object, 1.34 +; [`crate::kubelet::static_refs`]): the pod is killed and not started
//!   again;
//! * `no-pod`: no pod spec for C (deleted pod, static pod without a mirror pod);
//! * `error`: cannot decide (no stored hash, a spec that does not decode, …).
//!
//! The *provenance* of C is the list of kubelet versions whose hash of S equals H. It is shown to
//! people and never authorises a write: 29 formulas of 32 bits each are too easy to collide.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::analysis::coverage::{coverage, Coverage};
use crate::analysis::created_with;
use crate::analysis::statics::{not_admitted, static_pods, PinAction, StaticPod};
use crate::error::{Problem, Result};
use crate::kubelet::defaults::default_pod;
use crate::kubelet::hash::{hash_container, ContainerHashes};
use crate::kubelet::sink::format_hash;
use crate::kubelet::version::KubeletVersion;
use crate::runtime::cri::{keys, proto, Cri};
use crate::source::manifests::Manifests;
use crate::source::pods::{pod_containers, torn_down, ContainerKind};

/// What to do with one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Unchanged,
    Rewrite,
    WillRestart,
    Unprovable,
    NotRunning,
    Recreated,
    Killed,
    NoPod,
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Unchanged => "unchanged",
            Verdict::Rewrite => "rewrite",
            Verdict::WillRestart => "will-restart",
            Verdict::Unprovable => "unprovable",
            Verdict::NotRunning => "not-running",
            Verdict::Recreated => "recreated",
            Verdict::Killed => "killed",
            Verdict::NoPod => "no-pod",
            Verdict::Error => "error",
        }
    }
}

/// One container's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerPlan {
    pub id: String,
    pub sandbox_id: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    /// CRI state: created, running, exited, unknown.
    pub state: String,
    /// `io.kubernetes.container.hash` as stored.
    pub stored_hash: Option<String>,
    pub stored_hash_without_resources: Option<String>,
    pub verdict: Verdict,
    /// Kubelet versions whose hash of the current spec equals the stored hash.
    pub provenance: Vec<String>,
    /// The target kubelet's hash of the current spec (when the spec could be hashed).
    pub new_hash: Option<String>,
    /// The target's hashWithoutResources (targets 1.27 – 1.30 only).
    pub new_hash_without_resources: Option<String>,
    /// Why this verdict, in a sentence.
    pub reason: String,
    /// For an `unchanged` container whose runtime record says it was created from another spec
    /// than its current one: what differs. Kubelet T keeps it running as it was created, since
    /// its hash does not cover the change (a static pod's manifest edited under a pinned
    /// `metadata.uid`) or collides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_another_spec: Option<String>,
}

impl ContainerPlan {
    /// Whether kubelet `v`'s hash of the current spec is the stored hash (one of the
    /// [`ContainerPlan::provenance`] ranges holds `v`).
    pub fn stored_by(&self, v: KubeletVersion) -> bool {
        self.provenance.iter().any(|range| {
            let mut ends = range.split('–').map(str::parse::<KubeletVersion>);
            match (ends.next(), ends.next()) {
                (Some(Ok(a)), None) => a.minor() == v.minor(),
                (Some(Ok(a)), Some(Ok(b))) => (a.minor()..=b.minor()).contains(&v.minor()),
                _ => false,
            }
        })
    }
}

/// A container, of those `ours` does not claim, whose stored hash is kubelet `to`'s of its spec
/// where kubelet `from`'s is not: a kubelet that hashes as `to` does made it (`to` itself, in
/// whatever PID namespace, with whatever healthz address), or something rewrote it. Evidence that
/// the upgrade to `to` has begun, and that what runs may include its restarts.
pub fn made_for_the_target(
    plans: &[ContainerPlan],
    from: KubeletVersion,
    ours: impl Fn(&str) -> bool,
) -> Option<&ContainerPlan> {
    plans
        .iter()
        .find(|p| p.verdict == Verdict::Unchanged && !p.stored_by(from) && !ours(&p.id))
}

/// Pod specs by pod UID (and by namespace/name, for specs saved without a UID).
#[derive(Debug, Default)]
pub struct PodIndex {
    by_uid: HashMap<String, PodSpecs>,
    /// Static pods by the UID the kubelet runs them under: (namespace, mirror pod name, node).
    statics: HashMap<String, (String, String, String)>,
    /// Pods saved without a UID, which can only be matched by namespace/name.
    by_name: HashMap<(String, String), PodSpecs>,
    /// What happens to each static pod's manifest, by the UID it runs under.
    pins: HashMap<String, PinAction>,
    /// For a static pod whose specs come from its mirror pod: the containers its manifest says,
    /// as the kubelet defaults them, with their kinds, by the UID it runs under.
    manifest_specs: HashMap<String, HashMap<String, (Value, ContainerKind)>>,
    /// For those static pods: what their manifests say for all their containers ([`pod_level`]).
    manifest_pods: HashMap<String, Value>,
    /// Objects that could not be read as pods.
    pub problems: Vec<String>,
}

/// One pod's container specs by container name. A container the input gives two different specs
/// for (its pod listed twice, from listings taken at different times) has none: kubehash cannot
/// tell which is current, and proving a container against a stale spec would mask the change
/// made since.
#[derive(Debug, Default)]
struct PodSpecs {
    specs: HashMap<String, Value>,
    listed_differently: HashSet<String>,
    /// Each container's kind; `None` where two listings put it in different lists.
    kinds: HashMap<String, Option<ContainerKind>>,
    /// Why no container of the pod is compared, where every listing says the kubelet tears it
    /// down ([`torn_down`]).
    torn_down: Option<Option<&'static str>>,
    /// What the pod spec sets for all its containers ([`pod_level`]); `None` where two
    /// listings say different things.
    pod: Option<Value>,
    pod_listed: bool,
}

/// What a pod's spec sets for all its containers that the runtime's record of each container
/// holds ([`created_with::contradiction_in_pod`]): `securityContext`, `hostPID`, `hostIPC` and
/// `shareProcessNamespace`, where the pod has them.
fn pod_level(pod: &Value) -> Value {
    let spec = &pod["spec"];
    let kept = [
        "securityContext",
        "hostPID",
        "hostIPC",
        "shareProcessNamespace",
    ]
    .into_iter()
    .filter_map(|k| spec.get(k).map(|v| (k.to_string(), v.clone())));
    Value::Object(kept.collect())
}

impl PodSpecs {
    fn set_torn_down(&mut self, why: Option<&'static str>) {
        self.torn_down = Some(match self.torn_down {
            Some(known) => known.and(why),
            None => why,
        });
    }

    fn set_pod(&mut self, pod: &Value) {
        match &self.pod {
            Some(known) if known != pod => self.pod = None,
            _ if self.pod_listed => {}
            _ => self.pod = Some(pod.clone()),
        }
        self.pod_listed = true;
    }

    fn add(&mut self, name: String, json: Value, kind: ContainerKind) {
        let known = self.kinds.entry(name.clone()).or_insert(Some(kind));
        if *known != Some(kind) {
            *known = None;
        }
        match self.specs.get(&name) {
            Some(known) if *known != json => {
                self.listed_differently.insert(name);
            }
            Some(_) => {}
            None => {
                self.specs.insert(name, json);
            }
        }
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.specs
            .get(name)
            .filter(|_| !self.listed_differently.contains(name))
    }

    fn kind(&self, name: &str) -> Option<ContainerKind> {
        self.kinds.get(name).copied().flatten()
    }
}

/// The pods a node's runtime has containers of: by UID, and by namespace/name (what
/// [`PodIndex::find`] matches on). A node's index keeps only these pods' specs, so that reading a
/// whole cluster's pods takes memory for this node's alone.
#[derive(Debug, Default)]
pub struct RuntimePods {
    uids: HashSet<String>,
    names: HashSet<(String, String)>,
}

impl RuntimePods {
    /// The pods of `containers`, by their labels (as [`plan`] joins them).
    pub fn of(containers: &[proto::Container]) -> Self {
        let mut pods = RuntimePods::default();
        for c in containers {
            let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
            pods.uids.insert(label(keys::POD_UID));
            pods.names
                .insert((label(keys::POD_NAMESPACE), label(keys::POD_NAME)));
        }
        pods
    }

    /// Whether a container of the pod `uid` (the UID it runs under; empty if the pod has none),
    /// `namespace`/`name` can be one of the runtime's.
    fn has(&self, uid: &str, namespace: &str, name: &str) -> bool {
        match uid {
            "" => self
                .names
                .contains(&(namespace.to_string(), name.to_string())),
            uid => self.uids.contains(uid),
        }
    }
}

impl PodIndex {
    /// Adds one pod object (its containers of every kind).
    pub fn add_pod(&mut self, pod: Value) {
        if let Err(e) = self.add_pod_of(pod, None) {
            self.problems.push(e.0);
        }
    }

    /// [`PodIndex::add_pod`], keeping only the containers of pods the runtime has (all with
    /// `None`). A pod that is not one is still read; why it cannot be used is returned, for the
    /// caller to say where it is and keep in [`PodIndex::problems`].
    pub fn add_pod_of(
        &mut self,
        pod: Value,
        runtime: Option<&RuntimePods>,
    ) -> std::result::Result<(), Problem> {
        let level = pod_level(&pod);
        let down = torn_down(&pod);
        for mut c in pod_containers(pod)? {
            // A static pod runs under the kubelet's UID (config.hash), not the mirror's.
            let uid = c.static_uid.as_deref().unwrap_or(&c.pod_uid);
            if runtime.is_some_and(|r| !r.has(uid, &c.namespace, &c.pod)) {
                continue;
            }
            if let Some(uid) = c.static_uid.take() {
                self.statics.insert(
                    uid.clone(),
                    (c.namespace.clone(), c.pod.clone(), c.node.clone()),
                );
                c.pod_uid = uid;
            }
            let specs = if c.pod_uid.is_empty() {
                self.by_name
                    .entry((c.namespace.clone(), c.pod.clone()))
                    .or_default()
            } else {
                self.by_uid.entry(c.pod_uid.clone()).or_default()
            };
            specs.add(c.name, c.json, c.kind);
            specs.set_pod(&level);
            specs.set_torn_down(down);
        }
        Ok(())
    }

    /// The spec of container `name` of the pod with this UID. A pod saved without a UID is
    /// matched by namespace/name; a pod with a UID never matches a container of another UID (a
    /// pod deleted and recreated under the same name is a different pod).
    /// None too for a container the input gives two different specs for
    /// ([`PodIndex::listed_differently`]).
    pub fn find(&self, uid: &str, namespace: &str, pod: &str, name: &str) -> Option<&Value> {
        self.pod(uid, namespace, pod).and_then(|cs| cs.get(name))
    }

    /// Whether the input gives container `name` of this pod two different specs (its pod is
    /// listed twice, from listings taken at different times): it has no spec to prove against.
    pub fn listed_differently(&self, uid: &str, namespace: &str, pod: &str, name: &str) -> bool {
        self.pod(uid, namespace, pod)
            .is_some_and(|cs| cs.listed_differently.contains(name))
    }

    fn pod(&self, uid: &str, namespace: &str, pod: &str) -> Option<&PodSpecs> {
        self.by_uid
            .get(uid)
            .or_else(|| self.by_name.get(&(namespace.to_string(), pod.to_string())))
    }

    /// Adds the static pods read from the node's manifests: their pin actions, and, for a pod
    /// with no mirror pod in the index, its containers as the kubelet defaults them.
    pub fn add_static_pods(&mut self, statics: &[StaticPod], manifests: &Manifests) {
        for s in statics.iter().filter(|s| !s.uid.is_empty()) {
            self.pins.insert(s.uid.clone(), s.action.clone());
            let Some(m) = manifests.get(&s.namespace, &s.name) else {
                continue;
            };
            let mut pod = m.pod.clone();
            default_pod(&mut pod);
            let level = pod_level(&pod);
            let mirrored = self.by_uid.contains_key(&s.uid);
            match pod_containers(pod) {
                // With a mirror pod, a manifest that does not parse agrees with no container.
                Err(_) if mirrored => {
                    self.manifest_specs.insert(s.uid.clone(), HashMap::new());
                }
                Err(e) => self.problems.push(format!("{}: {e}", s.path)),
                Ok(cs) if mirrored => {
                    let specs = cs.into_iter().map(|c| (c.name, (c.json, c.kind))).collect();
                    self.manifest_specs.insert(s.uid.clone(), specs);
                    self.manifest_pods.insert(s.uid.clone(), level);
                }
                Ok(cs) => {
                    let specs = self.by_uid.entry(s.uid.clone()).or_default();
                    for c in cs {
                        specs.add(c.name, c.json, c.kind);
                    }
                    specs.set_pod(&level);
                }
            }
        }
    }

    /// For a static pod running under `uid` whose specs come from its mirror pod: what its
    /// manifest says of container `name`, as the kubelet defaults it (`Some(None)`: the manifest
    /// has no such container). `None` for any other pod.
    pub fn manifest_spec(&self, uid: &str, name: &str) -> Option<Option<&Value>> {
        self.manifest_specs
            .get(uid)
            .map(|specs| specs.get(name).map(|(spec, _)| spec))
    }

    /// Why the kubelet never compares the hash of container `name` of this pod (matched as
    /// [`PodIndex::find`] matches): every listing of the pod says the kubelet tears it down
    /// (it is being deleted or has finished, [`torn_down`]), or the container is a regular init container or an ephemeral
    /// container ([`ContainerKind::hash_never_compared`]). For a static pod whose specs come
    /// from its mirror pod, its manifest (which the kubelet runs) must say so too. `None` where
    /// the container's listings disagree on its kind.
    pub fn hash_never_compared(
        &self,
        uid: &str,
        namespace: &str,
        pod: &str,
        name: &str,
    ) -> Option<&'static str> {
        let specs = self.pod(uid, namespace, pod)?;
        if let Some(Some(why)) = specs.torn_down {
            return Some(why);
        }
        let why = specs.kind(name)?.hash_never_compared()?;
        match self.manifest_specs.get(uid) {
            Some(specs) => specs.get(name)?.1.hash_never_compared().map(|_| why),
            None => Some(why),
        }
    }

    /// What the pod spec sets for all the containers of this pod (matched as
    /// [`PodIndex::find`] matches), and for a static pod with a mirror pod what its manifest
    /// does: its `securityContext`, `hostPID`, `hostIPC` and `shareProcessNamespace`, for
    /// [`created_with::contradiction_in_pod`]. `None` where two listings of the pod differ.
    pub fn pod_levels(
        &self,
        uid: &str,
        namespace: &str,
        pod: &str,
    ) -> (Option<&Value>, Option<&Value>) {
        (
            self.pod(uid, namespace, pod).and_then(|p| p.pod.as_ref()),
            self.manifest_pods.get(uid),
        )
    }

    /// What happens to the manifest of the static pod running under `uid`, when the node's
    /// manifests and sandboxes were read.
    pub fn pin_action(&self, uid: &str) -> Option<&PinAction> {
        self.pins.get(uid)
    }

    /// The static pod running under `uid`: (namespace, mirror pod name, node).
    pub fn static_pod(&self, uid: &str) -> Option<&(String, String, String)> {
        self.statics.get(uid)
    }

    /// How many pods are indexed.
    pub fn len(&self) -> usize {
        self.by_uid.len() + self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `1.16–1.26, 1.31` for a sorted list of versions.
pub fn version_ranges(vs: &[KubeletVersion]) -> Vec<String> {
    let mut out: Vec<(KubeletVersion, KubeletVersion)> = Vec::new();
    for &v in vs {
        match out.last_mut() {
            Some(last) if last.1.minor() + 1 == v.minor() => last.1 = v,
            _ => out.push((v, v)),
        }
    }
    out.into_iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        })
        .collect()
}

fn state_name(s: i32) -> &'static str {
    match proto::ContainerState::try_from(s) {
        Ok(proto::ContainerState::ContainerCreated) => "created",
        Ok(proto::ContainerState::ContainerRunning) => "running",
        Ok(proto::ContainerState::ContainerExited) => "exited",
        _ => "unknown",
    }
}

/// A node's plan: its static pods' manifests and a verdict for each of its containers.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    pub statics: Vec<StaticPod>,
    pub containers: Vec<ContainerPlan>,
}

/// Reads this node's containers and sandboxes over CRI, joins the static pods to their manifests
/// (adding their specs to `pods`), and plans every container.
pub async fn plan_node(
    cri: &mut Cri,
    pods: &mut PodIndex,
    manifests: &Manifests,
    node: Option<&str>,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
) -> Result<NodeView> {
    let (mut statics, containers) = read_node(cri, pods, manifests, node).await?;
    // pkg/kubelet/config/common.go: a manifest kubelet T refuses is no pod it runs.
    for s in statics.iter_mut().filter(|_| from != Some(to)) {
        let refused = manifests
            .get(&s.namespace, &s.name)
            .and_then(|m| not_admitted(m, manifests.prevent_api_references, to));
        if let Some(why) = refused {
            s.action = PinAction::NotAdmitted(why);
            if !s.uid.is_empty() {
                pods.pins.insert(s.uid.clone(), s.action.clone());
            }
        }
    }
    let mut plans = plan(&containers, pods, manifests, to, from);
    overrule_by_the_runtime(cri, &mut plans, pods, to).await;
    kept_as_created(cri, &mut plans, pods, &statics, to).await;
    // Pinning keeps the running pod only if the manifest is what runs: every running container
    // of the pod must hash, under the old kubelet, to what it stored, and none may have been
    // created from another spec by its record. Otherwise the manifest changed, the pod is left
    // to the kubelet, and its containers are planned again as such.
    let mut refused = false;
    for s in statics.iter_mut().filter(|s| s.action == PinAction::Pin) {
        if let Some(why) = unverified(&plans, &s.uid) {
            s.action = PinAction::Refused(why);
            pods.pins.insert(s.uid.clone(), s.action.clone());
            refused = true;
        }
    }
    if refused {
        plans = plan(&containers, pods, manifests, to, from);
        overrule_by_the_runtime(cri, &mut plans, pods, to).await;
        kept_as_created(cri, &mut plans, pods, &statics, to).await;
    }
    Ok(NodeView {
        containers: plans,
        statics,
    })
}

/// What the runtime recorded at create time overrules the hashes ([`created_with`]): a `rewrite`
/// container whose runtime tells what it was created with (containerd's verbose
/// `ContainerStatus`), and that contradicts the spec, is `will-restart`: its stored hash collides.
/// A runtime that does not tell gives no evidence either way; `apply` reads the record again
/// before writing. [`plan_node`] calls it; the shim, which plans without static pods, too.
pub async fn overrule_by_the_runtime(
    cri: &mut Cri,
    plans: &mut [ContainerPlan],
    pods: &PodIndex,
    to: KubeletVersion,
) {
    for p in plans.iter_mut().filter(|p| p.verdict == Verdict::Rewrite) {
        if let Some(why) = the_record_contradicts(cri, pods, p).await {
            p.verdict = Verdict::WillRestart;
            p.reason = format!(
                "{why}, though the stored hash {} proves that spec (the two collide): kubelet {to} restarts it, and should",
                p.stored_hash.as_deref().unwrap_or_default()
            );
        }
    }
}

/// Why the runtime's record says container `p` was not created from its current spec: the spec
/// it is planned against, with what its pod sets for all containers; for a static pod whose
/// specs come from its mirror pod, what its manifest says instead (the kubelet runs the file;
/// under a pinned `metadata.uid` the mirror pod keeps the spec from before an edit,
/// `kubernetes.io/config.hash` being that UID, and a container the kubelet made again since, after
/// a crash, runs the file while the mirror pod still shows the old spec).
async fn the_record_contradicts(
    cri: &mut Cri,
    pods: &PodIndex,
    p: &ContainerPlan,
) -> Option<String> {
    let spec = pods.find(&p.pod_uid, &p.namespace, &p.pod, &p.container)?;
    let (pod, manifest_pod) = pods.pod_levels(&p.pod_uid, &p.namespace, &p.pod);
    let (spec, pod) = match pods.manifest_spec(&p.pod_uid, &p.container).flatten() {
        Some(manifest) => (manifest, manifest_pod),
        None => (spec, pod),
    };
    let created = cri.created_with(&p.id).await?;
    created_with::contradiction_in_pod(spec, pod, &created)
}

/// Kubelet T keeps an `unchanged` container whatever its record says, so one the record says was
/// created from another spec keeps running that ([`ContainerPlan::runs_another_spec`]): a static
/// pod whose manifest pins `metadata.uid` was edited (the UID, and so the pod, stays; from 1.31 a
/// container's hash covers only name and image), or the hashes collide. Said, with the way out;
/// [`plan_node`] then refuses to pin such a pod.
async fn kept_as_created(
    cri: &mut Cri,
    plans: &mut [ContainerPlan],
    pods: &PodIndex,
    statics: &[StaticPod],
    to: KubeletVersion,
) {
    for p in plans.iter_mut().filter(|p| p.verdict == Verdict::Unchanged) {
        let Some(why) = the_record_contradicts(cri, pods, p).await else {
            continue;
        };
        let stored = p.stored_hash.as_deref().unwrap_or_default();
        let way_out = match statics.iter().find(|s| s.uid == p.pod_uid) {
            Some(s) if s.action == PinAction::AlreadyPinned => format!(
                "its static pod's manifest {} sets metadata.uid, so the kubelet keeps the pod through any edit of it: delete metadata.uid from the manifest to have the pod recreated from it",
                s.path
            ),
            Some(s) => format!(
                "its static pod's manifest {} does not pin the UID the pod runs under, so the kubelet gives the pod another UID and recreates it from the file",
                s.path
            ),
            None if pods.static_pod(&p.pod_uid).is_some() => "its static pod's manifest was not read (--manifests): if it sets metadata.uid, the kubelet keeps the pod through any edit of it; delete metadata.uid to have the pod recreated from it".into(),
            None => "delete the pod to have it recreated from its spec".into(),
        };
        p.reason = format!(
            "{why}: kubelet {to} computes the stored hash {stored} and keeps it running as it was created; {way_out}"
        );
        p.runs_another_spec = Some(why);
    }
}

/// Each container's current spec on this node, by container id, found as [`plan_node`] finds
/// it (a static pod's from its manifest where no mirror pod is listed).
#[derive(Debug, Default)]
pub struct NodeSpecs(HashMap<String, Value>);

impl NodeSpecs {
    /// The current spec of the container `id`.
    pub fn get(&self, id: &str) -> Option<&Value> {
        self.0.get(id)
    }
}

/// Reads this node's containers and sandboxes over CRI, joins the static pods to their manifests
/// (adding their specs to `pods`), and finds each container's spec in `pods`.
pub async fn node_specs(
    cri: &mut Cri,
    pods: &mut PodIndex,
    manifests: &Manifests,
    node: Option<&str>,
) -> Result<NodeSpecs> {
    let (_, containers) = read_node(cri, pods, manifests, node).await?;
    Ok(NodeSpecs(
        containers
            .iter()
            .filter_map(|c| {
                let k = ContainerKey::of(c);
                let spec = pods.find(&k.uid, &k.namespace, &k.pod, &k.name)?;
                Some((c.id.clone(), spec.clone()))
            })
            .collect(),
    ))
}

/// This node's static pods (joined to their manifests, their specs added to `pods`) and its
/// containers, over CRI.
async fn read_node(
    cri: &mut Cri,
    pods: &mut PodIndex,
    manifests: &Manifests,
    node: Option<&str>,
) -> Result<(Vec<StaticPod>, Vec<proto::Container>)> {
    let statics = join_static_pods(cri, pods, manifests, node, true).await?;
    Ok((statics, cri.list_containers().await?))
}

/// Joins this node's static pods (their ready sandboxes, over CRI) to their manifests and adds
/// what the manifests say to `pods`, so that a static pod's container is proved only where its
/// manifest (what the kubelet runs) agrees. With `pins` false (the shim, which writes no
/// manifest), a manifest kubehash would pin is left alone instead: the new kubelet derives its
/// pod a new UID and recreates it.
pub async fn join_static_pods(
    cri: &mut Cri,
    pods: &mut PodIndex,
    manifests: &Manifests,
    node: Option<&str>,
    pins: bool,
) -> Result<Vec<StaticPod>> {
    let sandboxes = cri.list_pod_sandboxes().await?;
    let mut statics = static_pods(&sandboxes, manifests, node);
    if !pins {
        for s in statics.iter_mut().filter(|s| s.action == PinAction::Pin) {
            s.action = PinAction::Refused(
                "it does not set metadata.uid, and the shim writes no manifest (kubehash node apply --pins-only pins it beside the running kubelet)".into(),
            );
        }
    }
    pods.add_static_pods(&statics, manifests);
    Ok(statics)
}

/// Which pod and container a runtime container is, from the labels the kubelet gave it.
pub struct ContainerKey {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub name: String,
}

impl ContainerKey {
    pub fn of(c: &proto::Container) -> ContainerKey {
        let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
        ContainerKey {
            namespace: label(keys::POD_NAMESPACE),
            pod: label(keys::POD_NAME),
            uid: label(keys::POD_UID),
            name: c
                .labels
                .get(keys::CONTAINER_NAME)
                .cloned()
                .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                .unwrap_or_default(),
        }
    }
}

/// Why the containers of the pod running under `uid` do not show that its manifest is what runs.
fn unverified(plans: &[ContainerPlan], uid: &str) -> Option<String> {
    let mine: Vec<&ContainerPlan> = plans.iter().filter(|p| p.pod_uid == uid).collect();
    if mine.is_empty() {
        return Some("no container of the pod is listed".into());
    }
    // A running container whose hash the kubelet never compares (a regular init container) was
    // not verified against anything.
    let never_compared =
        |p: &ContainerPlan| p.verdict == Verdict::NotRunning && p.state == "running";
    mine.iter()
        .find(|p| {
            p.runs_another_spec.is_some()
                || never_compared(p)
                || !matches!(
                    p.verdict,
                    Verdict::Unchanged | Verdict::Rewrite | Verdict::NotRunning
                )
        })
        .map(|p| {
            if never_compared(p) {
                return format!(
                "container {} runs, and the kubelet never compares its hash ({}), so nothing shows that the manifest is what runs until it has finished",
                p.container, p.reason
                );
            }
            format!(
                "container {} does not verify against the manifest ({}: {}), so the manifest is not what runs",
                p.container,
                p.verdict.as_str(),
                p.runs_another_spec.as_deref().unwrap_or(&p.reason)
            )
        })
}

/// The plan for every container, in the order given.
pub fn plan(
    containers: &[proto::Container],
    pods: &PodIndex,
    manifests: &Manifests,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
) -> Vec<ContainerPlan> {
    let all: Vec<KubeletVersion> = KubeletVersion::all().collect();
    containers
        .iter()
        .map(|c| {
            let ContainerKey {
                namespace,
                pod,
                uid,
                name,
            } = ContainerKey::of(c);
            let mut p = ContainerPlan {
                id: c.id.clone(),
                sandbox_id: c.pod_sandbox_id.clone(),
                namespace,
                pod,
                pod_uid: uid,
                container: name,
                state: state_name(c.state).into(),
                stored_hash: c.annotations.get(keys::HASH).cloned(),
                stored_hash_without_resources: c
                    .annotations
                    .get(keys::HASH_WITHOUT_RESOURCES)
                    .cloned(),
                verdict: Verdict::Error,
                provenance: vec![],
                new_hash: None,
                new_hash_without_resources: None,
                reason: String::new(),
                runs_another_spec: None,
            };
            let created_for = c
                .image
                .as_ref()
                .map(|i| i.user_specified_image.as_str())
                .filter(|i| !i.is_empty());
            decide(&mut p, created_for, pods, manifests, to, from, &all);
            p
        })
        .collect()
}

fn decide(
    p: &mut ContainerPlan,
    created_for: Option<&str>,
    pods: &PodIndex,
    manifests: &Manifests,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
    all: &[KubeletVersion],
) {
    // kuberuntime_manager.go computePodActions (and computeInitContainerActions for sidecars)
    // compares hashes only for containers whose state is running.
    if p.state != "running" {
        p.verdict = Verdict::NotRunning;
        p.reason = format!(
            "the container is {}: the kubelet restarts a container for a hash change only while it runs",
            p.state
        );
        return;
    }
    if pods.listed_differently(&p.pod_uid, &p.namespace, &p.pod, &p.container) {
        p.verdict = Verdict::Error;
        p.reason = format!(
            "the pods input gives container {} of pod {}/{} (uid {:?}) two different specs (the pod is listed twice, from listings taken at different times?): kubehash proves a container only against its one current spec; give one current listing",
            p.container, p.namespace, p.pod, p.pod_uid
        );
        return;
    }
    let Some(spec) = pods.find(&p.pod_uid, &p.namespace, &p.pod, &p.container) else {
        p.verdict = Verdict::NoPod;
        p.reason = format!(
            "no spec for container {} of pod {}/{} (uid {:?}) in the pod list",
            p.container, p.namespace, p.pod, p.pod_uid
        );
        return;
    };
    let same_kubelet = from == Some(to);
    let pin = pods.pin_action(&p.pod_uid).filter(|_| !same_kubelet);
    if let Some(PinAction::NotAdmitted(why)) = pin {
        p.verdict = Verdict::Killed;
        p.reason = format!("a static pod: {why}");
        return;
    }
    if let Some(PinAction::Refused(why)) = pin {
        p.verdict = Verdict::Recreated;
        p.reason = format!(
            "a static pod whose UID kubelet {to} derives anew, and its manifest is left alone ({why}): the pod is recreated whatever its hashes say"
        );
        return;
    }
    if pin.is_some() {
        // Pinned, or pinned by apply before any hash is rewritten.
    } else if let Some((namespace, name, node)) =
        pods.static_pod(&p.pod_uid).filter(|_| !same_kubelet)
    {
        // pkg/kubelet/config/common.go applyDefaults: a static pod's UID is derived from the
        // kubelet's internal Pod type unless the manifest sets metadata.uid.
        let manifest = name.strip_suffix(&format!("-{node}")).unwrap_or(name);
        if let Err(why) = manifests.pinned(namespace, manifest, &p.pod_uid) {
            p.verdict = Verdict::Recreated;
            p.reason = format!(
                "a static pod whose UID kubelet {to} derives anew ({why}): the pod is recreated whatever its hashes say; pin metadata.uid in its manifest"
            );
            return;
        }
    }
    // computePodActions / computeInitContainerActions: a running regular init container or
    // ephemeral container is never compared, so nothing is to be written for it either.
    if let Some(why) = pods.hash_never_compared(&p.pod_uid, &p.namespace, &p.pod, &p.container) {
        p.verdict = Verdict::NotRunning;
        p.reason = why.to_string();
        return;
    }
    let path = format!("{}/{}: {}", p.namespace, p.pod, p.container);
    let hashes = match hash_container(spec, all, &path) {
        Ok(h) => h,
        Err(e) => {
            p.reason = e.to_string();
            return;
        }
    };
    // pkg/kubelet/config/file.go: a static pod runs what its file says; the mirror pod is the
    // API server's copy. Where the two hash apart (the file edited since the pod started, with
    // the kubelet down), proving against the copy would hide the edit from the new kubelet.
    if let Some(listed) = pods.manifest_spec(&p.pod_uid, &p.container) {
        let agree = listed
            .and_then(|m| hash_container(m, all, &path).ok())
            .is_some_and(|m| {
                [from, Some(to)].into_iter().flatten().all(|v| {
                    m.get(v) == hashes.get(v)
                        && m.get_without_resources(v) == hashes.get_without_resources(v)
                })
            });
        if !agree {
            p.reason = format!(
                "the static pod's manifest says another spec for container {} than its mirror pod does (edited since the pod started?): kubehash proves a static pod's container only where the two agree",
                p.container
            );
            return;
        }
    }
    p.new_hash = hashes.get(to).map(format_hash);
    p.new_hash_without_resources = hashes.get_without_resources(to).map(format_hash);
    // kubelet 1.31 (labels.go, with InPlacePodVerticalScaling) still wrote and compared
    // io.kubernetes.container.hashWithoutResources, equal to the name+image hash; 1.32 dropped
    // both. A record that carries it gets the 1.31 hash there too.
    if to.minor() == 31 && p.stored_hash_without_resources.is_some() {
        p.new_hash_without_resources = p.new_hash.clone();
    }
    let Some(stored) = p.stored_hash.clone() else {
        // kubelet: an absent or unparsable hash annotation reads as 0, which never matches.
        p.verdict = Verdict::WillRestart;
        p.reason = format!(
            "the container has no {} annotation: the kubelet reads it as 0 and restarts the container",
            keys::HASH
        );
        return;
    };
    let matching: Vec<KubeletVersion> = hashes
        .hash
        .iter()
        .filter(|(_, h)| format_hash(*h) == stored)
        .map(|(v, _)| *v)
        .collect();
    p.provenance = version_ranges(&matching);
    if p.new_hash.as_deref() == Some(stored.as_str()) {
        p.verdict = Verdict::Unchanged;
        p.reason = match from {
            // Not what kubelet F made: a kubelet hashing as T made it, or the hash was rewritten.
            Some(f) if !matching.contains(&f) => format!(
                "kubelet {to} computes the stored hash {stored}, and kubelet {f} another: a kubelet that hashes as {to} does made the container, or kubehash rewrote its hash (the upgrade has begun)"
            ),
            _ => format!("kubelet {to} computes the stored hash {stored}"),
        };
        return;
    }
    let (verdict, reason) = prove(spec, &stored, &p.provenance, &hashes, from, to, &path);
    p.verdict = verdict;
    p.reason = reason;
    // A rewrite is proven only with F known.
    if let (Verdict::Rewrite, Some(f), Some(created_for)) = (p.verdict, from, created_for) {
        if let Some(why) = created_with::another_image(spec, created_for) {
            p.verdict = Verdict::WillRestart;
            p.reason = format!(
                "{why}, though the stored hash {stored} is kubelet {f}'s hash of the spec (the two collide): kubelet {to} restarts it, and should"
            );
            return;
        }
    }
    if pin == Some(&PinAction::Pin) {
        p.reason.push_str(
            "; apply first pins metadata.uid in the pod's manifest, so that it keeps its UID",
        );
    }
}

/// The proof rule for one spec and stored hash, alone (the shim proves a saved plan again with
/// it): `Ok((hash_T, hashWithoutResources_T))` when a rewrite `from` → `to` is proven, else why not.
pub fn prove_rewrite(
    spec: &Value,
    stored: &str,
    from: KubeletVersion,
    to: KubeletVersion,
) -> std::result::Result<(String, Option<String>), Problem> {
    let mut versions = vec![from, to];
    versions.sort();
    versions.dedup();
    let hashes = hash_container(spec, &versions, "").map_err(|e| e.to_string())?;
    let new_hash = hashes.get(to).map(format_hash).unwrap_or_default();
    if new_hash == stored {
        return Err(format!("kubelet {to} computes the stored hash {stored}").into());
    }
    match prove(spec, stored, &[], &hashes, Some(from), to, "") {
        (Verdict::Rewrite, _) => Ok((new_hash, hashes.get_without_resources(to).map(format_hash))),
        (_, why) => Err(why.into()),
    }
}

/// The proof rule (design §5), for a container whose stored hash is not kubelet `to`'s: a rewrite
/// F → T needs the stored hash to equal kubelet F's hash of the current spec, F to be one known
/// version, and F's hash to cover everything T's hash covers ([`coverage`]). Anything less is
/// `will-restart` (the spec really changed, or sets a field F never applied) or `unprovable`.
fn prove(
    spec: &Value,
    stored: &str,
    provenance: &[String],
    hashes: &ContainerHashes,
    from: Option<KubeletVersion>,
    to: KubeletVersion,
    path: &str,
) -> (Verdict, String) {
    let Some(f) = from else {
        return (
            Verdict::Unprovable,
            if provenance.is_empty() {
                format!("stored hash {stored} matches no kubelet's hash of the current spec, and the old kubelet's version is unknown (--from, or --cluster to read the Node's)")
            } else {
                format!(
                    "the old kubelet's version is unknown (--from, or --cluster to read the Node's); stored hash {stored} matching kubelet {}'s hash is no proof on its own",
                    provenance.join(", ")
                )
            },
        );
    };
    if hashes.get(f).map(format_hash).as_deref() != Some(stored) {
        return (
            Verdict::WillRestart,
            if provenance.is_empty() {
                format!("stored hash {stored} is not kubelet {f}'s hash of the current spec: the spec changed since the container was created")
            } else {
                format!(
                    "stored hash {stored} is not kubelet {f}'s hash of the current spec (it is {}'s): kubelet {f} would restart it too",
                    provenance.join(", ")
                )
            },
        );
    }
    match coverage(spec, f, to, path) {
        Ok(Coverage::Covered) => (
            Verdict::Rewrite,
            format!("stored hash {stored} is kubelet {f}'s hash of the current spec"),
        ),
        Ok(Coverage::NameImageOnly) => (
            Verdict::Unprovable,
            format!("kubelet {f} hashes only name and image, kubelet {to} the whole spec: the stored hash does not prove the rest of the spec"),
        ),
        Ok(Coverage::Dropped(fields)) => (
            Verdict::WillRestart,
            format!(
                "the spec sets {}, which kubelet {to} hashes and kubelet {f} dropped: the container never applied it, and kubelet {to} restarts it to do so",
                fields.join(", ")
            ),
        ),
        Err(e) => (Verdict::Error, e.to_string()),
    }
}

/// Counts of a node plan by verdict, in the order people read them.
pub fn plan_counts(plans: &[ContainerPlan]) -> Vec<(&'static str, usize)> {
    [
        Verdict::Rewrite,
        Verdict::Unchanged,
        Verdict::WillRestart,
        Verdict::Unprovable,
        Verdict::NotRunning,
        Verdict::Recreated,
        Verdict::Killed,
        Verdict::NoPod,
        Verdict::Error,
    ]
    .iter()
    .map(|v| (v.as_str(), plans.iter().filter(|p| p.verdict == *v).count()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v(s: &str) -> KubeletVersion {
        s.parse().unwrap()
    }

    fn container(id: &str, uid: &str, name: &str, hash: Option<&str>) -> proto::Container {
        let mut labels = HashMap::new();
        labels.insert(keys::POD_UID.to_string(), uid.to_string());
        labels.insert(keys::POD_NAMESPACE.to_string(), "ns".to_string());
        labels.insert(keys::POD_NAME.to_string(), "p".to_string());
        labels.insert(keys::CONTAINER_NAME.to_string(), name.to_string());
        let mut annotations = HashMap::new();
        if let Some(h) = hash {
            annotations.insert(keys::HASH.to_string(), h.to_string());
        }
        proto::Container {
            id: id.into(),
            labels,
            annotations,
            state: proto::ContainerState::ContainerRunning as i32,
            ..Default::default()
        }
    }

    fn hash_of(spec: &Value, ver: &str) -> String {
        format_hash(hash_container(spec, &[v(ver)], "").unwrap().hash[0].1)
    }

    #[test]
    fn only_regular_init_and_ephemeral_containers_go_uncompared() {
        let pod = |init: Value, containers: Value| {
            json!({"kind":"Pod","metadata":{"namespace":"ns","name":"p","uid":"u"},"spec":{
                "nodeName":"n","initContainers":init,"containers":containers,
                "ephemeralContainers":[{"name":"e","image":"x"}]}})
        };
        let mut pods = PodIndex::default();
        pods.add_pod(pod(
            json!([{"name":"i","image":"x"},{"name":"s","image":"x","restartPolicy":"Always"}]),
            json!([{"name":"c","image":"x"}]),
        ));
        let never = |pods: &PodIndex, name: &str| pods.hash_never_compared("u", "ns", "p", name);
        assert_eq!(
            never(&pods, "i"),
            Some("a regular init container: the kubelet does not restart it for a hash change")
        );
        assert_eq!(
            never(&pods, "e"),
            Some("an ephemeral container: the kubelet never restarts it")
        );
        for compared in ["s", "c", "absent"] {
            assert_eq!(never(&pods, compared), None, "{compared}");
        }
        // A static pod's manifest, which the kubelet runs, must say so too.
        let mut statics = PodIndex::default();
        statics.add_pod(pod(json!([{"name":"i","image":"x"}]), json!([])));
        statics.manifest_specs.insert(
            "u".into(),
            HashMap::from([
                ("i".to_string(), (json!({}), ContainerKind::Regular)),
                ("e".to_string(), (json!({}), ContainerKind::Ephemeral)),
            ]),
        );
        assert_eq!(never(&statics, "i"), None);
        assert!(never(&statics, "e").is_some());
        // Two listings that put a container in different lists: it is compared.
        pods.add_pod(pod(
            json!([{"name":"s","image":"x","restartPolicy":"Always"}]),
            json!([{"name":"c","image":"x"},{"name":"i","image":"x"}]),
        ));
        assert_eq!(never(&pods, "i"), None);
        assert!(never(&pods, "e").is_some());
        // A pod being deleted is torn down: none of its containers is compared, unless a
        // listing says otherwise.
        let mut deleting = pod(json!([]), json!([{"name":"c","image":"x"}]));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-12-07T10:00:00Z");
        let mut torn_down = PodIndex::default();
        torn_down.add_pod(deleting.clone());
        assert!(never(&torn_down, "c")
            .unwrap()
            .starts_with("the pod is being deleted"));
        torn_down.add_pod(pod(json!([]), json!([{"name":"c","image":"x"}])));
        assert_eq!(never(&torn_down, "c"), None);
        let mut listed_twice = PodIndex::default();
        listed_twice.add_pod(deleting.clone());
        listed_twice.add_pod(deleting);
        assert!(never(&listed_twice, "c").is_some());
        // So is one the API server says has finished, whatever its containers still run; a
        // static pod's mirror pod is not the pod the kubelet runs.
        let mut failed = pod(json!([]), json!([{"name":"c","image":"x"}]));
        failed["status"] = json!({"phase":"Failed"});
        let mut finished = PodIndex::default();
        finished.add_pod(failed.clone());
        assert!(never(&finished, "c")
            .unwrap()
            .starts_with("the pod has finished (Failed)"));
        failed["metadata"]["annotations"] =
            json!({"kubernetes.io/config.mirror":"u","kubernetes.io/config.hash":"u"});
        let mut mirrored = PodIndex::default();
        mirrored.add_pod(failed);
        assert_eq!(never(&mirrored, "c"), None);
    }

    /// A node's index keeps the specs of the pods its runtime has containers of, and finds
    /// for each of those containers what an index of every pod finds.
    #[test]
    fn a_node_index_keeps_its_runtimes_pods_only() {
        let spec = |image: &str| json!({"name":"app","image":image});
        let pod = |name: &str, uid: Option<&str>, annotations: Value| {
            let mut meta = json!({"namespace":"ns","name":name,"annotations":annotations});
            if let Some(u) = uid {
                meta["uid"] = json!(u);
            }
            json!({"metadata":meta,"spec":{"containers":[spec(name)]}})
        };
        let mirror = json!({"kubernetes.io/config.mirror":"h1","kubernetes.io/config.hash":"h1"});
        let all = [
            pod("p", Some("u1"), json!({})),
            pod("q", Some("u2"), json!({})),
            pod("p", None, json!({})),
            pod("r", None, json!({})),
            pod("m", Some("mirror-uid"), mirror),
        ];
        // The runtime's containers: of u1, of the static pod h1, and of a pod ns/p it knows by
        // a UID no pod has (matched by name to the pod saved without one).
        let running = [
            container("a", "u1", "app", None),
            container("b", "h1", "app", None),
            container("c", "u9", "app", None),
        ];
        let (mut every, mut node) = (PodIndex::default(), PodIndex::default());
        let runtime = RuntimePods::of(&running);
        for p in &all {
            every.add_pod(p.clone());
            node.add_pod_of(p.clone(), Some(&runtime)).unwrap();
        }
        for uid in ["u1", "h1", "u9"] {
            assert_eq!(
                node.find(uid, "ns", "p", "app"),
                every.find(uid, "ns", "p", "app")
            );
            assert!(node.find(uid, "ns", "p", "app").is_some(), "{uid}");
        }
        assert_eq!(node.static_pod("h1"), every.static_pod("h1"));
        let mut kept: Vec<&String> = node.by_uid.keys().collect();
        kept.sort();
        assert_eq!(kept, ["h1", "u1"]);
        assert_eq!(node.by_name.len(), 1);
        assert_eq!((every.by_uid.len(), every.by_name.len()), (3, 2));
    }

    #[test]
    fn every_verdict() {
        let spec = json!({"name":"app","image":"nginx:1","args":["-v"]});
        let old_spec = json!({"name":"app","image":"nginx:1","args":["-v","--old"]});
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[spec.clone()]}}));
        let cs = vec![
            container("a", "u1", "app", Some(&hash_of(&spec, "1.30"))),
            container("b", "u1", "app", Some(&hash_of(&old_spec, "1.30"))),
            container("c", "u1", "app", Some(&hash_of(&spec, "1.31"))),
            container("d", "u2", "app", Some("123")),
            container("e", "u1", "app", None),
        ];
        let got: Vec<Verdict> = plan(&cs, &pods, &Manifests::none(), v("1.31"), Some(v("1.30")))
            .iter()
            .map(|p| p.verdict)
            .collect();
        assert_eq!(
            got,
            [
                Verdict::Rewrite,
                Verdict::WillRestart,
                Verdict::Unchanged,
                Verdict::NoPod,
                Verdict::WillRestart
            ]
        );
        // Without the old kubelet's version, a match among every version's hash proves nothing.
        let p = &plan(&cs[..1], &pods, &Manifests::none(), v("1.31"), None)[0];
        assert_eq!(p.verdict, Verdict::Unprovable);
        assert_eq!(p.provenance, ["1.16–1.30"]);
        assert_eq!(p.new_hash.as_deref(), Some(hash_of(&spec, "1.31").as_str()));
    }

    #[test]
    fn a_1_31_target_rewrites_hash_without_resources_where_present() {
        let spec = json!({"name":"app","image":"nginx:1","resources":{"limits":{"cpu":"1"}}});
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[spec.clone()]}}));
        let mut c = container("a", "u1", "app", Some(&hash_of(&spec, "1.30")));
        let without = hash_container(&spec, &[v("1.30")], "")
            .unwrap()
            .hash_without_resources[0]
            .1;
        c.annotations.insert(
            keys::HASH_WITHOUT_RESOURCES.to_string(),
            format_hash(without),
        );
        let p = &plan(
            &[c.clone()],
            &pods,
            &Manifests::none(),
            v("1.31"),
            Some(v("1.30")),
        )[0];
        assert_eq!(p.verdict, Verdict::Rewrite);
        assert_eq!(p.new_hash_without_resources, p.new_hash);
        // 1.32 reads it no more: left as it is.
        let p = &plan(&[c], &pods, &Manifests::none(), v("1.32"), Some(v("1.30")))[0];
        assert_eq!(p.new_hash_without_resources, None);
    }

    #[test]
    fn only_running_containers_are_restarted_for_a_hash_change() {
        let spec = json!({"name":"app","image":"nginx:1"});
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[spec.clone()]}}));
        for state in [
            proto::ContainerState::ContainerExited,
            proto::ContainerState::ContainerCreated,
            proto::ContainerState::ContainerUnknown,
        ] {
            let mut c = container("a", "u1", "app", Some(&hash_of(&spec, "1.30")));
            c.state = state as i32;
            let p = &plan(&[c], &pods, &Manifests::none(), v("1.31"), Some(v("1.30")))[0];
            assert_eq!(p.verdict, Verdict::NotRunning, "{state:?}");
        }
    }

    #[test]
    fn from_version_must_match_not_just_any_version() {
        // Stored by a 1.15 kubelet, but the node claims 1.30: 1.30 would restart it itself.
        let spec = json!({"name":"app","image":"nginx:1"});
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[spec.clone()]}}));
        let cs = vec![container("a", "u1", "app", Some(&hash_of(&spec, "1.15")))];
        let p = &plan(&cs, &pods, &Manifests::none(), v("1.31"), Some(v("1.30")))[0];
        assert_eq!(p.verdict, Verdict::WillRestart);
        assert!(
            p.reason.contains("(it is 1.14–1.15's)") || p.reason.contains("it is 1."),
            "{}",
            p.reason
        );
    }

    #[test]
    fn a_recreated_pod_is_not_the_same_pod() {
        let spec = json!({"name":"app","image":"nginx:1"});
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"new"},"spec":{"containers":[spec.clone()]}}));
        assert!(pods.find("old", "ns", "p", "app").is_none());
        assert!(pods.find("new", "ns", "p", "app").is_some());
        let mut no_uid = PodIndex::default();
        no_uid.add_pod(
            json!({"metadata":{"namespace":"ns","name":"p"},"spec":{"containers":[spec]}}),
        );
        assert!(no_uid.find("any", "ns", "p", "app").is_some());
    }

    /// A pod listed twice with different specs (two listings taken at different times): the
    /// container is proved against neither, whichever comes last; listed twice alike, it is.
    #[test]
    fn a_pod_listed_twice_differently_proves_nothing() {
        let then = json!({"name":"app","image":"nginx:1","args":["--old"]});
        let now = json!({"name":"app","image":"nginx:1","args":["--new"]});
        let pod = |spec: &Value, uid: Option<&str>| {
            let mut p =
                json!({"metadata":{"namespace":"ns","name":"p"},"spec":{"containers":[spec]}});
            if let Some(uid) = uid {
                p["metadata"]["uid"] = json!(uid);
            }
            p
        };
        for uid in [Some("u1"), None] {
            for (first, second) in [(&then, &now), (&now, &then)] {
                let mut pods = PodIndex::default();
                pods.add_pod(pod(first, uid));
                pods.add_pod(pod(second, uid));
                assert!(pods.find("u1", "ns", "p", "app").is_none());
                assert!(pods.listed_differently("u1", "ns", "p", "app"));
                // The running container was made from the old spec: provable against it alone.
                let c = container("a", "u1", "app", Some(&hash_of(&then, "1.30")));
                let p = &plan(&[c], &pods, &Manifests::none(), v("1.31"), Some(v("1.30")))[0];
                assert_eq!(p.verdict, Verdict::Error, "{uid:?}");
                assert!(p.reason.contains("two different specs"), "{}", p.reason);
            }
            let mut alike = PodIndex::default();
            alike.add_pod(pod(&then, uid));
            alike.add_pod(pod(&then, uid));
            let c = container("a", "u1", "app", Some(&hash_of(&then, "1.30")));
            let p = &plan(&[c], &alike, &Manifests::none(), v("1.31"), Some(v("1.30")))[0];
            assert_eq!(p.verdict, Verdict::Rewrite, "{uid:?}");
        }
    }

    /// What a pod sets for its containers is kept per pod for the record check; two listings
    /// that say different things give none (nothing to check against), as for a container.
    #[test]
    fn a_pods_own_settings_are_kept_and_two_listings_that_differ_give_none() {
        let pod = |spec: Value| {
            let mut p = json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},
                "spec":{"containers":[{"name":"a"},{"name":"b"}]}});
            for (k, v) in spec.as_object().unwrap() {
                p["spec"][k] = v.clone();
            }
            p
        };
        let hardened = json!({"hostPID": true, "securityContext": {"runAsUser": 1000}});
        let mut pods = PodIndex::default();
        pods.add_pod(pod(hardened.clone()));
        pods.add_pod(pod(hardened.clone()));
        assert_eq!(pods.pod_levels("u1", "ns", "p"), (Some(&hardened), None));
        let mut plain = PodIndex::default();
        plain.add_pod(pod(json!({"nodeName": "n", "hostNetwork": true})));
        assert_eq!(plain.pod_levels("u1", "ns", "p").0, Some(&json!({})));
        for (first, second) in [(hardened.clone(), json!({})), (json!({}), hardened.clone())] {
            let mut twice = PodIndex::default();
            twice.add_pod(pod(first));
            twice.add_pod(pod(second));
            twice.add_pod(pod(json!({})));
            assert_eq!(twice.pod_levels("u1", "ns", "p"), (None, None));
        }
    }

    #[test]
    fn ranges() {
        let vs: Vec<KubeletVersion> = ["1.8", "1.9", "1.10", "1.12", "1.31"]
            .iter()
            .map(|s| v(s))
            .collect();
        assert_eq!(version_ranges(&vs), ["1.8–1.10", "1.12", "1.31"]);
        // Read back: which kubelets' hash is the stored one.
        let containers = [container("c", "u", "app", Some("1"))];
        let none = Manifests::default();
        let unplanned = plan(&containers, &PodIndex::default(), &none, v("1.31"), None);
        let p = ContainerPlan {
            provenance: version_ranges(&vs),
            ..unplanned[0].clone()
        };
        for (version, stored) in [
            ("1.8", true),
            ("1.9", true),
            ("1.10", true),
            ("1.11", false),
            ("1.12", true),
            ("1.30", false),
            ("1.31", true),
            ("1.32", false),
        ] {
            assert_eq!(p.stored_by(v(version)), stored, "{version}");
        }
    }
}
