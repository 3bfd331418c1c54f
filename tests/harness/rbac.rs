//! The RBAC rules of `deploy/rbac.yaml`, enforced as kube-apiserver's RBAC authorizer does for
//! the agent's ServiceAccount: a request is allowed when a ClusterRole bound by a
//! ClusterRoleBinding, or a Role bound in the request's namespace by a RoleBinding, has a rule
//! whose API group, resource and verb match; anything else is 403. (No kube-apiserver runs on
//! these machines; the test API servers answer with recorded-shape responses and call this.)

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

const SERVICE_ACCOUNT: (&str, &str) = ("kube-system", "kubehash-agent");

/// One grant: (namespace or None for cluster-wide, API group, resource, verb).
pub type Grant = (Option<String>, String, String, String);

/// The grants deploy/rbac.yaml gives the agent's ServiceAccount.
pub fn agent_grants() -> BTreeSet<Grant> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    let mut out = BTreeSet::new();
    for binding in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let binds_agent = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["namespace"] == SERVICE_ACCOUNT.0
                    && s["name"] == SERVICE_ACCOUNT.1
            });
        if !binds_agent {
            continue;
        }
        let namespace = binding["metadata"]["namespace"]
            .as_str()
            .map(str::to_string);
        let role_ref = &binding["roleRef"];
        let role = docs.iter().find(|d| {
            d["kind"] == role_ref["kind"]
                && d["metadata"]["name"] == role_ref["name"]
                && (d["kind"] == "ClusterRole"
                    || d["metadata"]["namespace"].as_str() == namespace.as_deref())
        });
        let Some(role) = role else { continue };
        for rule in role["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            };
            for g in list("apiGroups") {
                for r in list("resources") {
                    for v in list("verbs") {
                        out.insert((namespace.clone(), g.clone(), r.clone(), v.clone()));
                    }
                }
            }
        }
    }
    out
}

/// What a request asks for, as the RBAC authorizer sees it: (namespace, group, resource, verb).
/// Core API paths only (`/api/v1/...`), which is all the agent uses.
pub fn attributes(method: &str, target: &str) -> Option<Grant> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = parts.strip_prefix(&["api", "v1"])?;
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(ns.to_string()), tail),
        _ => (None, rest),
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        _ => return None,
    };
    let watching = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, named, watching) {
        ("GET", _, true) => "watch",
        ("GET", true, false) => "get",
        ("GET", false, false) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => return None,
    };
    Some((namespace, String::new(), resource, verb.to_string()))
}

/// Whether `grants` allow a request with these attributes.
pub fn allowed(grants: &BTreeSet<Grant>, want: &Grant) -> bool {
    grants.iter().any(|(ns, g, r, v)| {
        (ns.is_none() || ns == &want.0)
            && (g == &want.1 || g == "*")
            && (r == &want.2 || r == "*")
            && (v == &want.3 || v == "*")
    })
}

/// kube-apiserver's answer to a request RBAC refuses.
pub fn forbidden(want: &Grant) -> String {
    let (ns, _, resource, verb) = want;
    let scope = match ns {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
        "message": format!("{resource} is forbidden: User \"system:serviceaccount:{}:{}\" cannot {verb} resource \"{resource}\" in API group \"\" {scope}", SERVICE_ACCOUNT.0, SERVICE_ACCOUNT.1),
        "reason":"Forbidden","code":403})
    .to_string()
}
