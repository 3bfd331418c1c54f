//! The node agent run by the DaemonSet: watches its kubelet and acts only on positive evidence.

pub mod kubelet_health; // the local kubelet: process, /healthz, binary version
pub mod reconcile; // phases and the reconcile step
