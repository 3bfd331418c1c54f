//! `kubehash agent`: the DaemonSet's node agent.

use anyhow::{Context, Result};

use crate::agent::metrics::{bind_metrics, serve_metrics, Metrics};
use crate::agent::reconcile::{Agent, AgentConfig};
use crate::cli::args::AgentArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::support::{init_logs, stop_requested};

pub fn run(a: AgentArgs) -> Result<ExitStatus> {
    init_logs(a.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let cfg = AgentConfig {
        node_name: a.node_name,
        kubeconfig: a.kubeconfig,
        cri: a.cri,
        containerd: a.containerd,
        state_dir: a.state_dir,
        kubelet_healthz: a.kubelet_healthz,
        kubelet_binary: a.kubelet_binary,
        manifests: a.manifests,
        host: a.host.paths(),
        restart_timeout: std::time::Duration::from_secs(a.restart_timeout_seconds),
        stuck_after: std::time::Duration::from_secs(a.stuck_seconds),
        audit_after: std::time::Duration::from_secs(a.audit_after_seconds),
        grace: std::time::Duration::from_secs(a.grace_seconds),
        poll: std::time::Duration::from_millis(a.poll_ms),
        annotation: a.annotation,
        restart_containerd: a.restart_containerd,
        dry_run: a.dry_run,
    };
    rt.block_on(async move {
        let metrics = Metrics::default();
        // A metrics address that cannot be bound is an error, not a silent agent without health.
        let agent = Agent::new(cfg, metrics.clone()).await?;
        let bound = bind_metrics(&a.listen).await?;
        let listener = tokio::spawn(serve_metrics(bound, metrics));
        agent.run(stop_requested()).await?;
        listener.abort();
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitStatus::Success)
}
