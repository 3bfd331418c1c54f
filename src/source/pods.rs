//! Pod specs and node versions from saved JSON: `kubectl get pods -A -o json` (a PodList or List),
//! single Pods, JSON arrays, or a directory of `.json` files; nodes from `kubectl get nodes -o json`.
//!
//! A PodList is read as a stream: each item is handed to the caller as soon as it is parsed and
//! dropped after, so a multi-gigabyte list scans in the memory of one pod. The owner chain of a
//! pod (Pod → ReplicaSet → Deployment, DaemonSet, StatefulSet, Job → CronJob) is resolved from
//! the pod's own metadata, since saved pod lists do not carry the owners' objects.
//!
//! Not here: the API server (live clusters), which is a separate source.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::kubelet::version::KubeletVersion;

/// Calls `each` for every object in `reader`: the items of a List/PodList (streamed), the
/// elements of a JSON array, or a single object. Several top-level values may follow each other.
pub fn for_each_object<R: Read>(reader: R, source: &str, each: impl FnMut(Value)) -> Result<()> {
    for_each_value(serde_json::de::IoRead::new(reader), source, each)
}

/// [`for_each_object`] over any serde_json input (`SliceRead` for bytes in memory, which is
/// faster than going through `io::Read`). Top-level values that are not objects or arrays are
/// passed on as they are, for the caller to report.
pub fn for_each_value<'de, R: serde_json::de::Read<'de>>(
    read: R,
    source: &str,
    each: impl FnMut(Value),
) -> Result<()> {
    match for_each_value_raw(read, each) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::Input {
            source_name: source.to_string(),
            reason: "no JSON input".into(),
        }),
        Err(e) => Err(Error::Input {
            source_name: source.to_string(),
            reason: format!("not valid JSON: {e}"),
        }),
    }
}

/// [`for_each_value`] with serde_json's own error; `Ok(false)` when there was no value at all.
pub fn for_each_value_raw<'de, R: serde_json::de::Read<'de>>(
    read: R,
    mut each: impl FnMut(Value),
) -> std::result::Result<bool, serde_json::Error> {
    let mut de = serde_json::Deserializer::new(read);
    let mut any = false;
    loop {
        // Stop cleanly at end of input (after optional whitespace).
        if de.end().is_ok() {
            return Ok(any);
        }
        Top { each: &mut each }.deserialize(&mut de)?;
        any = true;
    }
}

/// Reads a JSON or YAML file (`.yaml`/`.yml`, several documents allowed), every such file of a
/// directory (sorted by name), or JSON on stdin for `-`.
pub fn for_each_object_in_path(path: &Path, mut each: impl FnMut(Value)) -> Result<()> {
    read_path(path, &mut each)
}

fn read_path(path: &Path, each: &mut dyn FnMut(Value)) -> Result<()> {
    let name = path.display().to_string();
    if name == "-" {
        return for_each_object(std::io::stdin().lock(), "stdin", each);
    }
    let io = |e| Error::Io {
        source_name: name.clone(),
        source: e,
    };
    if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && (is_yaml(p) || p.extension().is_some_and(|x| x == "json")))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::Input {
                source_name: name,
                reason: "directory has no .json, .yaml or .yml files".into(),
            });
        }
        for f in files {
            read_path(&f, each)?;
        }
        return Ok(());
    }
    let file = File::open(path).map_err(io)?;
    if is_yaml(path) {
        return for_each_yaml_object(BufReader::new(file), &name, each);
    }
    for_each_object(BufReader::with_capacity(1 << 20, file), &name, each)
}

fn is_yaml(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "yaml" || x == "yml")
}

/// YAML documents (`---`-separated), each a Pod, a List of them, or a Node. Each document is
/// turned into the JSON value it denotes; a List's items are handed over one by one.
pub fn for_each_yaml_object<R: Read>(
    mut reader: R,
    source: &str,
    each: &mut dyn FnMut(Value),
) -> Result<()> {
    use serde::Deserialize;
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).map_err(|e| Error::Io {
        source_name: source.to_string(),
        source: e,
    })?;
    if let Some(line) = flow_nesting_beyond(&bytes, MAX_YAML_FLOW_DEPTH) {
        return Err(Error::Input {
            source_name: source.to_string(),
            reason: format!(
                "YAML nested deeper than {MAX_YAML_FLOW_DEPTH} levels of [ and {{ at line {line}; not a Pod"
            ),
        });
    }
    let mut any = false;
    for (i, doc) in serde_yaml_ng::Deserializer::from_slice(&bytes).enumerate() {
        let v = Value::deserialize(doc).map_err(|e| Error::Input {
            source_name: source.to_string(),
            reason: format!("YAML document {}: {e}", i + 1),
        })?;
        match v {
            Value::Null => continue, // an empty document
            Value::Object(mut m) if m.get("items").is_some_and(Value::is_array) => {
                if let Some(Value::Array(items)) = m.remove("items") {
                    items.into_iter().for_each(&mut *each);
                }
            }
            v => each(v),
        }
        any = true;
    }
    if !any {
        return Err(Error::Input {
            source_name: source.to_string(),
            reason: "no YAML documents".into(),
        });
    }
    Ok(())
}

/// Deeper flow nesting than any Pod has. The YAML scanner's cost per token grows with the flow
/// depth, so `{a: {a: …` 100,000 levels deep took a minute to reject; this bound is checked
/// first, in one linear pass.
const MAX_YAML_FLOW_DEPTH: usize = 256;

/// The line at which `[`/`{` nesting outside quoted scalars and comments first exceeds `limit`.
/// A quote opens a quoted scalar only where a token starts (after white space, `[`, `{`, `,` or
/// at the start), as in YAML; brackets inside plain or block scalars are counted, which can only
/// make the check stricter.
fn flow_nesting_beyond(bytes: &[u8], limit: usize) -> Option<usize> {
    let (mut depth, mut line, mut prev) = (0usize, 1usize, b'\n');
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let token_start = matches!(prev, b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',');
        match c {
            b'\n' => line += 1,
            b'#' if matches!(prev, b' ' | b'\t' | b'\n' | b'\r') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' if token_start => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' if c == b'"' => i += 1,
                        b'\'' if c == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 1,
                        q if q == c => break,
                        b'\n' => line += 1,
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(line);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev = bytes.get(i).copied().unwrap_or(b' ');
        i += 1;
    }
    None
}

struct Top<'f, F> {
    each: &'f mut F,
}

impl<'de, F: FnMut(Value)> DeserializeSeed<'de> for Top<'_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value)> Visitor<'de> for Top<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Pod, a PodList/List, or an array of them")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(v) = seq.next_element::<Value>()? {
            (self.each)(v);
        }
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<(), E> {
        (self.each)(Value::Bool(v));
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        (self.each)(Value::Null);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let mut rest = Map::new();
        let mut streamed = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(Items { each: self.each })?;
                streamed = true;
            } else {
                let v: Value = map.next_value()?;
                rest.insert(key, v);
            }
        }
        if !streamed {
            (self.each)(Value::Object(rest));
        }
        Ok(())
    }
}

struct Items<'f, F> {
    each: &'f mut F,
}

impl<'de, F: FnMut(Value)> DeserializeSeed<'de> for Items<'_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value)> Visitor<'de> for Items<'_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of items")
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(v) = seq.next_element::<Value>()? {
            (self.each)(v);
        }
        Ok(())
    }
}

/// Node name → kubelet version, from Node objects (`status.nodeInfo.kubeletVersion`).
/// A node whose version kubehash does not know is kept with the error, so its pods can be
/// reported rather than silently skipped.
#[derive(Debug, Default, Clone)]
pub struct NodeVersions {
    pub nodes: BTreeMap<String, std::result::Result<KubeletVersion, String>>,
}

impl NodeVersions {
    pub fn add_node_object(&mut self, node: &Value) -> std::result::Result<(), String> {
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
            None => Err(format!(
                "node {name} reports no status.nodeInfo.kubeletVersion"
            )),
            Some(v) => v
                .parse::<KubeletVersion>()
                .map_err(|e| format!("node {name}: {e}")),
        };
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

/// What kind of container slot in the pod.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    Init,
    /// An init container with `restartPolicy: Always` (a native sidecar).
    Sidecar,
    Regular,
    Ephemeral,
}

/// One container of one pod, with what the report needs to group it.
#[derive(Debug, Clone)]
pub struct PodContainer {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub node: String,
    pub workload: Workload,
    pub kind: ContainerKind,
    pub name: String,
    pub json: Value,
    /// Why a hash change cannot restart this container (from the pod's status), or `None` when
    /// it runs or may run (no status says otherwise).
    pub not_running: Option<String>,
    /// For a static pod's mirror pod: the UID the kubelet runs the pod under (its
    /// `kubernetes.io/config.hash`), which is what the runtime's labels carry.
    pub static_uid: Option<String>,
}

/// A mirror pod (annotation `kubernetes.io/config.mirror`) is a static pod; the kubelet's UID for
/// it is its `kubernetes.io/config.hash` annotation (the mirror annotation holds the same hash).
pub fn static_pod_uid(pod: &Value) -> Option<String> {
    let a = pod.pointer("/metadata/annotations")?;
    let mirror = a.get("kubernetes.io/config.mirror")?.as_str()?;
    Some(
        a.get("kubernetes.io/config.hash")
            .and_then(Value::as_str)
            .unwrap_or(mirror)
            .to_string(),
    )
}

/// The top of a pod's owner chain.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Workload {
    pub kind: String,
    pub name: String,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// The owner chain from the pod's metadata: a ReplicaSet named `<deployment>-<pod-template-hash>`
/// belongs to that Deployment, a Job named `<cronjob>-<digits>` is taken to be a CronJob's; a mirror
/// pod (owned by a Node) is a static pod; a pod without owner is a bare Pod.
pub fn workload_of(pod: &Value) -> Workload {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let owner = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .or_else(|| refs.first())
        });
    let Some(owner) = owner else {
        return Workload {
            kind: "Pod".into(),
            name: name.into(),
        };
    };
    let kind = owner.get("kind").and_then(Value::as_str).unwrap_or("");
    let oname = owner.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "ReplicaSet" => {
            let hash = pod
                .pointer("/metadata/labels/pod-template-hash")
                .and_then(Value::as_str);
            match hash.and_then(|h| oname.strip_suffix(h)?.strip_suffix('-')) {
                Some(dep) => Workload {
                    kind: "Deployment".into(),
                    name: dep.into(),
                },
                None => Workload {
                    kind: "ReplicaSet".into(),
                    name: oname.into(),
                },
            }
        }
        "Job" => match oname.rsplit_once('-') {
            Some((cron, ts)) if ts.len() >= 8 && ts.bytes().all(|b| b.is_ascii_digit()) => {
                Workload {
                    kind: "CronJob".into(),
                    name: cron.into(),
                }
            }
            _ => Workload {
                kind: "Job".into(),
                name: oname.into(),
            },
        },
        "Node" => Workload {
            kind: "StaticPod".into(),
            name: name.into(),
        },
        _ => Workload {
            kind: kind.into(),
            name: oname.into(),
        },
    }
}

/// What a pod's container lists hold, in the order the kubelet starts containers.
pub enum ContainerSlot {
    Container {
        /// `initContainers`, `containers` or `ephemeralContainers`.
        list: &'static str,
        index: usize,
        json: Value,
    },
    /// The list is there but is not a JSON list.
    NotAList { list: &'static str, got: Value },
}

/// The pod's container lists, in start order.
pub const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// Takes every container out of a pod object (init, regular, ephemeral), leaving the lists null.
pub fn take_container_slots(pod: &mut Value) -> Vec<ContainerSlot> {
    let mut out = Vec::new();
    for list in CONTAINER_LISTS {
        match pod.pointer_mut(&format!("/spec/{list}")).map(Value::take) {
            None | Some(Value::Null) => {}
            Some(Value::Array(cs)) => out.extend(
                cs.into_iter()
                    .enumerate()
                    .map(|(index, json)| ContainerSlot::Container { list, index, json }),
            ),
            Some(got) => out.push(ContainerSlot::NotAList { list, got }),
        }
    }
    out
}

/// Splits a pod object into its containers (init, sidecar, regular, ephemeral), taking the
/// container values out of it. An object that is not a pod, or a pod without containers, is an
/// error naming it.
/// What a pod's status says about which of its containers run. The kubelet compares hashes only
/// for running regular containers (`computePodActions`) and running sidecars
/// (`computeInitContainerActions`); it never restarts regular init containers or ephemeral
/// containers for a hash change, nor any container of a pod that has finished.
struct ContainerStates {
    /// Why no container of the pod can be restarted (finished, not started).
    pod: Option<String>,
    /// Container name → running, from `status.*ContainerStatuses[].state`.
    running: BTreeMap<String, bool>,
}

impl ContainerStates {
    fn of(pod: &Value, scheduled: bool) -> ContainerStates {
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut running = BTreeMap::new();
        for list in [
            "containerStatuses",
            "initContainerStatuses",
            "ephemeralContainerStatuses",
        ] {
            for s in pod
                .pointer(&format!("/status/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = s.get("name").and_then(Value::as_str) {
                    let is_running = s.pointer("/state/running").is_some_and(|r| !r.is_null());
                    running.insert(n.to_string(), is_running);
                }
            }
        }
        let pod_reason = match phase {
            "Succeeded" | "Failed" => Some(format!(
                "the pod has finished ({phase}): its containers are never restarted"
            )),
            _ if !scheduled => Some("the pod is not scheduled to a node".to_string()),
            "Pending" if running.values().all(|r| !r) => {
                Some("the pod is Pending: its containers have not started".to_string())
            }
            _ => None,
        };
        ContainerStates {
            pod: pod_reason,
            running,
        }
    }

    fn not_running(&self, kind: ContainerKind, name: &str) -> Option<String> {
        if let Some(r) = &self.pod {
            return Some(r.clone());
        }
        match kind {
            ContainerKind::Init => {
                return Some(
                    "a regular init container: the kubelet does not restart it for a hash change"
                        .into(),
                )
            }
            ContainerKind::Ephemeral => {
                return Some("an ephemeral container: the kubelet never restarts it".into())
            }
            ContainerKind::Regular | ContainerKind::Sidecar => {}
        }
        match self.running.get(name) {
            Some(false) => {
                Some("the container is not running (its status says waiting or terminated)".into())
            }
            _ => None,
        }
    }
}

pub fn pod_containers(mut pod: Value) -> std::result::Result<Vec<PodContainer>, String> {
    let kind = pod.get("kind").and_then(Value::as_str).unwrap_or("Pod");
    if kind != "Pod" {
        return Err(format!("a {kind} is not a Pod"));
    }
    let meta = |k: &str| {
        pod.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (namespace, name, uid) = (meta("namespace"), meta("name"), meta("uid"));
    if name.is_empty() {
        return Err("a pod without metadata.name".into());
    }
    let id = format!("{namespace}/{name}");
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let workload = workload_of(&pod);
    let status = ContainerStates::of(&pod, !node.is_empty());
    let static_uid = static_pod_uid(&pod);
    let mut out = Vec::new();
    for slot in take_container_slots(&mut pod) {
        let (list, i, c) = match slot {
            ContainerSlot::NotAList { list, .. } => {
                return Err(format!("{id}: spec.{list} is not a list"))
            }
            ContainerSlot::Container { list, index, json } => (list, index, json),
        };
        let Some(cname) = c.get("name").and_then(Value::as_str).map(str::to_string) else {
            return Err(format!("{id}: spec.{list}[{i}] has no name"));
        };
        let kind = match list {
            "initContainers"
                if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") =>
            {
                ContainerKind::Sidecar
            }
            "initContainers" => ContainerKind::Init,
            "containers" => ContainerKind::Regular,
            _ => ContainerKind::Ephemeral,
        };
        out.push(PodContainer {
            not_running: status.not_running(kind, &cname),
            static_uid: static_uid.clone(),
            namespace: namespace.clone(),
            pod: name.clone(),
            pod_uid: uid.clone(),
            node: node.clone(),
            workload: workload.clone(),
            kind,
            name: cname,
            json: c,
        });
    }
    if out.is_empty() {
        return Err(format!("{id}: pod has no containers"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn streams_list_items_arrays_and_single_objects() {
        let mut names = Vec::new();
        let input = r#"{"kind":"List","metadata":{},"items":[{"a":1},{"a":2}]} [{"a":3}] {"a":4}"#;
        for_each_object(input.as_bytes(), "t", |v| {
            names.push(v["a"].as_i64().unwrap())
        })
        .unwrap();
        assert_eq!(names, [1, 2, 3, 4]);
        let err = for_each_object(&b"{\"items\":[{\"a\":1},"[..], "t", |_| {}).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("t: not valid JSON: EOF while parsing"),
            "{err}"
        );
        assert!(for_each_object(&b"  "[..], "t", |_| {}).is_err());
    }

    #[test]
    fn yaml_documents_and_lists() {
        let y = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\nkind: List\nitems:\n- {kind: Pod, metadata: {name: b}}\n- {kind: Pod, metadata: {name: c}}\n";
        let mut names = Vec::new();
        for_each_yaml_object(y.as_bytes(), "t.yaml", &mut |v| {
            names.push(v["metadata"]["name"].as_str().unwrap().to_string())
        })
        .unwrap();
        assert_eq!(names, ["a", "b", "c"]);
        let err = for_each_yaml_object("a: [1".as_bytes(), "bad.yaml", &mut |_| {}).unwrap_err();
        let deep = "{a: ".repeat(100_000);
        let e = for_each_yaml_object(deep.as_bytes(), "deep.yaml", &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("deeper than 256"), "{e}");
        // Brackets in quoted scalars and comments do not count; a Pod-like depth passes the check.
        let quoted = format!(
            "a: \"{}\" # {}\nb: '{}'\n",
            "[".repeat(300),
            "{".repeat(300),
            "{".repeat(300)
        );
        assert_eq!(flow_nesting_beyond(quoted.as_bytes(), 256), None);
        assert_eq!(flow_nesting_beyond(b"x: don't [[[", 2), Some(1));
        assert!(
            err.to_string().starts_with("bad.yaml: YAML document 1: "),
            "{err}"
        );
    }

    #[test]
    fn owner_chains() {
        let w = |v: Value| workload_of(&v).to_string();
        assert_eq!(
            w(
                json!({"metadata":{"name":"web-6c8f-x","labels":{"pod-template-hash":"6c8f"},
                "ownerReferences":[{"kind":"ReplicaSet","name":"web-6c8f","controller":true}]}})
            ),
            "Deployment/web"
        );
        assert_eq!(
            w(
                json!({"metadata":{"name":"r-1","ownerReferences":[{"kind":"Job","name":"report-29311200","controller":true}]}})
            ),
            "CronJob/report"
        );
        assert_eq!(
            w(
                json!({"metadata":{"name":"m","ownerReferences":[{"kind":"Job","name":"migrate","controller":true}]}})
            ),
            "Job/migrate"
        );
        assert_eq!(
            w(
                json!({"metadata":{"name":"etcd-a","ownerReferences":[{"kind":"Node","name":"a","controller":true}]}})
            ),
            "StaticPod/etcd-a"
        );
        assert_eq!(w(json!({"metadata":{"name":"solo"}})), "Pod/solo");
    }

    #[test]
    fn sidecars_are_init_containers_that_always_restart() {
        let pod = json!({"metadata":{"name":"p","namespace":"n"},"spec":{"nodeName":"a",
            "initContainers":[{"name":"i"},{"name":"s","restartPolicy":"Always"}],"containers":[{"name":"c"}]}});
        let kinds: Vec<_> = pod_containers(pod)
            .unwrap()
            .iter()
            .map(|c| (c.name.clone(), c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("i".into(), ContainerKind::Init),
                ("s".into(), ContainerKind::Sidecar),
                ("c".into(), ContainerKind::Regular)
            ]
        );
        assert!(pod_containers(json!({"metadata":{"name":"p"},"spec":{}})).is_err());
    }

    #[test]
    fn which_containers_a_hash_change_can_restart() {
        use serde_json::json;
        let pod = |phase: &str, node: Option<&str>, statuses: Value| {
            let mut p = json!({"metadata":{"namespace":"ns","name":"p","uid":"u"},
                "spec":{"initContainers":[{"name":"init"},{"name":"side","restartPolicy":"Always"}],
                        "containers":[{"name":"a"},{"name":"b"}],
                        "ephemeralContainers":[{"name":"debug"}]},
                "status":{"phase":phase,"containerStatuses":statuses}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
            }
            pod_containers(p)
                .unwrap()
                .into_iter()
                .map(|c| (c.name, c.not_running.is_none()))
                .collect::<Vec<_>>()
        };
        let running = json!([{"name":"a","state":{"running":{}}},{"name":"b","state":{"waiting":{"reason":"CrashLoopBackOff"}}}]);
        assert_eq!(
            pod("Running", Some("n1"), running.clone()),
            [
                ("init".to_string(), false),
                ("side".to_string(), true),
                ("a".to_string(), true),
                ("b".to_string(), false),
                ("debug".to_string(), false)
            ]
        );
        for (phase, node) in [
            ("Succeeded", Some("n1")),
            ("Failed", Some("n1")),
            ("Pending", None),
        ] {
            assert!(
                pod(phase, node, running.clone()).iter().all(|(_, r)| !r),
                "{phase}"
            );
        }
        // No status at all: assumed running (a restart is reported rather than missed).
        assert!(pod("", Some("n1"), Value::Null)
            .iter()
            .any(|(n, r)| n == "a" && *r));
    }
}
