//! The `volumes` check: a pod with a volume the new kubelet cannot mount. It cannot start again
//! on this node (FailedMount), and the kubelet syncs a pod only once all its volumes are mounted
//! (`SyncPod` → `WaitForAttachAndMount`: "Unable to attach or mount volumes … skipping pod"), so
//! while one waits its containers are not restarted.

use serde_json::Value;

use crate::kubelet::facts::{fact, FactId, LOCKED_FEATURE_GATES, REMOVED_VOLUME_PLUGINS};
use crate::kubelet::version::KubeletVersion;
use crate::source::kubelet_args::feature_gate;
use crate::source::pods::torn_down;

use super::{check, pod_name, Check, Facts, Status};

/// The gate that keeps the `gitRepo` plugin on from 1.33 until it is locked off (1.36).
const GIT_REPO_GATE: &str = "GitRepoVolumeDriver";

/// Pods on this node with an inline volume kubelet `to` cannot mount and kubelet `from` could
/// (with `from` unknown, every such volume): a removed in-tree plugin, or `gitRepo` with its
/// plugin off. Persistent volumes behind claims are not read.
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
    let mut tally = Volumes::default();
    for p in pods {
        tally.count(Volumes::judge(p, f.from, to, gate));
    }
    tally.check(to)
}

const VOLUMES: (&str, &str) = (
    "volumes",
    "a pod whose volume the new kubelet cannot mount cannot start again here (FailedMount), and is not synced while a volume waits (\"Unable to attach or mount volumes\"): its containers are not restarted",
);

/// The volumes check, one pod at a time (a cluster-wide scan streams pods).
#[derive(Debug, Clone, Default)]
pub struct Volumes {
    pods: usize,
    lost: Vec<String>,
}

impl Volumes {
    /// What upgrading kubelet `from` (when known) to `to` does to `pod`'s inline volumes, on its
    /// own: each one `to` cannot mount and `from` could, said with the pod's name. `gate` is
    /// `GitRepoVolumeDriver` as the kubelet is told it (`None`: not set, its default). `None`
    /// for a pod the kubelet tears down ([`torn_down`]: it mounts nothing more for it); a pending
    /// pod, which needs its volumes to start at all, is judged.
    pub fn judge(
        pod: &Value,
        from: Option<KubeletVersion>,
        to: KubeletVersion,
        gate: Option<bool>,
    ) -> Option<Vec<String>> {
        if torn_down(pod).is_some() {
            return None;
        }
        let vols = pod.pointer("/spec/volumes").and_then(Value::as_array);
        let lost = vols
            .into_iter()
            .flatten()
            .filter(|v| from.is_none_or(|from| unmountable(v, from, gate).is_none()))
            .filter_map(|v| {
                let plugin = unmountable(v, to, gate)?;
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
            "{} {} read (inline volumes; persistent volumes behind claims are not), none with a volume kubelet {to} cannot mount",
            self.pods,
            if self.pods == 1 { "pod" } else { "pods" }
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

/// Why kubelet `v` cannot mount volume `vol` (its plugin; `gate` as the kubelet is told
/// `GitRepoVolumeDriver`), or `None` when it can. A field set to `null` is no field.
fn unmountable(vol: &Value, v: KubeletVersion, gate: Option<bool>) -> Option<String> {
    let has = |field: &str| vol.get(field).is_some_and(|s| !s.is_null());
    if let Some(r) = REMOVED_VOLUME_PLUGINS
        .iter()
        .find(|r| has(r.field) && v.minor() >= r.since)
    {
        return Some(format!(
            "is {}, whose plugin no kubelet has from 1.{} (\"no volume plugin matched\")",
            r.field, r.since
        ));
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
}
