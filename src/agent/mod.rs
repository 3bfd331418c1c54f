//! The node agent run by the DaemonSet: watches its kubelet and acts only on positive evidence.

pub mod kubelet_health; // the local kubelet: process, /healthz, binary version
pub mod metrics; // Prometheus metrics, /metrics and /healthz
pub mod phase; // where the agent is, saved in its state directory
pub mod reconcile; // the reconcile step
