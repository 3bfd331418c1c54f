//! The `eviction` check: while the kubelet is down the node is tainted NoExecute, and pods
//! whose tolerations run out are evicted.

use serde_json::Value;

use super::{check, pod_name, running, Check, Facts, Status};

/// While the kubelet is down the node gets NoExecute not-ready/unreachable taints, and pods go
/// after their `tolerationSeconds`.
pub(super) fn eviction(f: &Facts) -> Check {
    let Some(pods) = &f.pods else {
        let mut c = check(EVICTION.0, EVICTION.1);
        c.status = Status::Unknown;
        c.evidence = "no pods (give -i or --cluster)".into();
        return c;
    };
    let mut tally = Eviction::default();
    pods.iter().for_each(|p| tally.add(p));
    tally.check(f.node.as_ref())
}

const EVICTION: (&str, &str) = (
    "eviction",
    "pods are evicted once the kubelet has been down longer than the node-monitor grace period plus their tolerationSeconds",
);

/// The eviction check, one pod at a time.
#[derive(Debug, Clone, Default)]
pub struct Eviction {
    /// The shortest toleration of a not-ready/unreachable node, and its pod.
    shortest: Option<(i64, String)>,
}

impl Eviction {
    pub fn add(&mut self, p: &Value) {
        self.count(Eviction::judge(p));
    }

    /// A running pod's shortest toleration of a not-ready/unreachable node, and its name.
    pub fn judge(p: &Value) -> Option<(i64, String)> {
        if !running(p) {
            return None;
        }
        let tolerations = p
            .pointer("/spec/tolerations")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // The API server gives every pod 300 s for both taints (DefaultTolerationSeconds).
        let secs = [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ]
        .iter()
        .map(|taint| {
            tolerations
                .iter()
                .filter(|t| t["effect"] == "NoExecute" || t["effect"].is_null())
                .filter(|t| t["key"] == *taint || (t["key"].is_null() && t["operator"] == "Exists"))
                .map(|t| t["tolerationSeconds"].as_i64().unwrap_or(i64::MAX))
                .max()
                .unwrap_or(300)
        })
        .min()
        .unwrap_or(300);
        Some((secs, pod_name(p)))
    }

    /// Counts one pod judged by [`Eviction::judge`]; the first pod with the shortest toleration
    /// is the one named.
    pub fn count(&mut self, judged: Option<(i64, String)>) {
        let Some((secs, pod)) = judged else { return };
        if self.shortest.as_ref().is_none_or(|(s, _)| secs < *s) {
            self.shortest = Some((secs, pod));
        }
    }

    /// The check's result for the pods added, on this Node (when known).
    pub fn check(&self, node: Option<&Value>) -> Check {
        let mut c = check(EVICTION.0, EVICTION.1);
        let tainted = node
            .and_then(|n| n.pointer("/spec/taints"))
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().any(|t| t["effect"] == "NoExecute"));
        if tainted {
            c.set(
                Status::Fail,
                "the Node already has a NoExecute taint",
                "find out why before stopping the kubelet",
            );
            return c;
        }
        match &self.shortest {
            None => c.evidence = "no running pods".into(),
            Some((secs, pod)) => {
                c.evidence = format!(
                    "the shortest toleration of a not-ready/unreachable node is {secs} s ({pod}); taints come after the node-monitor grace period (40 s by default)"
                );
                if *secs < 300 {
                    c.status = Status::Warn;
                    c.action = format!(
                        "keep the kubelet down for less than {secs} s plus the grace period, or raise {pod}'s tolerationSeconds"
                    );
                }
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::preflight::fixtures::pod;
    use serde_json::json;

    #[test]
    fn eviction_warns_on_short_tolerations_and_fails_on_an_existing_taint() {
        let short = pod(
            "a",
            json!({"containers": [], "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]}),
        );
        let plain = pod("b", json!({"containers": []}));
        let mut f = Facts {
            pods: Some(vec![plain.clone()]),
            ..Facts::default()
        };
        assert_eq!(eviction(&f).status, Status::Pass);
        f.pods = Some(vec![plain, short]);
        let c = eviction(&f);
        assert_eq!(c.status, Status::Warn);
        assert!(c.evidence.contains("30 s (ns/a)"), "{c:?}");
        f.node = Some(json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}}));
        assert_eq!(eviction(&f).status, Status::Fail);
    }
}
