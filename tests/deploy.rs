//! Schema check of `deploy/` (what `kubectl apply -k deploy/` would apply), without a cluster:
//! every object of every resource in the kustomization is read into its typed k8s-openapi struct
//! and written back; any field the schema does not know, or a value of the wrong type, makes the
//! round trip differ or fail. Then the objects are checked against each other and for least
//! privilege, and the agent they deploy is held to the README's table of the Events it publishes.

mod harness;

use std::path::Path;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

fn deploy() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy"))
}

fn documents(file: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(deploy().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{file}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Reads `v` as `T` and checks that nothing was lost or changed on the way.
fn typed<T: DeserializeOwned + Serialize>(file: &str, v: &Value) -> T {
    let t: T = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{file}: {} does not fit its schema: {e}", v["kind"]));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        &back, v,
        "{file}: {} has fields its schema does not know (or misspelled)",
        v["kind"]
    );
    t
}

#[test]
fn kustomization_objects_fit_their_schemas_and_each_other() {
    let kust = documents("kustomization.yaml").remove(0);
    assert_eq!(kust["kind"], "Kustomization");
    // Every object names its namespace itself: a kustomization `namespace:` would move the
    // Events Role out of `default`, where the agent records Events.
    assert!(kust.get("namespace").is_none());
    let namespace = "kube-system";
    let mut daemonsets = Vec::new();
    let mut accounts = Vec::new();
    let mut roles = Vec::new();
    let mut bindings = Vec::new();
    let mut ns_roles = Vec::new();
    let mut ns_bindings = Vec::new();
    for file in kust["resources"].as_array().unwrap() {
        let file = file.as_str().unwrap();
        for doc in documents(file) {
            match (
                doc["apiVersion"].as_str().unwrap(),
                doc["kind"].as_str().unwrap(),
            ) {
                ("apps/v1", "DaemonSet") => daemonsets.push(typed::<DaemonSet>(file, &doc)),
                ("v1", "ServiceAccount") => accounts.push(typed::<ServiceAccount>(file, &doc)),
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                    roles.push(typed::<ClusterRole>(file, &doc))
                }
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    bindings.push(typed::<ClusterRoleBinding>(file, &doc))
                }
                ("rbac.authorization.k8s.io/v1", "Role") => {
                    ns_roles.push(typed::<Role>(file, &doc))
                }
                ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                    ns_bindings.push(typed::<RoleBinding>(file, &doc))
                }
                (a, k) => panic!("{file}: unexpected {a} {k}"),
            }
        }
    }
    assert_eq!(
        (
            daemonsets.len(),
            accounts.len(),
            roles.len(),
            bindings.len()
        ),
        (1, 1, 1, 1)
    );
    // Events: a Role in `default` (where Node events live), bound to the same account; nothing
    // else namespaced.
    assert_eq!((ns_roles.len(), ns_bindings.len()), (1, 1));
    assert_eq!(ns_roles[0].metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        ns_bindings[0].metadata.namespace.as_deref(),
        Some("default")
    );
    assert_eq!(
        ns_bindings[0].role_ref.name,
        ns_roles[0].metadata.name.clone().unwrap()
    );
    let events_rule = &ns_roles[0].rules.as_ref().unwrap()[..];
    assert_eq!(events_rule.len(), 1);
    assert_eq!(
        events_rule[0].resources.as_deref(),
        Some(&["events".to_string()][..])
    );
    assert_eq!(events_rule[0].verbs, ["create"]);
    let ds = &daemonsets[0];
    let spec = &ds.spec;
    let pod = spec.template.spec.as_ref().unwrap();
    // The selector selects the template.
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    for (k, v) in spec.selector.match_labels.as_ref().unwrap() {
        assert_eq!(labels.get(k), Some(v));
    }
    // The pod runs as the account the binding grants.
    let sa = &accounts[0];
    assert_eq!(
        pod.service_account_name.as_deref(),
        sa.metadata.name.as_deref()
    );
    assert_eq!(sa.metadata.namespace.as_deref(), Some(namespace));
    let subject = &bindings[0].subjects.as_ref().unwrap()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            Some(subject.name.as_str()),
            subject.namespace.as_deref()
        ),
        (
            "ServiceAccount",
            sa.metadata.name.as_deref(),
            Some(namespace)
        )
    );
    assert_eq!(
        bindings[0].role_ref.name,
        roles[0].metadata.name.clone().unwrap()
    );
    // Least privilege: read nodes, list pods, create events; nothing that changes objects.
    for rule in roles[0].rules.as_ref().unwrap() {
        for verb in &rule.verbs {
            assert!(
                ["get", "list", "watch", "create"].contains(&verb.as_str()),
                "verb {verb}"
            );
            assert_ne!(verb, "create", "no cluster-wide create");
        }
    }
    // The runtime's socket directory is mounted, not the socket file (containerd makes a new
    // socket when it restarts), and the flags' socket lies inside it.
    let mounts = pod.containers[0].volume_mounts.as_ref().unwrap();
    let run = mounts
        .iter()
        .find(|m| m.mount_path == "/run/containerd")
        .expect("/run/containerd mounted");
    let volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == run.name)
        .unwrap();
    let host = volume.host_path.as_ref().unwrap();
    assert_eq!(host.path, "/run/containerd");
    assert_eq!(host.type_.as_deref(), Some("Directory"));
    for arg in pod.containers[0].args.as_ref().unwrap() {
        if let Some(ep) = arg
            .strip_prefix("--cri=")
            .or(arg.strip_prefix("--containerd="))
        {
            assert!(ep.starts_with("unix:///run/containerd/"), "{arg}");
        }
    }
    // The host's PID namespace, to see the kubelet's process; its binary, read-only.
    assert_eq!(pod.host_pid, Some(true));
    let bin = mounts
        .iter()
        .find(|m| m.mount_path == "/host/usr/bin")
        .expect("the kubelet binary's directory");
    assert_eq!(bin.read_only, Some(true));
    // The static pod manifests, writable: apply pins static pods' UIDs.
    let manifests = mounts
        .iter()
        .find(|m| m.mount_path == "/host/etc/kubernetes/manifests")
        .expect("the manifests directory");
    assert_ne!(manifests.read_only, Some(true));
    assert!(pod.containers[0]
        .args
        .as_ref()
        .unwrap()
        .contains(&"--manifests=/host/etc/kubernetes/manifests".to_string()));
    assert!(pod.containers[0]
        .args
        .as_ref()
        .unwrap()
        .contains(&"--kubelet-binary=/host/usr/bin/kubelet".to_string()));
    // Runs everywhere; has the node name; requests resources.
    assert!(pod
        .tolerations
        .as_ref()
        .unwrap()
        .iter()
        .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()));
    let c = &pod.containers[0];
    assert!(c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .any(|e| e.name == "NODE_NAME"));
    assert!(c.resources.as_ref().unwrap().requests.is_some());
    let args = c.args.as_ref().unwrap();
    assert_eq!(args[0], "agent");
    // Every flag the manifest passes is one `kubehash agent` accepts.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(["agent", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for a in &args[1..] {
        let flag = a.split('=').next().unwrap();
        assert!(help.contains(flag), "kubehash agent does not take {flag}");
    }
}

#[test]
fn rbac_attributes_of_the_agents_requests() {
    let g = |ns: Option<&str>, r: &str, v: &str| {
        Some((
            ns.map(str::to_string),
            String::new(),
            r.to_string(),
            v.to_string(),
        ))
    };
    assert_eq!(
        harness::rbac::attributes("GET", "/api/v1/nodes/n1"),
        g(None, "nodes", "get")
    );
    assert_eq!(
        harness::rbac::attributes("GET", "/api/v1/nodes?fieldSelector=x&watch=true"),
        g(None, "nodes", "watch")
    );
    assert_eq!(
        harness::rbac::attributes("GET", "/api/v1/pods?limit=500"),
        g(None, "pods", "list")
    );
    assert_eq!(
        harness::rbac::attributes("POST", "/api/v1/namespaces/default/events"),
        g(Some("default"), "events", "create")
    );
    assert_eq!(
        harness::rbac::attributes("GET", "/api/v1/namespaces/db/persistentvolumeclaims/data"),
        g(Some("db"), "persistentvolumeclaims", "get")
    );
    assert_eq!(
        harness::rbac::attributes("GET", "/api/v1/persistentvolumes/pv-1"),
        g(None, "persistentvolumes", "get")
    );
    let grants = harness::rbac::agent_grants();
    // Claims and their volumes one by one, never a list of them.
    assert!(harness::rbac::allowed(
        &grants,
        &g(Some("db"), "persistentvolumeclaims", "get").unwrap()
    ));
    assert!(!harness::rbac::allowed(
        &grants,
        &g(None, "persistentvolumes", "list").unwrap()
    ));
    assert!(harness::rbac::allowed(
        &grants,
        &g(Some("default"), "events", "create").unwrap()
    ));
    assert!(!harness::rbac::allowed(
        &grants,
        &g(Some("kube-system"), "events", "create").unwrap()
    ));
    assert!(!harness::rbac::allowed(
        &grants,
        &g(None, "nodes", "patch").unwrap()
    ));
}

/// The image can run what the agent's `--restart-containerd` runs: `sh -c COMMAND`, and the
/// documented `nsenter … systemctl restart containerd` (a distroless image has neither).
#[test]
fn the_image_has_the_shell_and_nsenter_the_restart_command_needs() {
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/Dockerfile")).unwrap();
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    assert!(!last_stage.contains("distroless"), "{last_stage}");
    assert!(last_stage.starts_with("debian:"), "{last_stage}");
    assert!(
        last_stage.contains("util-linux"),
        "nsenter comes from util-linux"
    );
}

/// Every Event reason the agent publishes is in the README's table of them, and the table names
/// no reason the agent no longer publishes.
#[test]
fn every_agent_event_is_documented() {
    let root = env!("CARGO_MANIFEST_DIR");
    let code = std::fs::read_to_string(format!("{root}/src/agent/reconcile.rs")).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let reasons = |text: &str, open: &str, close: char| -> std::collections::BTreeSet<String> {
        text.match_indices(open)
            .filter_map(|(at, _)| {
                let rest = &text[at + open.len()..];
                let end = rest.find(close)?;
                let name = &rest[..end];
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric())
                    .then(|| format!("Kubehash{name}"))
            })
            .collect()
    };
    let published = reasons(&code, "\"Kubehash", '"');
    let documented = reasons(&readme, "| `Kubehash", '`');
    assert!(published.len() >= 15, "{published:?}");
    assert_eq!(published, documented);
}
