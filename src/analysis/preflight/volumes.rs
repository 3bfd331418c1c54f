//! The `volumes` check: a pod with a volume the new kubelet cannot mount, inline or behind a
//! claim. It cannot start again on this node (FailedMount), and the kubelet syncs a pod only once
//! all its volumes are mounted (`SyncPod` → `WaitForAttachAndMount`: "Unable to attach or mount
//! volumes … skipping pod"), so while one waits its containers are not restarted.

use serde_json::Value;

use crate::kubelet::facts::{fact, FactId, LOCKED_FEATURE_GATES, REMOVED_VOLUME_PLUGINS};
use crate::kubelet::version::KubeletVersion;
use crate::source::claims::{claim_of, Bound, Claims};
use crate::source::kubelet_args::feature_gate;
use crate::source::pods::torn_down;

use super::{check, pod_name, Check, Facts, Status};

/// The gate that keeps the `gitRepo` plugin on from 1.33 until it is locked off (1.36).
const GIT_REPO_GATE: &str = "GitRepoVolumeDriver";

/// Pods on this node with a volume kubelet `to` cannot mount and kubelet `from` could (with
/// `from` unknown, every such volume): a removed in-tree plugin, inline or behind a claim (when
/// the claims were read), or `gitRepo` with its plugin off.
pub(super) fn volumes(f: &Facts, to: KubeletVersion) -> Check {
    let Some(pods) = &f.pods else {
        let mut c = check(VOLUMES.0, VOLUMES.1);
        c.set(
            Status::Unknown,
            "no pods (give -i or --cluster)",
            "run with --cluster to check the pods' volumes",
        );
        return c;
    };
    let gate = feature_gate(
        &f.host.kubelet_flags,
        f.host.kubelet_config.as_ref(),
        GIT_REPO_GATE,
    );
    let mut tally = Volumes::new(f.claims.is_some());
    for p in pods {
        tally.count(Volumes::judge(p, f.from, to, gate, f.claims.as_ref()));
    }
    tally.check(to)
}

const VOLUMES: (&str, &str) = (
    "volumes",
    "a pod whose volume the new kubelet cannot mount cannot start again here (FailedMount), and is not synced while a volume waits (\"Unable to attach or mount volumes\"): its containers are not restarted",
);

/// The volume sources whose plugins kubelets lost: what the persistent volumes are read for.
pub fn removed_sources() -> Vec<&'static str> {
    REMOVED_VOLUME_PLUGINS.iter().map(|r| r.field).collect()
}

/// The volumes check, one pod at a time (a cluster-wide scan streams pods).
#[derive(Debug, Clone, Default)]
pub struct Volumes {
    pods: usize,
    lost: Vec<String>,
    /// Whether the persistent volumes behind claims were read.
    claims: bool,
}

impl Volumes {
    /// A check that says whether the persistent volumes behind claims were read (`claims`).
    pub fn new(claims: bool) -> Self {
        Volumes {
            claims,
            ..Volumes::default()
        }
    }

    /// What upgrading kubelet `from` (when known) to `to` does to `pod`'s volumes, on its own:
    /// each one `to` cannot mount and `from` could, said with the pod's name. Inline volumes are
    /// judged by their source; a claim's (`persistentVolumeClaim`, or an `ephemeral` volume's
    /// claim `<pod>-<volume>`) by its persistent volume's, when `claims` were read. `gate` is
    /// `GitRepoVolumeDriver` as the kubelet is told it (`None`: not set, its default). `None` for
    /// a pod the kubelet tears down ([`torn_down`]: it mounts nothing more for it); a pending
    /// pod, which needs its volumes to start at all, is judged.
    pub fn judge(
        pod: &Value,
        from: Option<KubeletVersion>,
        to: KubeletVersion,
        gate: Option<bool>,
        claims: Option<&Claims>,
    ) -> Option<Vec<String>> {
        if torn_down(pod).is_some() {
            return None;
        }
        let vols = pod.pointer("/spec/volumes").and_then(Value::as_array);
        let lost = vols
            .into_iter()
            .flatten()
            .filter_map(|v| {
                let source = Source::of(v, pod, claims);
                if from.is_some_and(|from| source.unmountable(from, gate).is_some()) {
                    return None;
                }
                let plugin = source.unmountable(to, gate)?;
                let name = v["name"].as_str().unwrap_or("");
                Some(format!("{}: volume {name:?} {plugin}", pod_name(pod)))
            })
            .collect();
        Some(lost)
    }

    /// Counts one pod judged by [`Volumes::judge`].
    pub fn count(&mut self, judged: Option<Vec<String>>) {
        let Some(lost) = judged else { return };
        self.pods += 1;
        self.lost.extend(lost);
    }

    /// The check's result for the pods counted, upgrading to kubelet `to`.
    pub fn check(&self, to: KubeletVersion) -> Check {
        let mut c = check(VOLUMES.0, VOLUMES.1);
        c.evidence = format!(
            "{} {} read ({}), none with a volume kubelet {to} cannot mount",
            self.pods,
            if self.pods == 1 { "pod" } else { "pods" },
            if self.claims {
                "inline volumes and the persistent volumes of bound claims"
            } else {
                "inline volumes; persistent volumes behind claims are not"
            },
        );
        if !self.lost.is_empty() {
            c.set(
                Status::Fail,
                self.lost.join("; "),
                "before the swap, move these volumes to their CSI drivers (gitRepo: an init container that clones into an emptyDir) and recreate the pods",
            );
        }
        c
    }
}

/// What a pod's volume mounts, as far as the plugins go.
enum Source<'a> {
    /// Its own source (a claim's whose volume was not read, or has no source asked about).
    Inline(&'a Value),
    /// A claim's persistent volume.
    Claim { claim: String, bound: Bound },
}

impl<'a> Source<'a> {
    fn of(vol: &'a Value, pod: &Value, claims: Option<&Claims>) -> Source<'a> {
        let bound = claims.and_then(|claims| {
            let claim = claim_of(pod, vol)?;
            let bound = claims.bound_to(&claim)?;
            Some((claim.name, bound))
        });
        match bound {
            Some((claim, bound)) => Source::Claim { claim, bound },
            None => Source::Inline(vol),
        }
    }

    /// Why kubelet `v` cannot mount it (`gate` as the kubelet is told `GitRepoVolumeDriver`), or
    /// `None` when it can.
    fn unmountable(&self, v: KubeletVersion, gate: Option<bool>) -> Option<String> {
        match self {
            Source::Inline(vol) => unmountable(vol, v, gate),
            Source::Claim { claim, bound } => removed(bound.source, v).map(|why| {
                format!(
                    "is claim {claim:?}, bound to persistent volume {:?} ({}), {why}",
                    bound.volume, bound.source
                )
            }),
        }
    }
}

/// Whether no kubelet `v` has the plugin of volume source `field`: why, or `None`.
fn removed(field: &str, v: KubeletVersion) -> Option<String> {
    let r = REMOVED_VOLUME_PLUGINS
        .iter()
        .find(|r| r.field == field && v.minor() >= r.since)?;
    Some(format!(
        "whose plugin no kubelet has from 1.{} (\"no volume plugin matched\")",
        r.since
    ))
}

/// Why kubelet `v` cannot mount inline volume `vol` (its plugin; `gate` as the kubelet is told
/// `GitRepoVolumeDriver`), or `None` when it can. A field set to `null` is no field.
fn unmountable(vol: &Value, v: KubeletVersion, gate: Option<bool>) -> Option<String> {
    let has = |field: &str| vol.get(field).is_some_and(|s| !s.is_null());
    if let Some(why) = REMOVED_VOLUME_PLUGINS
        .iter()
        .filter(|r| has(r.field))
        .find_map(|r| removed(r.field, v).map(|why| format!("is {}, {why}", r.field)))
    {
        return Some(why);
    }
    // Most volumes are not gitRepo: the gate's lock is looked up only for one that is (a
    // cluster-wide scan asks this for every volume of every pod, twice).
    if !has("gitRepo") {
        return None;
    }
    let git = fact(FactId::GitRepoVolumeOff);
    let locked = LOCKED_FEATURE_GATES
        .iter()
        .find(|l| l.name == GIT_REPO_GATE)
        .filter(|l| v.minor() >= l.since);
    let git_off = v.minor() >= git.since && (locked.is_some() || gate != Some(true));
    git_off.then(|| {
        let why = match locked {
            Some(l) => format!("locked false from 1.{}", l.since),
            None => format!("false by default from 1.{}", git.since),
        };
        format!(
            "is gitRepo, whose plugin kubelet {v} has off ({GIT_REPO_GATE} {why}; {})",
            git.source
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::{pod, v, Files};
    use serde_json::json;

    fn with_pods(f: &Files, pods: Vec<Value>, from: Option<&str>) -> Facts {
        let mut facts = f.facts();
        facts.pods = Some(pods);
        facts.from = from.map(v);
        facts
    }

    #[test]
    fn a_volume_the_new_kubelet_cannot_mount_fails_only_where_the_upgrade_crosses_it() {
        let f = Files::new();
        let gluster = pod(
            "g",
            json!({"containers": [{"name": "c", "image": "i"}],
                   "volumes": [{"name": "data", "glusterfs": {"endpoints": "e", "path": "p"}},
                               {"name": "tmp", "emptyDir": {}}]}),
        );
        let git = pod(
            "git",
            json!({"containers": [{"name": "c", "image": "i"}],
                   "volumes": [{"name": "src", "gitRepo": {"repository": "r"}}]}),
        );
        let check = |pods: Vec<Value>, from: Option<&str>, to: &str| {
            volumes(&with_pods(&f, pods, from), v(to))
        };
        // glusterfs: mounted by 1.25, gone in 1.26.
        let c = check(vec![gluster.clone()], Some("1.25"), "1.26");
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.evidence.starts_with(
                "ns/g: volume \"data\" is glusterfs, whose plugin no kubelet has from 1.26"
            ),
            "{c:?}"
        );
        assert_eq!(
            check(vec![gluster.clone()], Some("1.24"), "1.25").status,
            Status::Pass
        );
        // Already unmountable before the upgrade: the upgrade changes nothing for it.
        assert_eq!(
            check(vec![gluster.clone()], Some("1.26"), "1.30").status,
            Status::Pass
        );
        // From unknown: whatever the new kubelet cannot mount.
        assert_eq!(
            check(vec![gluster.clone()], None, "1.30").status,
            Status::Fail
        );
        // A null field is no field; a pod that has ended or is being deleted needs no volume.
        let nulled = pod(
            "n",
            json!({"volumes": [{"name": "data", "glusterfs": null, "emptyDir": {}}]}),
        );
        assert_eq!(check(vec![nulled], None, "1.30").status, Status::Pass);
        let mut done = gluster.clone();
        done["status"]["phase"] = json!("Succeeded");
        assert_eq!(check(vec![done], None, "1.30").status, Status::Pass);
        let mut deleting = gluster.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-12-07T19:00:00Z");
        assert_eq!(check(vec![deleting], None, "1.30").status, Status::Pass);
        // A pending pod needs its volumes to start at all.
        let mut pending = gluster;
        pending["status"]["phase"] = json!("Pending");
        assert_eq!(check(vec![pending], None, "1.30").status, Status::Fail);

        // gitRepo: off by default from 1.33, unless the kubelet is given the gate; locked off
        // from 1.36.
        let c = check(vec![git.clone()], Some("1.32"), "1.33");
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.evidence.contains("is gitRepo, whose plugin kubelet 1.33 has off (GitRepoVolumeDriver false by default from 1.33"), "{c:?}");
        assert_eq!(
            check(vec![git.clone()], Some("1.31"), "1.32").status,
            Status::Pass
        );
        f.put(
            "kubelet/config.yaml",
            "featureGates:\n  GitRepoVolumeDriver: true\n",
        );
        assert_eq!(
            check(vec![git.clone()], Some("1.32"), "1.35").status,
            Status::Pass
        );
        let c = check(vec![git.clone()], Some("1.35"), "1.36");
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.evidence.contains("locked false from 1.36"), "{c:?}");
        // The flag wins over the config.
        f.put(
            "kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--feature-gates=GitRepoVolumeDriver=false\"\n",
        );
        assert_eq!(
            check(vec![git.clone()], Some("1.32"), "1.34").status,
            Status::Fail
        );
        // Off already before the upgrade: nothing the swap changes.
        assert_eq!(check(vec![git], Some("1.34"), "1.35").status, Status::Pass);

        // No pods known: unknown.
        assert_eq!(volumes(&f.facts(), v("1.36")).status, Status::Unknown);
    }

    #[test]
    fn a_claims_persistent_volume_is_judged_by_its_source() {
        let f = Files::new();
        let mut claims = Claims::new(&removed_sources());
        let bound = |ns: &str, name: &str, uid: &str, pv: &str| {
            json!({"metadata": {"namespace": ns, "name": name, "uid": uid},
                   "spec": {"volumeName": pv}, "status": {"phase": "Bound"}})
        };
        claims.add_claim(&bound("ns", "data", "c1", "pv-rbd"));
        claims.add_claim(&bound("ns", "fast", "c2", "pv-csi"));
        let mut eph = bound("ns", "db-scratch", "c3", "pv-ceph");
        eph["metadata"]["ownerReferences"] = json!([{"uid": "db", "controller": true}]);
        claims.add_claim(&eph);
        claims.add_volume(&json!({"metadata": {"name": "pv-rbd"},
            "spec": {"rbd": {"image": "i"}, "claimRef": {"uid": "c1"}}}));
        claims.add_volume(&json!({"metadata": {"name": "pv-csi"},
            "spec": {"csi": {"driver": "rbd.csi.ceph.com"}, "claimRef": {"uid": "c2"}}}));
        claims.add_volume(&json!({"metadata": {"name": "pv-ceph"},
            "spec": {"cephfs": {"path": "/"}, "claimRef": {"uid": "c3"}}}));
        let db = pod(
            "db",
            json!({"volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "fast", "persistentVolumeClaim": {"claimName": "fast"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]}),
        );
        let run = |claims: Option<Claims>, from: &str, to: &str| {
            let mut facts = with_pods(&f, vec![db.clone()], Some(from));
            facts.claims = claims;
            volumes(&facts, v(to))
        };
        let c = run(Some(claims.clone()), "1.30", "1.31");
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert_eq!(
            c.evidence,
            "ns/db: volume \"data\" is claim \"data\", bound to persistent volume \"pv-rbd\" (rbd), \
             whose plugin no kubelet has from 1.31 (\"no volume plugin matched\"); \
             ns/db: volume \"scratch\" is claim \"db-scratch\", bound to persistent volume \"pv-ceph\" (cephfs), \
             whose plugin no kubelet has from 1.31 (\"no volume plugin matched\")"
        );
        // Before the plugins went, or already gone before the upgrade: nothing crosses.
        assert_eq!(
            run(Some(claims.clone()), "1.29", "1.30").status,
            Status::Pass
        );
        let c = run(Some(claims.clone()), "1.31", "1.32");
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence
                .contains("(inline volumes and the persistent volumes of bound claims)"),
            "{c:?}"
        );
        // Claims not read: the check says so, and passes what it cannot see.
        let c = run(None, "1.30", "1.31");
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence
                .contains("persistent volumes behind claims are not"),
            "{c:?}"
        );
        // An ephemeral claim another pod controls is not this pod's volume.
        let mut other = db.clone();
        other["metadata"]["uid"] = json!("someone-else");
        let mut facts = with_pods(&f, vec![other], Some("1.30"));
        facts.claims = Some(claims);
        let c = volumes(&facts, v("1.31"));
        assert!(!c.evidence.contains("scratch"), "{c:?}");
    }
}
