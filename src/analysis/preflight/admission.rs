//! The `admission` check: a running pod the new kubelet does not admit again (node labels,
//! allocatable, devices) is set Failed and killed (`HandlePodAdditions` → `canAdmitPod`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::kubelet::quantity::parse_quantity_milli;

use super::{check, containers, pod_name, running, Check, Facts, Status};

/// `HandlePodAdditions` runs `canAdmitPod` for running pods too: a pod the new kubelet rejects
/// is set Failed and killed.
pub(super) fn admission(f: &Facts) -> Check {
    let (Some(pods), Some(node)) = (&f.pods, &f.node) else {
        let mut c = check(ADMISSION.0, ADMISSION.1);
        c.set(
            Status::Unknown,
            "no Node object or pods (give --cluster)",
            "run with --cluster to check labels, allocatable and devices",
        );
        return c;
    };
    let mut tally = Admission::new(node);
    pods.iter().for_each(|p| tally.add(p));
    tally.check()
}

const ADMISSION: (&str, &str) = (
    "admission",
    "a running pod the new kubelet does not admit again is set Failed and killed (HandlePodAdditions → canAdmitPod)",
);

/// What one running pod brings to the admission check.
#[derive(Debug, Clone, Default)]
pub struct PodAdmission {
    refused: Vec<String>,
    devices: Vec<String>,
    requested: Vec<(String, i128)>,
}

/// The admission check, one pod at a time (a cluster-wide scan streams pods).
#[derive(Debug, Clone)]
pub struct Admission {
    labels: serde_json::Map<String, Value>,
    allocatable: serde_json::Map<String, Value>,
    pods: usize,
    refused: Vec<String>,
    devices: Vec<String>,
    requested: BTreeMap<String, i128>,
}

impl Admission {
    /// Against this Node object.
    pub fn new(node: &Value) -> Admission {
        let map = |ptr: &str| {
            node.pointer(ptr)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        Admission {
            labels: map("/metadata/labels"),
            allocatable: map("/status/allocatable"),
            pods: 0,
            refused: Vec::new(),
            devices: Vec::new(),
            requested: BTreeMap::new(),
        }
    }

    /// One of the node's pods (pods that do not run are not admitted again).
    pub fn add(&mut self, pod: &Value) {
        let judged = Admission::judge(&self.labels, pod);
        self.count(judged);
    }

    /// What admitting `pod` on a node with these labels finds, on its own: a scan judges pods
    /// on several threads and counts them in input order.
    pub fn judge(labels: &serde_json::Map<String, Value>, pod: &Value) -> Option<PodAdmission> {
        if !running(pod) {
            return None;
        }
        let mut out = PodAdmission::default();
        let name = pod_name(pod);
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        if let Some(sel) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object) {
            for (k, v) in sel {
                if label(k) != v.as_str() {
                    let want = v.as_str().unwrap_or("");
                    out.refused.push(format!("{name}: nodeSelector {k}={want}"));
                }
            }
        }
        let terms = pod
            .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
            .and_then(Value::as_array);
        if let Some(terms) = terms {
            if !terms.iter().any(|t| term_matches(t, labels)) {
                out.refused.push(format!("{name}: required node affinity"));
            }
        }
        for c in containers(pod, &["containers", "initContainers"]) {
            if let Some(req) = c.pointer("/resources/requests").and_then(Value::as_object) {
                for (k, v) in req {
                    if k.contains('/') && !k.starts_with("hugepages-") {
                        out.devices.push(format!("{name}: {k}"));
                    }
                    if let Some(m) = v.as_str().and_then(|q| parse_quantity_milli(q).ok()) {
                        out.requested.push((k.clone(), m));
                    }
                }
            }
        }
        Some(out)
    }

    /// Counts one pod judged by [`Admission::judge`] against this node's labels.
    pub fn count(&mut self, judged: Option<PodAdmission>) {
        let Some(p) = judged else { return };
        self.pods += 1;
        self.refused.extend(p.refused);
        self.devices.extend(p.devices);
        for (k, m) in p.requested {
            *self.requested.entry(k).or_default() += m;
        }
    }

    /// The check's result for the pods added.
    pub fn check(&self) -> Check {
        let mut c = check(ADMISSION.0, ADMISSION.1);
        let mut refused = self.refused.clone();
        for (k, total) in &self.requested {
            let cap = self
                .allocatable
                .get(k)
                .and_then(Value::as_str)
                .and_then(|q| parse_quantity_milli(q).ok());
            if cap.is_some_and(|cap| *total > cap) {
                refused.push(format!(
                    "running pods request more {k} than the node's allocatable"
                ));
            }
        }
        c.evidence = format!(
            "{} running pods against the Node's labels and allocatable",
            self.pods
        );
        if !refused.is_empty() {
            c.set(Status::Fail, refused.join("; "), "restore the node labels / allocatable these pods need before the swap, or move the pods");
        } else if !self.devices.is_empty() {
            c.status = Status::Warn;
            c.evidence = format!(
                "pods use device-plugin resources ({}): they are admitted only once the device plugin registers again",
                self.devices.join(", ")
            );
            c.action = "avoid kubelet 1.25.10, 1.26.5 and 1.27.2, which rejected such pods at restart (fixed upstream by #118635 and its backports)".into();
        }
        c
    }
}

fn term_matches(term: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let exprs = term
        .get("matchExpressions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    exprs.iter().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let have = label(key);
        match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => have.is_some_and(|h| values.contains(&h)),
            "NotIn" => !have.is_some_and(|h| values.contains(&h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            "Gt" | "Lt" => {
                let (Some(h), Some(v)) = (
                    have.and_then(|h| h.parse::<i64>().ok()),
                    values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if e["operator"] == "Gt" {
                    h > v
                } else {
                    h < v
                }
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::{node, pod};
    use crate::analysis::preflight::Facts;
    use serde_json::json;

    #[test]
    fn admission_fails_on_labels_and_allocatable_and_warns_on_devices() {
        let spec = |extra: Value| {
            let mut s =
                json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]});
            s.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            s
        };
        let mut f = Facts {
            pods: Some(vec![pod(
                "a",
                spec(json!({"nodeSelector": {"disk": "ssd"}})),
            )]),
            node: Some(node(json!({"disk": "ssd"}), json!({"cpu": "2"}))),
            ..Facts::default()
        };
        assert_eq!(admission(&f).status, Status::Pass, "{:?}", admission(&f));
        f.node = Some(node(json!({"disk": "hdd"}), json!({"cpu": "2"})));
        assert_eq!(admission(&f).status, Status::Fail);
        let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}});
        f.pods = Some(vec![pod("b", spec(affinity))]);
        f.node = Some(node(json!({"zone": "a"}), json!({"cpu": "2"})));
        assert_eq!(admission(&f).status, Status::Pass);
        f.node = Some(node(json!({"zone": "b"}), json!({"cpu": "2"})));
        assert_eq!(admission(&f).status, Status::Fail);
        f.pods = Some(vec![pod("c", spec(json!({})))]);
        f.node = Some(node(json!({}), json!({"cpu": "250m"})));
        assert!(admission(&f).evidence.contains("allocatable"));
        f.pods = Some(vec![pod(
            "d",
            json!({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}),
        )]);
        f.node = Some(node(json!({}), json!({"nvidia.com/gpu": "1"})));
        assert_eq!(admission(&f).status, Status::Warn);
        assert_eq!(admission(&Facts::default()).status, Status::Unknown);
    }
}
