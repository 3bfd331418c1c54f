//! Where node commands (`node …`, `scan --cri`, `shim`) get this node's pods, static pod
//! manifests and the kubelet version running now.

use anyhow::{Context, Result};

use crate::analysis::plan::PodIndex;
use crate::cli::args::PodSource;
use crate::cli::support::optional_version;
use crate::kubelet::version::KubeletVersion;
use crate::source::cluster::Cluster;
use crate::source::manifests::Manifests;
use crate::source::reader::for_each_object_in_path;

/// This node's pods, from a file or from the API server (filtered to this node), and with
/// `--cluster` the kubelet version the Node reports (the old kubelet's, before the swap). Pods
/// that cannot be used are said on stderr.
pub async fn read(source: &PodSource) -> Result<(PodIndex, Option<KubeletVersion>)> {
    let mut pods = PodIndex::default();
    let mut node_version = None;
    match &source.pods {
        Some(path) => for_each_object_in_path(path, |p| pods.add_pod(p))?,
        None => {
            let node = match &source.node_name {
                Some(n) => n.clone(),
                None => hostname()?,
            };
            let cluster =
                Cluster::connect(source.kubeconfig.as_deref(), source.context.as_deref()).await?;
            let selector = format!("spec.nodeName={node}");
            cluster
                .for_each_pod(Some(&selector), &mut |p| pods.add_pod(p))
                .await?;
            let reported = cluster.node(&node).await?;
            node_version = match reported
                .pointer("/status/nodeInfo/kubeletVersion")
                .and_then(serde_json::Value::as_str)
            {
                Some(v) => Some(
                    v.parse()
                        .with_context(|| format!("Node {node}'s status.nodeInfo.kubeletVersion"))?,
                ),
                None => None,
            };
        }
    }
    for p in &pods.problems {
        eprintln!("kubehash: not a usable pod: {p}");
    }
    Ok((pods, node_version))
}

/// The old kubelet F of the proof rule: `--from`, else the version the Node reports.
pub fn old_kubelet(
    from: Option<&str>,
    node_version: Option<KubeletVersion>,
) -> Result<Option<KubeletVersion>> {
    Ok(optional_version("--from", from)?.or(node_version))
}

/// This node's static pod manifests (`--manifests`); files that are not pods are said on stderr.
pub fn manifests(source: &PodSource) -> Result<Manifests> {
    let m = Manifests::read(&source.manifests)?;
    for p in &m.problems {
        eprintln!("kubehash: not a static pod manifest: {p}");
    }
    Ok(m)
}

/// This node's name: `--node-name`, else the hostname (the kubelet's default); `None` when
/// neither can be had (static pods are then matched by name prefix).
pub fn node_name(source: &PodSource) -> Option<String> {
    source.node_name.clone().or_else(|| hostname().ok())
}

/// This machine's hostname (the kubelet's default node name).
fn hostname() -> Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the hostname; pass --node-name")?;
    Ok(name.trim().to_string())
}
