//! The API objects a static pod may not reference: `pkg/api/pod/util.go` `HasAPIObjectReference`,
//! which `pkg/kubelet/config/common.go` `tryDecodeSinglePod` applies to every manifest once
//! `PreventStaticPodAPIReferences` is on (1.34 +). A manifest it refuses is not read: its pod is
//! no longer one the kubelet runs, and a running one is killed.
//!
//! Read from the manifest's v1 JSON as the kubelet decodes it: `serviceAccount` is the old name of
//! `serviceAccountName` (the v1 → internal conversion), a `null` field is no field, and a volume
//! with no source the kubelet knows is an `emptyDir` (v1 `SetDefaults_Volume`).

use serde_json::Value;

/// The feature gate that turns the refusal on (beta, on by default, from 1.34).
pub const GATE: &str = "PreventStaticPodAPIReferences";

/// The volume sources that need no API object (`HasAPIObjectReference`'s `continue` case).
const LOCAL_VOLUMES: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "cephfs",
    "cinder",
    "downwardAPI",
    "emptyDir",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "hostPath",
    "image",
    "iscsi",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

/// The volume sources that do, and what they reference (in `HasAPIObjectReference`'s order).
const API_VOLUMES: &[(&str, &str)] = &[
    ("configMap", "configmaps (via configmap volumes)"),
    ("secret", "secrets (via secret volumes)"),
    ("csi", "csidrivers (via CSI volumes)"),
    ("glusterfs", "endpoints (via glusterFS volumes)"),
    ("persistentVolumeClaim", "persistentvolumeclaims"),
    (
        "ephemeral",
        "persistentvolumeclaims (via ephemeral volumes)",
    ),
    ("azureFile", "secrets (via azureFile volumes)"),
];

/// Projected sources that do (`downwardAPI` is the one that does not).
const API_PROJECTIONS: &[(&str, &str)] = &[
    ("configMap", "configmaps (via projected volumes)"),
    ("secret", "secrets (via projected volumes)"),
    (
        "serviceAccountToken",
        "serviceaccounts (via projected volumes)",
    ),
    ("clusterTrustBundle", "clustertrustbundles"),
    ("podCertificate", "podcertificates"),
];

/// Where a secret's name sits in the volume sources `VisitPodSecretNames` visits, beside a
/// `secret` volume's and a projected one's.
const SECRET_REF_VOLUMES: &[&str] = &[
    "cephfs",
    "cinder",
    "flexVolume",
    "rbd",
    "scaleIO",
    "iscsi",
    "storageos",
];

/// What API object `pod` (a manifest's v1 JSON) references, as `HasAPIObjectReference` names it
/// (`serviceaccounts`, `secrets`, `configmaps (via projected volumes)`, …): `Ok(None)` when none.
/// `Err` where it refuses a volume it does not know (a projected source of no known kind).
pub fn api_object_reference(pod: &Value) -> Result<Option<&'static str>, String> {
    let spec = |k: &str| {
        pod.get("spec")
            .and_then(|s| s.get(k))
            .filter(|v| !v.is_null())
    };
    let named = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    if named(spec("serviceAccountName")) || named(spec("serviceAccount")) {
        return Ok(Some("serviceaccounts"));
    }
    let containers: Vec<&Value> = ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(spec)
        .filter_map(Value::as_array)
        .flatten()
        .collect();
    let volumes: Vec<&Value> = spec("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    // VisitPodSecretNames and VisitPodConfigmapNames skip empty names.
    let name_at = |v: &Value, path: &str| named(v.pointer(path));
    let in_containers = |env_from: &str, key_ref: &str| {
        containers.iter().any(|c| {
            let list = |k: &str| c.get(k).and_then(Value::as_array).into_iter().flatten();
            list("envFrom").any(|e| name_at(e, &format!("/{env_from}/name")))
                || list("env").any(|e| name_at(e, &format!("/valueFrom/{key_ref}/name")))
        })
    };
    let pull_secrets = spec("imagePullSecrets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|s| name_at(s, "/name"));
    let secret_in_volumes = volumes.iter().any(|v| {
        name_at(v, "/secret/secretName")
            || name_at(v, "/azureFile/secretName")
            || name_at(v, "/csi/nodePublishSecretRef/name")
            || SECRET_REF_VOLUMES
                .iter()
                .any(|k| name_at(v, &format!("/{k}/secretRef/name")))
            || sources(v).any(|s| name_at(s, "/secret/name"))
    });
    if pull_secrets || in_containers("secretRef", "secretKeyRef") || secret_in_volumes {
        return Ok(Some("secrets"));
    }
    let config_map_in_volumes = volumes.iter().any(|v| {
        name_at(v, "/configMap/name") || sources(v).any(|s| name_at(s, "/configMap/name"))
    });
    if in_containers("configMapRef", "configMapKeyRef") || config_map_in_volumes {
        return Ok(Some("configmaps"));
    }
    if spec("resourceClaims")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
    {
        return Ok(Some("resourceclaims"));
    }
    let set = |v: &Value, k: &str| v.get(k).is_some_and(|x| !x.is_null());
    for v in volumes {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        if LOCAL_VOLUMES.iter().any(|k| set(v, k)) {
            continue;
        }
        if let Some((_, what)) = API_VOLUMES.iter().find(|(k, _)| set(v, k)) {
            return Ok(Some(what));
        }
        if !set(v, "projected") {
            // No source the kubelet knows: SetDefaults_Volume makes it an emptyDir.
            continue;
        }
        for s in sources(v) {
            if let Some((_, what)) = API_PROJECTIONS.iter().find(|(k, _)| set(s, k)) {
                return Ok(Some(what));
            }
            if !set(s, "downwardAPI") {
                return Err(format!("unknown source for projected volume {name:?}"));
            }
        }
    }
    Ok(None)
}

/// The sources of volume `v`'s projection (none when it is not projected).
fn sources(v: &Value) -> impl Iterator<Item = &Value> {
    v.pointer("/projected/sources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refs(spec: Value) -> Result<Option<&'static str>, String> {
        api_object_reference(&json!({ "metadata": {"name": "p"}, "spec": spec }))
    }

    fn with_container(c: Value) -> Value {
        json!({"containers": [c]})
    }

    #[test]
    fn what_a_static_pod_may_not_reference() {
        let c = json!({"name": "c", "image": "i"});
        assert_eq!(refs(with_container(c.clone())), Ok(None));
        // A service account, by either name; the first thing HasAPIObjectReference asks.
        let mut s = with_container(c.clone());
        s["serviceAccountName"] = json!("default");
        s["volumes"] = json!([{"name": "v", "configMap": {"name": "x"}}]);
        assert_eq!(refs(s), Ok(Some("serviceaccounts")));
        let mut s = with_container(c.clone());
        s["serviceAccount"] = json!("old");
        assert_eq!(refs(s), Ok(Some("serviceaccounts")));
        let mut s = with_container(c.clone());
        s["serviceAccountName"] = json!("");
        s["serviceAccount"] = Value::Null;
        assert_eq!(refs(s), Ok(None));
        // Secrets: pull secrets, the environment of any container, volumes' secret refs.
        let mut s = with_container(c.clone());
        s["imagePullSecrets"] = json!([{"name": "regcred"}]);
        assert_eq!(refs(s), Ok(Some("secrets")));
        for env in [
            json!({"envFrom": [{"secretRef": {"name": "s"}}]}),
            json!({"env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}),
        ] {
            let mut init = env.clone();
            init["name"] = json!("init");
            let s = json!({"initContainers": [init], "containers": [c.clone()]});
            assert_eq!(refs(s), Ok(Some("secrets")), "{env}");
        }
        let s = json!({"containers": [c.clone()], "volumes": [{"name": "v", "cephfs": {"monitors": ["m"], "secretRef": {"name": "ceph"}}}]});
        assert_eq!(refs(s), Ok(Some("secrets")));
        let s = json!({"containers": [c.clone()], "volumes": [{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}]});
        assert_eq!(refs(s), Ok(Some("secrets")));
        // Empty names are skipped by the visitors, not by the volume switch.
        let s = json!({"containers": [c.clone()], "imagePullSecrets": [{"name": ""}], "volumes": [{"name": "v", "secret": {"secretName": ""}}]});
        assert_eq!(refs(s), Ok(Some("secrets (via secret volumes)")));
        let s = json!({"containers": [c.clone()], "imagePullSecrets": [{"name": ""}]});
        assert_eq!(refs(s), Ok(None));
        // Config maps.
        let s = with_container(
            json!({"name": "c", "image": "i", "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}]}),
        );
        assert_eq!(refs(s), Ok(Some("configmaps")));
        let s = json!({"containers": [c.clone()], "volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "m"}}]}}]});
        assert_eq!(refs(s), Ok(Some("configmaps")));
        // Resource claims, then the volume kinds in order.
        let s = json!({"containers": [c.clone()], "resourceClaims": [{"name": "gpu"}]});
        assert_eq!(refs(s), Ok(Some("resourceclaims")));
        for (volume, said) in [
            (
                json!({"persistentVolumeClaim": {"claimName": "data"}}),
                "persistentvolumeclaims",
            ),
            (
                json!({"ephemeral": {"volumeClaimTemplate": {}}}),
                "persistentvolumeclaims (via ephemeral volumes)",
            ),
            (
                json!({"csi": {"driver": "secrets-store.csi.k8s.io"}}),
                "csidrivers (via CSI volumes)",
            ),
            (
                json!({"glusterfs": {"endpoints": "e", "path": "p"}}),
                "endpoints (via glusterFS volumes)",
            ),
            (
                json!({"projected": {"sources": [{"downwardAPI": {}}, {"serviceAccountToken": {"path": "t"}}]}}),
                "serviceaccounts (via projected volumes)",
            ),
            (
                json!({"projected": {"sources": [{"clusterTrustBundle": {"path": "b"}}]}}),
                "clustertrustbundles",
            ),
        ] {
            let mut v = volume.clone();
            v["name"] = json!("v");
            let s = json!({"containers": [c.clone()], "volumes": [v]});
            assert_eq!(refs(s), Ok(Some(said)), "{volume}");
        }
        // What kubeadm's control plane manifests use is local.
        let s = json!({"containers": [c.clone()], "volumes": [
            {"name": "certs", "hostPath": {"path": "/etc/kubernetes/pki", "type": "DirectoryOrCreate"}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "info", "projected": {"sources": [{"downwardAPI": {"items": []}}]}},
            {"name": "bare"},
            {"name": "future", "someNewSource": {}},
            {"name": "nulled", "secret": null, "hostPath": {"path": "/x"}},
        ]});
        assert_eq!(refs(s), Ok(None));
        // A projected source of no kind the kubelet knows is refused.
        let s = json!({"containers": [c], "volumes": [{"name": "v", "projected": {"sources": [{"somethingNew": {}}]}}]});
        assert_eq!(
            refs(s),
            Err("unknown source for projected volume \"v\"".into())
        );
    }
}
