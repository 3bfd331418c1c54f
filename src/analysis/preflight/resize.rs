//! The `resize` check: a container whose resources differ from what was actuated, with
//! `resizePolicy: RestartContainer`, is restarted by a kubelet with in-place resize on.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::kubelet::facts::{fact, holds, FactId};
use crate::kubelet::quantity::parse_quantity_milli;
use crate::kubelet::version::KubeletVersion;
use crate::source::kubelet_args::feature_gate;

use super::{check, containers, pod_name, running, Check, Facts, Status};

/// In-place resize: a container whose resources differ from what was actuated, with
/// `resizePolicy: RestartContainer`, is restarted. The API server shows both sides: the spec, and
/// `status.containerStatuses[].resources` with the pod's `status.resize` / resize conditions.
pub(super) fn resize(f: &Facts, to: KubeletVersion) -> Check {
    let mut c = check(
        "resize",
        "a container whose spec resources differ from what the kubelet actuated is restarted when its resizePolicy says RestartContainer",
    );
    let Some(pods) = &f.pods else {
        c.status = Status::Unknown;
        c.evidence = "no pods (give -i or --cluster)".into();
        return c;
    };
    // The gate as the kubelet is told it (`--feature-gates` over the config), else its default.
    let on = feature_gate(
        &f.host.kubelet_flags,
        f.host.kubelet_config.as_ref(),
        "InPlacePodVerticalScaling",
    )
    .unwrap_or(holds(FactId::InPlaceResizeDefault, to));
    let (mut pending, mut unseen, mut watched) = (Vec::new(), Vec::new(), 0);
    for p in pods.iter().filter(|p| running(p)) {
        let resize_pending = p.pointer("/status/resize").is_some_and(|r| !r.is_null())
            || p.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        matches!(
                            c["type"].as_str(),
                            Some("PodResizePending" | "PodResizeInProgress")
                        ) && c["status"] == "True"
                    })
                });
        for ctr in containers(p, &["containers"]) {
            let restarts = ctr
                .get("resizePolicy")
                .and_then(Value::as_array)
                .is_some_and(|r| r.iter().any(|r| r["restartPolicy"] == "RestartContainer"));
            if !restarts {
                continue;
            }
            watched += 1;
            let name = format!("{}/{}", pod_name(p), ctr["name"].as_str().unwrap_or(""));
            let actuated = p
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .and_then(|s| s.iter().find(|s| s["name"] == ctr["name"]))
                .and_then(|s| s.get("resources"));
            match actuated {
                _ if resize_pending => pending.push(format!("{name} (a resize is pending)")),
                Some(a) if !same_resources(a, ctr.get("resources")) => {
                    pending.push(format!("{name} (spec resources differ from status)"))
                }
                Some(_) => {}
                None => unseen.push(name),
            }
        }
    }
    c.evidence = format!(
        "in-place resize {} for kubelet {to}; {watched} containers restart on a resize",
        if on { "on" } else { "off" }
    );
    if !on || watched == 0 {
        return c;
    }
    if !pending.is_empty() {
        c.status = Status::Fail;
        c.evidence = format!("{}: {}", c.evidence, pending.join(", "));
        c.action = format!(
            "let these resizes finish (or revert the spec) before the swap ({})",
            fact(FactId::InPlaceResizeDefault).source
        );
    } else if !unseen.is_empty() {
        c.status = Status::Unknown;
        c.evidence = format!(
            "{}; the API server reports no actuated resources for {}",
            c.evidence,
            unseen.join(", ")
        );
        c.action = "compare their spec resources with what runs before the swap".into();
    }
    c
}

/// Whether the actuated resources equal the spec's, quantity by quantity.
fn same_resources(actuated: &Value, spec: Option<&Value>) -> bool {
    let amounts = |v: Option<&Value>, side: &str| -> BTreeMap<String, Option<i128>> {
        v.and_then(|v| v.get(side))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, q)| {
                        (
                            k.clone(),
                            q.as_str().and_then(|q| parse_quantity_milli(q).ok()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    ["requests", "limits"]
        .iter()
        .all(|side| amounts(Some(actuated), side) == amounts(spec, side))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::v;
    use serde_json::json;

    #[test]
    fn resize_fails_on_a_pending_resize_of_a_restarting_container() {
        let p = |status: Value| {
            json!({"metadata": {"namespace": "ns", "name": "a", "uid": "a"},
                   "spec": {"containers": [{"name": "c",
                        "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                        "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}]},
                   "status": status})
        };
        let actuated = |mem: &str| {
            json!({"phase": "Running", "containerStatuses": [{"name": "c",
            "resources": {"requests": {"memory": mem}, "limits": {"memory": mem}}}]})
        };
        let facts = |pod: Value| Facts {
            pods: Some(vec![pod]),
            ..Facts::default()
        };
        assert_eq!(
            resize(&facts(p(actuated("1024Mi"))), v("1.33")).status,
            Status::Pass
        );
        let differs = resize(&facts(p(actuated("512Mi"))), v("1.33"));
        assert_eq!(differs.status, Status::Fail, "{differs:?}");
        let mut pending = actuated("1Gi");
        pending["resize"] = json!("InProgress");
        assert_eq!(resize(&facts(p(pending)), v("1.33")).status, Status::Fail);
        let unseen = resize(&facts(p(json!({"phase": "Running"}))), v("1.33"));
        assert_eq!(unseen.status, Status::Unknown);
        // Resize off (1.30 without the gate): nothing restarts on a resize.
        assert_eq!(
            resize(&facts(p(actuated("512Mi"))), v("1.30")).status,
            Status::Pass
        );
        let mut gated = facts(p(actuated("512Mi")));
        gated.host.kubelet_config =
            Some(json!({"featureGates": {"InPlacePodVerticalScaling": true}}));
        assert_eq!(resize(&gated, v("1.30")).status, Status::Fail);
        // The flag overrides the config; a gate turned off turns the default off.
        gated.host.kubelet_flags = vec!["--feature-gates=InPlacePodVerticalScaling=false".into()];
        assert_eq!(resize(&gated, v("1.30")).status, Status::Pass);
        assert_eq!(resize(&gated, v("1.33")).status, Status::Pass);
        gated.host.kubelet_config = None;
        gated.host.kubelet_flags = vec!["--feature-gates=InPlacePodVerticalScaling=true".into()];
        assert_eq!(resize(&gated, v("1.30")).status, Status::Fail);
    }
}
