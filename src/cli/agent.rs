//! `kubehash agent`: the DaemonSet's node agent.

use anyhow::{bail, Context, Result};

use crate::agent::metrics::{bind_metrics, serve_metrics, Metrics};
use crate::agent::reconcile::{Agent, AgentConfig};
use crate::cli::args::AgentArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::support::{healthz_flag, init_logs, stop_requested};
use crate::rewrite::restart::RestartCommand;
use crate::source::names::{dns_subdomain_name, qualified_name};

/// The shortest `--poll-ms`: the agent reads the Node, the kubelet's process and healthz that
/// often, and after an API error asks again after it.
const MIN_POLL_MS: u64 = 100;

/// Flags an agent could start with and never act on, or act on too often: refused before it
/// reads or binds anything.
fn check(a: &AgentArgs) -> Result<()> {
    if let Err(why) = dns_subdomain_name(&a.node_name) {
        bail!(
            "--node-name {:?} (NODE_NAME) names no Node: {why}; the DaemonSet sets it from \
             the downward API's spec.nodeName",
            a.node_name
        );
    }
    if let Err(why) = qualified_name(&a.annotation) {
        bail!(
            "--annotation {:?} is not an annotation key the API server takes, so no Node could \
             ever carry it: {why}",
            a.annotation
        );
    }
    healthz_flag(&a.kubelet_healthz)?;
    if let Some(cmd) = &a.restart_containerd {
        RestartCommand::check_shell(cmd).context("--restart-containerd")?;
    }
    if a.poll_ms < MIN_POLL_MS {
        bail!(
            "--poll-ms {} would ask the API server and the kubelet without pause: give at least \
             {MIN_POLL_MS}",
            a.poll_ms
        );
    }
    if a.restart_timeout_seconds == 0 {
        bail!("--restart-timeout-seconds 0 would kill --restart-containerd as it starts: give 1 or more");
    }
    if a.stuck_seconds == 0 {
        bail!("--stuck-seconds 0 would make /healthz fail between two turns of the loop: give 1 or more");
    }
    // As the bind will resolve it: an address, or a host name, and a port.
    std::net::ToSocketAddrs::to_socket_addrs(&a.listen.as_str())
        .map(|_| ())
        .with_context(|| {
            format!(
                "--listen {:?}: expected an address and port, such as 127.0.0.1:9808",
                a.listen
            )
        })
}

pub fn run(a: AgentArgs) -> Result<ExitStatus> {
    check(&a)?;
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
