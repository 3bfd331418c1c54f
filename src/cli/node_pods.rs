//! Where node commands (`node …`, `scan --cri`, `shim`) get this node's pods, static pod
//! manifests and the kubelet version running now.

use anyhow::{Context, Result};

use crate::analysis::plan::{PodIndex, RuntimePods};
use crate::analysis::preflight::{removed_sources, running};
use crate::cli::args::PodSource;
use crate::cli::support::{claims_file, optional_version};
use crate::kubelet::version::KubeletVersion;
use crate::source::claims::Claims;
use crate::source::cluster::Cluster;
use crate::source::host::HostPaths;
use crate::source::manifests::Manifests;
use crate::source::parallel::{for_each_placed_object_on_cores, Input};
use crate::source::pool::{cores, BATCH};

/// What a node command knows of this node from outside the runtime.
pub struct NodeInputs {
    /// The pods, indexed for planning.
    pub index: PodIndex,
    /// The kubelet version the Node reports (with `--cluster`).
    pub version: Option<KubeletVersion>,
    /// This node's pod objects (with `--cluster`, or those of a file scheduled here).
    pub pods: Option<Vec<serde_json::Value>>,
    /// This node's Node object (with `--cluster`).
    pub node: Option<serde_json::Value>,
    /// The persistent volumes behind claims, for the volumes check: from `--claims`, or with
    /// `--cluster` got claim by claim, when the credentials may read them.
    pub claims: Option<Claims>,
}

/// This node's pods, from a file or from the API server (filtered to this node), and with
/// `--cluster` the Node object and the kubelet version it reports (the old kubelet's, before the
/// swap). Pods that cannot be used are said on stderr. With `runtime`, the index keeps only the
/// specs of the pods it names (a pods file may hold a whole cluster's). With `claims` (for the
/// preflight checks), the persistent volumes behind claims too: from `--claims`, or with
/// `--cluster` from the API server.
pub async fn read(
    source: &PodSource,
    runtime: Option<&RuntimePods>,
    claims: bool,
) -> Result<NodeInputs> {
    let mut index = PodIndex::default();
    let mut objects = Vec::new();
    let mut node_object = None;
    let mut version = None;
    let mut claim_volumes = None;
    let name = node_name(source);
    // Only the pod objects the preflight checks may read are kept (a pods file may hold a whole
    // cluster's): this node's, and those scheduled nowhere that may run (a file of pods written
    // for this node). A pending pod, as every one the scheduler has not placed yet, counts in
    // no check.
    let here = |p: &serde_json::Value| {
        let on = p
            .pointer("/spec/nodeName")
            .and_then(serde_json::Value::as_str);
        name.is_none() || on == name.as_deref() || (on.is_none() && running(p))
    };
    // A pod that cannot be used is said with where it is (`pods/b.json: object 2`), if it came
    // from a file.
    let mut keep = |p: serde_json::Value,
                    place: Option<(&str, usize)>,
                    objects: &mut Vec<serde_json::Value>| {
        if here(&p) {
            objects.push(p.clone());
        }
        if let Err(e) = index.add_pod_of(p, runtime) {
            let e = match place {
                Some((source, n)) => e.at(source, n),
                None => e,
            };
            index.problems.push(e.0);
        }
    };
    if let (true, Some(path)) = (claims, claims_file(source)?) {
        claim_volumes = Some(Claims::from_path(path, &removed_sources())?);
    }
    match &source.pods {
        // Parsed on every core (a directory's small files on this thread), handed on in input
        // order; a directory's files one after the other, each named as itself.
        Some(path) => for_each_placed_object_on_cores(
            &Input::Path(path),
            cores(),
            BATCH,
            |_| |n, pod: serde_json::Value| (n, pod),
            |source, (n, p)| keep(p, Some((source, n)), &mut objects),
        )?,
        None if source.from_cluster() => {
            let node = name
                .clone()
                .context("cannot read the hostname; pass --node-name")?;
            let cluster =
                Cluster::connect(source.kubeconfig.as_deref(), source.context.as_deref()).await?;
            let selector = format!("spec.nodeName={node}");
            cluster
                .for_each_pod(Some(&selector), &mut |p| keep(p, None, &mut objects))
                .await?;
            let reported = cluster.node(&node).await?;
            version = match reported
                .pointer("/status/nodeInfo/kubeletVersion")
                .and_then(serde_json::Value::as_str)
            {
                Some(v) => Some(
                    v.parse()
                        .with_context(|| format!("Node {node}'s status.nodeInfo.kubeletVersion"))?,
                ),
                None => None,
            };
            node_object = Some(reported);
            if claims {
                claim_volumes = said(cluster.claims_of(&objects, &removed_sources()).await);
            }
        }
        None => {}
    }
    for p in &index.problems {
        say!("kubehash: not a usable pod: {p}");
    }
    let pods = (source.pods.is_some() || source.from_cluster()).then_some(objects);
    Ok(NodeInputs {
        index,
        version,
        pods,
        node: node_object,
        claims: claim_volumes,
    })
}

/// The claims read, or `None` with why said on stderr.
pub fn said(read: std::result::Result<Claims, String>) -> Option<Claims> {
    match read {
        Ok(claims) => Some(claims),
        Err(why) => {
            say!("kubehash: volumes: persistent volumes not read ({why}); only inline volumes are checked");
            None
        }
    }
}

/// The old kubelet F of the proof rule: `--from`, else the version the Node reports.
pub fn old_kubelet(
    from: Option<&str>,
    node_version: Option<KubeletVersion>,
) -> Result<Option<KubeletVersion>> {
    Ok(optional_version("--from", from)?.or(node_version))
}

/// This node's static pod manifests (`--manifests`); files that are not pods are said on stderr.
/// With the kubelet's files (`host`), what its flags and config say of the manifests it refuses.
pub fn manifests(source: &PodSource, host: Option<&HostPaths>) -> Result<Manifests> {
    let dir = &source.manifests;
    // The default directory is absent on a node without static pods; one given that is absent
    // is more likely a mistyped path, and every static pod would read as unpinned.
    if dir.as_os_str() != crate::source::manifests::DEFAULT_DIR && !dir.exists() {
        say!(
            "kubehash: --manifests {}: no such directory, so no static pod manifest is read (a static pod counts as not pinned)",
            dir.display()
        );
    }
    let m = Manifests::read_for_kubelet(dir, host)?;
    for p in &m.problems {
        say!("kubehash: not a static pod manifest: {p}");
    }
    Ok(m)
}

/// This node's name: `--node-name`, else the hostname (the kubelet's default); `None` when
/// neither can be had (static pods are then matched by name prefix).
pub fn node_name(source: &PodSource) -> Option<String> {
    match &source.node_name {
        Some(given) => kubelet_node_name(given),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .and_then(|h| kubelet_node_name(&h)),
    }
}

/// The node name the kubelet makes of a hostname (its own, or `--hostname-override`): trimmed
/// and lower-cased, an empty one refused (`nodeutil.GetHostname`). A host named `Worker-1` is
/// node `worker-1`, and its static pods run as `<name>-worker-1`.
fn kubelet_node_name(hostname: &str) -> Option<String> {
    Some(hostname.trim().to_lowercase()).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn the_node_name_is_the_hostname_as_the_kubelet_makes_it() {
        assert_eq!(kubelet_node_name("Worker-1\n").as_deref(), Some("worker-1"));
        assert_eq!(kubelet_node_name(" node-a ").as_deref(), Some("node-a"));
        assert_eq!(kubelet_node_name(" \n"), None);
    }

    /// From a whole cluster's pods file, a node keeps the pod objects of its own pods, whatever
    /// their phase, and of pods scheduled nowhere that may run (a file written for this node);
    /// never another node's, nor one the scheduler has not placed yet (pending).
    #[test]
    fn a_node_keeps_the_pod_objects_its_checks_may_read() {
        let dir = tempfile::tempdir().unwrap();
        let pod = |name: &str, node: Option<&str>, phase: Option<&str>| {
            let mut p = json!({"kind":"Pod","metadata":{"namespace":"n","name":name,"uid":name},
                "spec":{"containers":[{"name":"c","image":"i"}]}});
            if let Some(node) = node {
                p["spec"]["nodeName"] = node.into();
            }
            if let Some(phase) = phase {
                p["status"] = json!({ "phase": phase });
            }
            p
        };
        let pods = [
            pod("here-running", Some("a"), Some("Running")),
            pod("here-succeeded", Some("a"), Some("Succeeded")),
            pod("there", Some("b"), Some("Running")),
            pod("nowhere-pending", None, Some("Pending")),
            pod("nowhere-written", None, None),
            pod("nowhere-running", None, Some("Running")),
        ];
        let file = dir.path().join("pods.json");
        let lines: Vec<String> = pods.iter().map(Value::to_string).collect();
        std::fs::write(&file, lines.join("\n")).unwrap();
        let source = PodSource {
            pods: Some(file),
            cluster: false,
            claims: None,
            kubeconfig: None,
            context: None,
            node_name: Some("a".into()),
            manifests: dir.path().join("manifests"),
        };
        let rt = crate::cli::support::runtime().unwrap();
        let inputs = rt
            .block_on(read(&source, Some(&RuntimePods::default()), false))
            .unwrap();
        let kept: Vec<&str> = inputs
            .pods
            .iter()
            .flatten()
            .filter_map(|p| p.pointer("/metadata/name")?.as_str())
            .collect();
        assert_eq!(
            kept,
            [
                "here-running",
                "here-succeeded",
                "nowhere-written",
                "nowhere-running"
            ]
        );
    }
}
