//! Upgrade impact: which containers a kubelet upgrade F → T would recreate, and why.
//!
//! A container is **kept** when `hash_F(S) == hash_T(S)` for its pod spec S (the new kubelet
//! computes the hash the old one stored), and would **restart** otherwise. The reasons come from
//! comparing what the two kubelets actually hash: the epoch (struct dump, JSON, name+image), and
//! for the same epoch, the fields each one prints (`VolumeMount.SubPathExpr` appears in 1.14,
//! `startupProbe` is unknown to 1.15, …).
//!
//! Identical container specs (a Deployment's replicas, a DaemonSet's pods) are decoded and hashed
//! once per (F, T): [`Scanner`] keeps a cache keyed by the container's JSON.
//!
//! ```
//! use kubehash::analysis::scan::{Scanner, Impact};
//! let mut s = Scanner::new("1.31".parse().unwrap());
//! let c = serde_json::json!({"name": "a", "image": "nginx"});
//! let o = s.assess(&c, "1.30".parse().unwrap(), "a");
//! assert_eq!(o.impact, Impact::Restart);
//! assert_eq!(o.reasons, ["kubelet 1.31 hashes only name and image; 1.30 hashes the whole spec"]);
//! ```

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::analysis::cache::Memo;
use crate::analysis::coverage::{coverage, Coverage};
use crate::analysis::listings::{Again, Listing, Seen};
use crate::analysis::plan::Verdict;
use crate::analysis::preflight::{Admission, Eviction, PodAdmission, Volumes};
pub use crate::analysis::report::{Counts, NodeSummary, NodeUpgrade, ScanReport};
use crate::analysis::runs::a_temporary_file;
pub use crate::analysis::spill::{Details, SPILL_AFTER};
use crate::error::{Error, Problem, Result};
use crate::kubelet::diff::why_changed;
use crate::kubelet::hash::hash_container;
use crate::kubelet::sink::format_hash;
use crate::kubelet::version::KubeletVersion;
use crate::source::claims::Claims;
use crate::source::manifests::Manifests;
use crate::source::nodes::NodeVersions;
use crate::source::parallel::{for_each_placed_object_on_cores, Input};
use crate::source::pods::{pod_containers, ContainerKind, PodContainer, Workload};
use crate::source::pool::{cores, map_in_order, BATCH};

/// Whether the upgrade recreates a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Impact {
    Kept,
    Restart,
    /// Not running (a finished pod, a completed init container, …): a hash change cannot
    /// restart it.
    #[serde(rename = "not-running")]
    NotRunning,
    /// A static pod: the new kubelet derives a new pod UID and recreates the pod, whatever the
    /// hashes say, unless its manifest pins `metadata.uid` (which only the node can tell).
    Recreated,
    Error,
}

/// The outcome for one container spec and one upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Outcome {
    pub impact: Impact,
    /// What kubehash can do about it, in the node plan's words: `unchanged`, `rewrite` (the
    /// restart is avoidable: the proof rule holds for F → T), `will-restart` (the spec sets a field
    /// T hashes and F dropped), `unprovable` (F hashes less than T), or `error`.
    pub verdict: Verdict,
    pub hash_from: Option<String>,
    pub hash_to: Option<String>,
    /// Why the hash changes (empty when kept).
    pub reasons: Vec<String>,
    pub error: Option<String>,
}

/// One container's line in a scan.
#[derive(Debug, Clone, Hash, Serialize, Deserialize)]
pub struct ContainerImpact {
    pub node: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub kind: ContainerKind,
    pub workload: Workload,
    /// The node's kubelet version (or `--from`); absent when unknown.
    pub from: Option<String>,
    pub to: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Outcome {
    /// A container that could not be assessed, and why.
    fn undecided(error: String) -> Outcome {
        Outcome {
            impact: Impact::Error,
            verdict: Verdict::Error,
            hash_from: None,
            hash_to: None,
            reasons: vec![],
            error: Some(error),
        }
    }
}

/// Assesses containers for an upgrade to one target version, caching identical specs.
pub struct Scanner {
    to: KubeletVersion,
    /// Static pod manifests seen (`scan --manifests`): a static pod they pin keeps its UID.
    manifests: Manifests,
    cache: Memo<(KubeletVersion, String), Outcome>,
    /// How many assessments were answered from the cache.
    pub cache_hits: u64,
}

impl Scanner {
    pub fn new(to: KubeletVersion) -> Self {
        Scanner {
            to,
            manifests: Manifests::none(),
            cache: Memo::default(),
            cache_hits: 0,
        }
    }

    pub fn to(&self) -> KubeletVersion {
        self.to
    }

    /// Takes the static pods these manifests pin as keeping their UID.
    pub fn with_manifests(mut self, manifests: Manifests) -> Self {
        self.manifests = manifests;
        self
    }

    /// Whether the static pod of `c` keeps its UID: its manifest (named as the pod without the
    /// `-<node>` suffix) pins the UID the pod runs under.
    fn pinned(&self, c: &PodContainer) -> bool {
        let Some(uid) = &c.static_uid else {
            return false;
        };
        let name = c
            .pod
            .strip_suffix(&format!("-{}", c.node))
            .unwrap_or(&c.pod);
        self.manifests.pinned(&c.namespace, name, uid).is_ok()
    }

    /// The outcome of upgrading a kubelet `from` → `self.to()` for one container spec.
    pub fn assess(&mut self, container: &Value, from: KubeletVersion, path: &str) -> Outcome {
        let key = (from, container.to_string());
        if let Some(o) = self.cache.get(&key) {
            self.cache_hits += 1;
            return o.clone();
        }
        let o = assess(container, from, self.to, path);
        // An error names the pod it was found in (`path`); it is not an answer for other pods.
        if o.impact != Impact::Error {
            self.cache.insert(key, o.clone());
        }
        o
    }

    /// Assesses every container of a pod; `from` is the pod's node's kubelet version.
    pub fn assess_pod(
        &mut self,
        containers: Vec<PodContainer>,
        from: std::result::Result<KubeletVersion, Problem>,
    ) -> Vec<ContainerImpact> {
        containers
            .into_iter()
            .map(|c| {
                let path = format!("{}/{}: {}", c.namespace, c.pod, c.name);
                let outcome = match (&from, &c.not_running) {
                    (_, Some(why)) => Outcome {
                        impact: Impact::NotRunning,
                        verdict: Verdict::NotRunning,
                        hash_from: None,
                        hash_to: None,
                        reasons: vec![why.clone()],
                        error: None,
                    },
                    // The same kubelet minor derives the same UID: only an upgrade recreates.
                    (Ok(f), None)
                        if c.static_uid.is_some() && *f != self.to && !self.pinned(&c) =>
                    {
                        Outcome {
                        impact: Impact::Recreated,
                        verdict: Verdict::Recreated,
                        hash_from: None,
                        hash_to: None,
                        reasons: vec![format!(
                            "a static pod: kubelet {} derives its UID anew (pkg/kubelet/config/common.go) and recreates it unless its manifest pins metadata.uid (kubehash node apply pins it; give scan --manifests to count pinned pods)",
                            self.to
                        )],
                        error: None,
                        }
                    }
                    (Ok(f), None) => self.assess(&c.json, *f, &path),
                    (Err(e), None) => Outcome::undecided(e.to_string()),
                };
                ContainerImpact {
                    from: from.as_ref().ok().map(|f| f.to_string()),
                    to: self.to.to_string(),
                    node: c.node,
                    namespace: c.namespace,
                    pod: c.pod,
                    container: c.name,
                    kind: c.kind,
                    workload: c.workload,
                    outcome,
                }
            })
            .collect()
    }
}

/// Uncached assessment of one container spec for F → T.
pub fn assess(container: &Value, from: KubeletVersion, to: KubeletVersion, path: &str) -> Outcome {
    let mut versions = vec![from, to];
    versions.sort();
    versions.dedup();
    match hash_container(container, &versions, path) {
        Err(e) => Outcome::undecided(e.to_string()),
        Ok(h) => {
            let (hf, ht) = (h.get(from), h.get(to));
            if hf == ht {
                return Outcome {
                    impact: Impact::Kept,
                    verdict: Verdict::Unchanged,
                    hash_from: hf.map(format_hash),
                    hash_to: ht.map(format_hash),
                    reasons: vec![],
                    error: None,
                };
            }
            let mut reasons = why_changed(container, from, to);
            let verdict = match coverage(container, from, to, path) {
                Ok(Coverage::Covered) => Verdict::Rewrite,
                Ok(Coverage::NameImageOnly) => {
                    reasons.push(format!("not avoidable: kubelet {from}'s name+image hash does not prove the rest of the spec for kubelet {to}"));
                    Verdict::Unprovable
                }
                Ok(Coverage::Dropped(fields)) => {
                    reasons.push(format!(
                        "not avoidable: the spec sets {}, which kubelet {from} dropped and {to} applies",
                        fields.join(", ")
                    ));
                    Verdict::WillRestart
                }
                Err(_) => Verdict::Error,
            };
            Outcome {
                impact: Impact::Restart,
                verdict,
                hash_from: hf.map(format_hash),
                hash_to: ht.map(format_hash),
                reasons,
                error: None,
            }
        }
    }
}

/// Where the source kubelet version of each container comes from.
#[derive(Debug, Clone)]
pub enum FromVersions {
    /// `--from F`: every node runs F.
    Fixed(KubeletVersion),
    /// Per node, from Node objects.
    PerNode(NodeVersions),
}

impl FromVersions {
    pub fn for_node(&self, node: &str) -> std::result::Result<KubeletVersion, Problem> {
        match self {
            FromVersions::Fixed(v) => Ok(*v),
            FromVersions::PerNode(_) if node.is_empty() => {
                Err("pod is not scheduled to a node, so its kubelet version is unknown".into())
            }
            FromVersions::PerNode(nv) => match nv.nodes.get(node) {
                Some(v) => v.clone(),
                None => Err(format!(
                    "node {node} is not in the node list, so its kubelet version is unknown"
                )
                .into()),
            },
        }
    }
}

/// How many threads a scan runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// Reading and assessing one after the other on the calling thread (the benches' reference;
    /// the report is the same).
    One,
    /// One thread reads and parses, this many assess, and the calling thread builds the report
    /// in input order.
    Workers(usize),
}

impl Default for Threads {
    /// A worker per core.
    fn default() -> Self {
        Threads::Workers(cores())
    }
}

impl Threads {
    /// How many worker threads: none for [`Threads::One`] (see [`map_in_order`]).
    fn workers(self) -> usize {
        match self {
            Threads::One => 0,
            Threads::Workers(n) => n.max(1),
        }
    }
}

/// Which pod objects a scan keeps.
pub type PodFilter = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// What a scan assesses and how it runs.
pub struct ScanSetup {
    pub to: KubeletVersion,
    pub from: FromVersions,
    pub manifests: Manifests,
    /// Which pod objects to scan (`-n`, `-l` on files); every one when `None`.
    pub keep: Option<PodFilter>,
    pub threads: Threads,
    /// The persistent volumes behind claims, for the volumes check (with per-node versions);
    /// `None`: not read.
    pub claims: Option<Claims>,
}

impl ScanSetup {
    pub fn new(to: KubeletVersion, from: FromVersions, manifests: Manifests) -> Self {
        ScanSetup {
            to,
            from,
            manifests,
            keep: None,
            threads: Threads::default(),
            claims: None,
        }
    }
}

/// Scans the pods of `input` (a file, a directory, stdin); `source_name` names it in the report.
///
/// With [`Threads::Workers`], one thread splits the input into pod objects and the workers
/// parse and assess them ([`for_each_placed_object_on_cores`]); the report is built from their
/// results in input order, so it is the same as with [`Threads::One`]. Memory stays bounded by a few
/// batches of pods however many there are. Objects that are not pods are listed in
/// [`ScanReport::problems`] and the scan goes on.
pub fn scan_input(
    setup: ScanSetup,
    progress: impl FnMut(u64),
    source_name: String,
    input: &Input,
) -> Result<ScanReport> {
    scan_with(setup, progress, source_name, |judge, workers, take| {
        // An object that is not a pod is named by its file and its place there.
        let worker = |source: &str| {
            let (mut assess, source) = (judge.worker(), source.to_string());
            move |n, object: Value| assess(object).map(|p| p.placed(&source, n))
        };
        for_each_placed_object_on_cores(input, workers, BATCH, worker, |_, judged| take(judged))
    })
}

/// Scans the pods that `produce` hands over (one at a time, to the callback it is given, on a
/// thread of its own with [`Threads::Workers`]), as [`scan_input`] does.
pub fn scan_source(
    setup: ScanSetup,
    progress: impl FnMut(u64),
    source_name: String,
    produce: impl FnOnce(&mut dyn FnMut(Value)) -> Result<()> + Send,
) -> Result<ScanReport> {
    let name = source_name.clone();
    scan_with(setup, progress, source_name, |judge, workers, take| {
        map_in_order(&name, workers, BATCH, produce, || judge.worker(), take)
    })
}

/// A scan whose pods `drive` judges (with the judge, on as many worker threads as it is given)
/// and hands to the callback in input order.
fn scan_with(
    setup: ScanSetup,
    mut progress: impl FnMut(u64),
    source_name: String,
    drive: impl FnOnce(&PodJudge, usize, &mut dyn FnMut(Option<JudgedPod>)) -> Result<()>,
) -> Result<ScanReport> {
    let mut n = 0u64;
    let mut count = move || {
        n += 1;
        if n.is_multiple_of(1024) {
            progress(n);
        }
    };
    let judge = PodJudge {
        keep: setup.keep,
        from: setup.from,
        to: setup.to,
        manifests: setup.manifests,
        digests: RandomState::new(),
        claims: setup.claims,
    };
    let mut report = Tally::new(setup.to, judge.claims.is_some());
    let mut failed = Ok(());
    let read = drive(&judge, setup.threads.workers(), &mut |judged| {
        count();
        if let (Ok(()), Some(j)) = (&failed, judged) {
            failed = report.add(j, &judge.from);
        }
    });
    // A bad input is the error to report; the report fails only on its temporary file.
    read?;
    failed?;
    let mut report = report.finish(&judge.from, judge.to)?;
    report.source = source_name;
    Ok(report)
}

/// What the assessing threads share: which pods to keep and how to assess them.
struct PodJudge {
    keep: Option<PodFilter>,
    from: FromVersions,
    to: KubeletVersion,
    manifests: Manifests,
    /// Keys for each pod's [`Listing`].
    digests: RandomState,
    claims: Option<Claims>,
}

/// One pod object, assessed on its own.
struct JudgedPod {
    /// With per-node versions: what the pod brings to its node's checks.
    node: Option<NodeFacts>,
    containers: std::result::Result<Vec<ContainerImpact>, Problem>,
    /// Which pod it is, where it has a UID.
    listing: Option<Listing>,
}

impl JudgedPod {
    /// The pod as the `n`th object of `source`: a problem with it says where it is.
    fn placed(mut self, source: &str, n: usize) -> Self {
        self.containers = self.containers.map_err(|p| p.at(source, n));
        if let Some(l) = &mut self.listing {
            l.placed(source, n);
        }
        self
    }
}

/// A pod's part in its node's admission, volumes and eviction checks.
struct NodeFacts {
    name: String,
    admission: Option<PodAdmission>,
    volumes: Option<Vec<String>>,
    eviction: Option<(i64, String)>,
}

impl PodJudge {
    /// An assessing thread's function, with its own scanner (and cache of answers).
    fn worker(&self) -> impl FnMut(Value) -> Option<JudgedPod> + '_ {
        let mut scanner = Scanner::new(self.to).with_manifests(self.manifests.clone());
        move |object| self.judge(&mut scanner, object)
    }

    /// `None` for a pod the filter drops.
    fn judge(&self, scanner: &mut Scanner, object: Value) -> Option<JudgedPod> {
        if self.keep.as_ref().is_some_and(|keep| !keep(&object)) {
            return None;
        }
        let mut node = None;
        if let FromVersions::PerNode(nv) = &self.from {
            let name = object.pointer("/spec/nodeName").and_then(Value::as_str);
            if let Some((name, n)) = name.and_then(|n| nv.objects.get_key_value(n)) {
                let labels = n.pointer("/metadata/labels").and_then(Value::as_object);
                let admission =
                    Admission::judge(labels.unwrap_or(&serde_json::Map::new()), &object);
                // The kubelet's GitRepoVolumeDriver is not in the Node object: its default.
                let from = self.from.for_node(name).ok();
                node = Some(NodeFacts {
                    name: name.clone(),
                    admission,
                    volumes: Volumes::judge(&object, from, self.to, None, self.claims.as_ref()),
                    eviction: Eviction::judge(&object),
                });
            }
        }
        let listing = Listing::of(&object);
        let containers = pod_containers(object).map(|containers| {
            let node = containers
                .first()
                .map(|c| c.node.clone())
                .unwrap_or_default();
            scanner.assess_pod(containers, self.from.for_node(&node))
        });
        let listing = listing.map(|l| match &containers {
            Ok(cs) => l.came_to(&self.digests, cs),
            Err(p) => l.came_to(&self.digests, &p.0),
        });
        Some(JudgedPod {
            node,
            containers,
            listing,
        })
    }
}

/// The report, built one judged pod at a time in input order.
struct Tally {
    report: ScanReport,
    /// Per node, the preflight checks pods and Node objects decide (with --nodes/--cluster).
    nodes: BTreeMap<String, (Admission, Volumes, Eviction)>,
    /// The digest of each UID's first listing.
    seen: Seen,
    /// Whether the persistent volumes behind claims were read.
    claims: bool,
}

impl Tally {
    fn new(to: KubeletVersion, claims: bool) -> Self {
        Tally {
            report: ScanReport::new(to),
            nodes: BTreeMap::new(),
            seen: Seen::default(),
            claims,
        }
    }

    fn add(&mut self, pod: JudgedPod, from: &FromVersions) -> Result<()> {
        match pod.listing.map(|l| self.seen.again(&l, "assessed")) {
            None | Some(Again::First) => {}
            Some(Again::Alike) => return Ok(()),
            Some(Again::Otherwise(why)) => {
                return self.report.problems.push(why).map_err(details_error)
            }
        }
        if let (Some(facts), FromVersions::PerNode(nv)) = (pod.node, from) {
            let claims = self.claims;
            let (a, v, e) = self.nodes.entry(facts.name).or_insert_with_key(|name| {
                let node = nv.objects.get(name).unwrap_or(&Value::Null);
                (
                    Admission::new(node),
                    Volumes::new(claims),
                    Eviction::default(),
                )
            });
            a.count(facts.admission);
            v.count(facts.volumes);
            e.count(facts.eviction);
        }
        match pod.containers {
            Ok(containers) => {
                for c in containers {
                    self.report.add(c).map_err(details_error)?;
                }
            }
            Err(e) => self.report.problems.push(e.0).map_err(details_error)?,
        }
        Ok(())
    }

    fn finish(mut self, from: &FromVersions, to: KubeletVersion) -> Result<ScanReport> {
        if let FromVersions::PerNode(nv) = from {
            for (name, (a, v, e)) in std::mem::take(&mut self.nodes) {
                if let Some(summary) = self.report.nodes.get_mut(&name) {
                    summary.checks = vec![a.check(), v.check(to), e.check(nv.objects.get(&name))];
                }
            }
        }
        for summary in self.report.nodes.values_mut() {
            summary.upgrade = Some(summary.decide_upgrade());
        }
        self.report.containers.finish().map_err(details_error)?;
        self.report.problems.finish().map_err(details_error)?;
        Ok(self.report)
    }
}

fn details_error(e: std::io::Error) -> Error {
    Error::Io {
        source_name: format!(
            "the scan's report (kept past a size in {})",
            a_temporary_file()
        ),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::nodes::NodeVersions;
    use serde_json::json;

    fn v(s: &str) -> KubeletVersion {
        s.parse().unwrap()
    }

    #[test]
    fn same_epoch_field_reasons() {
        // startupProbe arrived in 1.16's struct graph … but 1.16 is a new epoch; use 1.17 → 1.18
        // style differences within the JSON epoch: resizePolicy is known from 1.27.
        let c = json!({"name":"a","image":"b","resizePolicy":[{"resourceName":"cpu","restartPolicy":"NotRequired"}]});
        let o = assess(&c, v("1.26"), v("1.27"), "");
        assert_eq!(o.impact, Impact::Restart);
        assert_eq!(
            o.reasons,
            [
                "resizePolicy: hashed by 1.27, not by 1.26",
                "not avoidable: the spec sets resizePolicy, which kubelet 1.26 dropped and 1.27 applies"
            ]
        );
        assert_eq!(o.verdict, Verdict::WillRestart);
        // Spew epoch: SubPathExpr is printed (empty) by 1.14 for every volume mount.
        let c = json!({"name":"a","volumeMounts":[{"name":"v","mountPath":"/v"}]});
        let o = assess(&c, v("1.13"), v("1.14"), "");
        assert_eq!(o.impact, Impact::Restart);
        assert_eq!(
            o.reasons,
            ["VolumeMounts[].SubPathExpr (string): hashed by 1.14, not by 1.13"]
        );
        // A new field left empty is printed, not set: the restart is avoidable.
        assert_eq!(o.verdict, Verdict::Rewrite);
    }

    #[test]
    fn kept_within_an_epoch_when_nothing_new_is_hashed() {
        let c = json!({"name":"a","image":"b"});
        assert_eq!(assess(&c, v("1.31"), v("1.36"), "").impact, Impact::Kept);
        assert_eq!(assess(&c, v("1.16"), v("1.17"), "").impact, Impact::Kept);
    }

    #[test]
    fn bad_specs_are_errors_not_guesses() {
        let c = json!({"name":"a","tty":"yes"});
        let o = assess(&c, v("1.29"), v("1.30"), "p: a");
        assert_eq!(o.impact, Impact::Error);
        assert_eq!(
            o.error.as_deref(),
            Some("p: a.tty: expected bool, got string")
        );
    }

    #[test]
    fn details_spill_to_disk_and_read_back_in_order() {
        let mut s = Scanner::new(v("1.31"));
        let mut d = Details::with_spill_after(3);
        for i in 0..10 {
            let pod = json!({"metadata":{"name":format!("p{i}"),"namespace":"n"},
                "spec":{"nodeName":"a","containers":[{"name":"c","image":"i"}]}});
            for c in s.assess_pod(
                crate::source::pods::pod_containers(pod).unwrap(),
                Ok(v("1.30")),
            ) {
                d.push(c).unwrap();
            }
        }
        d.finish().unwrap();
        assert!(d.spilled());
        let pods: Vec<String> = d.iter().map(|c| c.unwrap().pod).collect();
        assert_eq!(pods, (0..10).map(|i| format!("p{i}")).collect::<Vec<_>>());
        // Serialising reads the spilled part again.
        let j = serde_json::to_value(&d).unwrap();
        assert_eq!(j.as_array().unwrap().len(), 10);
        assert_eq!(j[9]["impact"], "restart");
    }

    #[test]
    fn one_thread_and_many_make_the_same_report() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/pods.json");
        let nodes = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/nodes.json");
        let nodes = NodeVersions::from_path(nodes.as_ref()).unwrap();
        // Per-node versions also tally each node's admission and eviction checks.
        let scan = |(threads, per_node): (Threads, bool)| {
            let from = match per_node {
                true => FromVersions::PerNode(nodes.clone()),
                false => FromVersions::Fixed(v("1.29")),
            };
            let mut setup = ScanSetup::new(v("1.31"), from, Manifests::none());
            setup.threads = threads;
            let r = scan_input(setup, |_| {}, "pods".into(), &Input::Path(path.as_ref())).unwrap();
            serde_json::to_string(&r).unwrap()
        };
        for per_node in [false, true] {
            let one = scan((Threads::One, per_node));
            assert!(one.contains("\"restart\""), "{one}");
            assert_eq!(one.contains("\"admission\""), per_node, "{one}");
            for workers in [1, 2, 3] {
                let many = scan((Threads::Workers(workers), per_node));
                assert_eq!(one, many, "{workers} workers");
            }
        }
    }

    #[test]
    fn identical_specs_are_assessed_once() {
        let mut s = Scanner::new(v("1.31"));
        let c = json!({"name":"a","image":"b"});
        let first = s.assess(&c, v("1.30"), "x");
        let second = s.assess(&c, v("1.30"), "y");
        assert_eq!(first, second);
        assert_eq!(s.cache_hits, 1);
    }
}
