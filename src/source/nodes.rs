//! Node name → kubelet version, from Node objects (`kubectl get nodes -o json`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Problem, Result};
use crate::kubelet::version::KubeletVersion;
use crate::source::reader::for_each_object_in_path;

/// Node name → kubelet version, from Node objects (`status.nodeInfo.kubeletVersion`).
/// A node whose version kubehash does not know is kept with the error, so its pods can be
/// reported rather than silently skipped.
#[derive(Debug, Default, Clone)]
pub struct NodeVersions {
    pub nodes: BTreeMap<String, std::result::Result<KubeletVersion, Problem>>,
    /// Each Node's labels, allocatable and taints (what preflight's per-node checks read).
    pub objects: BTreeMap<String, Value>,
}

impl NodeVersions {
    pub fn add_node_object(&mut self, node: &Value) -> std::result::Result<(), Problem> {
        if node.get("kind").and_then(Value::as_str) != Some("Node") {
            return Err("not a Node object".into());
        }
        let name = node
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or("a Node without metadata.name")?
            .to_string();
        let version = match node
            .pointer("/status/nodeInfo/kubeletVersion")
            .and_then(Value::as_str)
        {
            None => Err(format!("node {name} reports no status.nodeInfo.kubeletVersion").into()),
            Some(v) => v
                .parse::<KubeletVersion>()
                .map_err(|e| Problem(format!("node {name}: {e}"))),
        };
        let keep = |ptr: &str| node.pointer(ptr).cloned().unwrap_or(Value::Null);
        let slim = serde_json::json!({
            "metadata": {"name": name, "labels": keep("/metadata/labels")},
            "spec": {"taints": keep("/spec/taints")},
            "status": {"allocatable": keep("/status/allocatable")},
        });
        self.objects.insert(name.clone(), slim);
        self.nodes.insert(name, version);
        Ok(())
    }

    pub fn from_path(path: &Path) -> Result<NodeVersions> {
        let mut nv = NodeVersions::default();
        let mut problems = Vec::new();
        for_each_object_in_path(path, |v| {
            if let Err(e) = nv.add_node_object(&v) {
                problems.push(e);
            }
        })?;
        if nv.nodes.is_empty() {
            return Err(Error::Input {
                source_name: path.display().to_string(),
                reason: format!(
                    "no Node objects found{}",
                    problems
                        .first()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default()
                ),
            });
        }
        Ok(nv)
    }
}
