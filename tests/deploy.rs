//! Schema check of `deploy/` (what `kubectl apply -k deploy/` would apply), without a cluster:
//! every object of every resource in the kustomization is read into its typed k8s-openapi struct
//! and written back; any field the schema does not know, or a value of the wrong type, makes the
//! round trip differ or fail. Then the objects are checked against each other and for least
//! privilege.

use std::path::Path;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
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
    let namespace = kust["namespace"].as_str().unwrap();
    let mut daemonsets = Vec::new();
    let mut accounts = Vec::new();
    let mut roles = Vec::new();
    let mut bindings = Vec::new();
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
            if verb == "create" {
                assert_eq!(rule.resources.as_deref(), Some(&["events".to_string()][..]));
            }
        }
    }
    // Runs everywhere; has the node name; requests resources; no host PID.
    assert!(pod
        .tolerations
        .as_ref()
        .unwrap()
        .iter()
        .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()));
    assert_ne!(pod.host_pid, Some(true));
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
