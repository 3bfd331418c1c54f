//! The persistent volume behind a pod's claim, found as the kubelet's volume manager finds it
//! (`desired_state_of_world_populator.go`: `getPVCExtractPV`, then `getPVSpec`): the claim must be
//! `Bound`, not being deleted, and name its volume in `spec.volumeName`, and that volume's
//! `spec.claimRef.uid` must be the claim's UID. Only volumes with a source asked about are kept (a cluster may have many),
//! and of claims only their binding.
//!
//! ```
//! use kubehash::source::claims::Claims;
//! use serde_json::json;
//!
//! let mut claims = Claims::new(&["rbd", "cephfs"]);
//! claims.add_volume(&json!({"metadata": {"name": "pv-1"},
//!     "spec": {"rbd": {"image": "i"}, "claimRef": {"uid": "u-1"}}}));
//! claims.add_claim(&json!({"metadata": {"namespace": "db", "name": "data", "uid": "u-1"},
//!     "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}}));
//! let bound = claims.bound("db", "data", None).unwrap();
//! assert_eq!((bound.volume.as_str(), bound.source), ("pv-1", "rbd"));
//! ```

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::source::input::count_placed_objects;

/// Bound claims and the volumes behind them, for the volume sources asked about.
#[derive(Debug, Clone, Default)]
pub struct Claims {
    /// The volume source fields (`rbd`, `cephfs`, …) whose volumes are kept.
    sources: Vec<&'static str>,
    /// Volume name → (its source field, `spec.claimRef.uid`).
    volumes: HashMap<String, (&'static str, String)>,
    /// (namespace, claim name) → the claim's binding.
    claims: HashMap<(String, String), Binding>,
    /// Every volume has been added: a claim bound to any other is not kept.
    volumes_complete: bool,
}

#[derive(Debug, Clone)]
struct Binding {
    uid: String,
    volume: String,
    /// The UID of the claim's controller (an ephemeral volume's claim is its pod's).
    controller: Option<String>,
}

/// A claim's volume, as the kubelet would mount it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The PersistentVolume's name.
    pub volume: String,
    /// Its source field (one of those asked about).
    pub source: &'static str,
}

impl Claims {
    /// Keeps the volumes whose spec sets one of `sources`.
    pub fn new(sources: &[&'static str]) -> Self {
        Claims {
            sources: sources.to_vec(),
            ..Claims::default()
        }
    }

    /// A PersistentVolume object; kept only when its spec sets a source asked about (a field
    /// set to `null` is no field).
    pub fn add_volume(&mut self, pv: &Value) {
        let Some(name) = pv.pointer("/metadata/name").and_then(Value::as_str) else {
            return;
        };
        let spec = pv.get("spec");
        let set = |f: &&str| spec.and_then(|s| s.get(*f)).is_some_and(|v| !v.is_null());
        let Some(source) = self.sources.iter().copied().find(set) else {
            return;
        };
        let claim_uid = text(pv, "/spec/claimRef/uid");
        self.volumes.insert(name.to_string(), (source, claim_uid));
    }

    /// Says every volume has been added (a cluster's, listed before its claims): from now on a
    /// claim is kept only when bound to one of those kept, so that a cluster's many claims cost
    /// nothing.
    pub fn volumes_complete(&mut self) {
        self.volumes_complete = true;
    }

    /// A PersistentVolumeClaim object; kept when it is bound to a volume (by name: the volume
    /// may come later, unless [`Claims::volumes_complete`] said otherwise). A claim being deleted is not: no kubelet mounts it ("PVC is being
    /// deleted").
    pub fn add_claim(&mut self, pvc: &Value) {
        let volume = text(pvc, "/spec/volumeName");
        let deleted = pvc
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        if volume.is_empty() || text(pvc, "/status/phase") != "Bound" || deleted {
            return;
        }
        if self.volumes_complete && !self.volumes.contains_key(&volume) {
            return;
        }
        let controller = pvc
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
            .map(|o| text(o, "/uid"));
        let key = (
            text(pvc, "/metadata/namespace"),
            text(pvc, "/metadata/name"),
        );
        let binding = Binding {
            uid: text(pvc, "/metadata/uid"),
            volume,
            controller,
        };
        self.claims.insert(key, binding);
    }

    /// The volume a claim mounts, when it has a source asked about.
    pub fn bound_to(&self, claim: &ClaimRef) -> Option<Bound> {
        self.bound(&claim.namespace, &claim.name, claim.controller.as_deref())
    }

    /// The volume claim `name` in `namespace` mounts, when it has a source asked about. With
    /// `controller`, the claim must be controlled by that UID (`ephemeral.VolumeIsForPod`).
    pub fn bound(&self, namespace: &str, name: &str, controller: Option<&str>) -> Option<Bound> {
        let b = self
            .claims
            .get(&(namespace.to_string(), name.to_string()))?;
        if controller.is_some_and(|c| b.controller.as_deref() != Some(c)) {
            return None;
        }
        let (source, claim_uid) = self.volumes.get(&b.volume)?;
        // getPVSpec: "the PV's claimRef … does not match the claim" unless the UIDs are equal.
        (*claim_uid == b.uid).then(|| Bound {
            volume: b.volume.clone(),
            source,
        })
    }

    /// The PersistentVolumes and PersistentVolumeClaims of a file, a directory of them or `-`
    /// (`kubectl get pv,pvc -A -o json`: a List, or the objects one after the other). Any other
    /// object is refused, with where it is: a pods file given here by mistake would otherwise
    /// pass the check unread.
    pub fn from_path(path: &Path, sources: &[&'static str]) -> Result<Claims> {
        let mut claims = Claims::new(sources);
        let mut other = None;
        // A cluster without any is an empty List, as kubectl writes it.
        count_placed_objects(path, |source, n, object| {
            match object.get("kind").and_then(Value::as_str) {
                Some("PersistentVolume") => claims.add_volume(&object),
                Some("PersistentVolumeClaim") => claims.add_claim(&object),
                kind if other.is_none() => {
                    let kind =
                        kind.map_or("an object without a kind".to_string(), |k| format!("a {k}"));
                    other = Some(format!(
                        "object {n} of {source} is {kind}, not a PersistentVolume or PersistentVolumeClaim"
                    ));
                }
                _ => {}
            }
        })?;
        match other {
            Some(reason) => Err(Error::Input {
                source_name: format!("--claims {}", path.display()),
                reason,
            }),
            None => Ok(claims),
        }
    }

    /// How many volumes with a source asked about were kept.
    #[cfg(test)]
    fn volumes(&self) -> usize {
        self.volumes.len()
    }

    /// How many bound claims were kept.
    #[cfg(test)]
    fn claims(&self) -> usize {
        self.claims.len()
    }
}

/// A claim a pod's volume mounts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    /// For an ephemeral volume's claim: the UID that must control it (the pod's).
    pub controller: Option<String>,
}

/// The claim volume `vol` of `pod` mounts: `persistentVolumeClaim.claimName`, or for an
/// `ephemeral` volume the claim `<pod>-<volume>` its pod controls (`ephemeral.VolumeClaimName`,
/// `VolumeIsForPod`); in the pod's namespace. `None` for any other volume.
pub fn claim_of(pod: &Value, vol: &Value) -> Option<ClaimRef> {
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    if let Some(name) = vol
        .pointer("/persistentVolumeClaim/claimName")
        .and_then(Value::as_str)
    {
        return Some(ClaimRef {
            namespace,
            name: name.to_string(),
            controller: None,
        });
    }
    if vol.get("ephemeral").is_some_and(|e| !e.is_null()) {
        let name = format!("{}-{}", text(pod, "/metadata/name"), vol["name"].as_str()?);
        return Some(ClaimRef {
            namespace,
            name,
            controller: Some(text(pod, "/metadata/uid")),
        });
    }
    None
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(name: &str, source: &str, claim_uid: &str) -> Value {
        json!({"metadata": {"name": name},
               "spec": {source: {"x": 1}, "claimRef": {"uid": claim_uid}}})
    }

    fn pvc(ns: &str, name: &str, uid: &str, volume: &str, phase: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "uid": uid},
               "spec": {"volumeName": volume}, "status": {"phase": phase}})
    }

    #[test]
    fn a_claim_mounts_the_volume_that_names_it_back() {
        let mut c = Claims::new(&["rbd"]);
        // Claims may come before their volumes.
        c.add_claim(&pvc("a", "data", "u1", "pv1", "Bound"));
        c.add_claim(&pvc("a", "other", "u2", "pv1", "Bound"));
        c.add_claim(&pvc("a", "pending", "u3", "pv3", "Pending"));
        c.add_claim(&pvc("a", "unnamed", "u4", "", "Bound"));
        let mut deleted = pvc("a", "deleted", "u6", "pv6", "Bound");
        deleted["metadata"]["deletionTimestamp"] = json!("2026-12-07T00:00:00Z");
        c.add_claim(&deleted);
        c.add_volume(&pv("pv1", "rbd", "u1"));
        c.add_volume(&pv("pv3", "rbd", "u3"));
        c.add_volume(&pv("pv6", "rbd", "u6"));
        c.add_volume(&pv("csi", "csi", "u5"));
        c.add_volume(&json!({"metadata": {"name": "nulled"}, "spec": {"rbd": null}}));
        assert_eq!(c.volumes(), 3);
        let want = Some(Bound {
            volume: "pv1".into(),
            source: "rbd",
        });
        assert_eq!(c.bound("a", "data", None), want);
        // Not in another namespace; not for a claim the volume's claimRef does not name; not
        // for a claim that is not bound.
        assert_eq!(c.bound("b", "data", None), None);
        assert_eq!(c.bound("a", "other", None), None);
        assert_eq!(c.bound("a", "pending", None), None);
        assert_eq!(c.bound("a", "unnamed", None), None);
        assert_eq!(c.bound("a", "deleted", None), None);
    }

    #[test]
    fn once_the_volumes_are_in_only_claims_bound_to_them_are_kept() {
        let mut c = Claims::new(&["rbd"]);
        c.add_volume(&pv("pv1", "rbd", "u1"));
        c.add_volume(&pv("pv2", "csi", "u2"));
        c.volumes_complete();
        c.add_claim(&pvc("a", "data", "u1", "pv1", "Bound"));
        c.add_claim(&pvc("a", "fast", "u2", "pv2", "Bound"));
        assert_eq!(c.claims(), 1);
        assert!(c.bound("a", "data", None).is_some());
    }

    #[test]
    fn which_claim_a_volume_mounts() {
        let pod = json!({"metadata": {"namespace": "a", "name": "web-0", "uid": "p"}});
        let pvc = json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}});
        let eph = json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}});
        let claim = |ns: &str, name: &str, controller: Option<&str>| ClaimRef {
            namespace: ns.into(),
            name: name.into(),
            controller: controller.map(str::to_string),
        };
        assert_eq!(claim_of(&pod, &pvc), Some(claim("a", "data-web-0", None)));
        assert_eq!(
            claim_of(&pod, &eph),
            Some(claim("a", "web-0-scratch", Some("p")))
        );
        let nulled = json!({"name": "scratch", "ephemeral": null, "emptyDir": {}});
        assert_eq!(claim_of(&pod, &nulled), None);
        // The API server defaults a pod's namespace.
        let bare = json!({"metadata": {"name": "web-0"}});
        assert_eq!(claim_of(&bare, &pvc).unwrap().namespace, "default");
    }

    #[test]
    fn an_ephemeral_claim_is_its_pods_only() {
        let mut c = Claims::new(&["cephfs"]);
        let mut claim = pvc("a", "web-0-scratch", "u1", "pv1", "Bound");
        claim["metadata"]["ownerReferences"] =
            json!([{"uid": "other", "controller": false}, {"uid": "pod-uid", "controller": true}]);
        c.add_claim(&claim);
        c.add_volume(&pv("pv1", "cephfs", "u1"));
        assert!(c.bound("a", "web-0-scratch", Some("pod-uid")).is_some());
        assert_eq!(c.bound("a", "web-0-scratch", Some("other")), None);
        assert!(c.bound("a", "web-0-scratch", None).is_some());
    }
}
