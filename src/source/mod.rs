//! Where pods, nodes and manifests come from: files and streams (JSON, JSON Lines, YAML), the
//! API server, and the node's static-pod manifests directory.

pub mod cluster; // the API server: kubeconfig, pods, nodes
pub mod input; // the one Go-faithful JSON/YAML stream reader
pub mod manifests;
pub mod pods; // pod splitting, container slots, node versions, workloads // static-pod manifests as the kubelet reads them
