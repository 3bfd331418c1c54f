//! `kubehash shim`: the CRI proxy that shows the new kubelet translated hashes.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::agent::kubelet_health::healthz_answers;
use crate::analysis::plan::{
    join_static_pods, made_for_the_target, overrule_by_the_runtime, plan, ContainerPlan,
    RuntimePods,
};
use crate::cli::args::ShimArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::node_pods;
use crate::cli::output::{write_shim_status, ShimStatus};
use crate::cli::support::{
    healthz_flag, init_logs, no_claims, optional_version, runtime, stdout, stop_requested,
};
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::audit_record;
use crate::runtime::cri::{socket_path, Cri};
use crate::shim::proxy::{stale_socket_at, ShimState};
use crate::source::kubelet_binary::{kubelet_processes, process_kubelet_version};

/// Flags a shim could not serve with, or would serve nobody with: refused before it plans,
/// records or binds anything. Returns the socket's mode.
fn check(a: &ShimArgs) -> Result<u32> {
    let mode = u32::from_str_radix(&a.socket_mode, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .with_context(|| {
            format!(
                "--socket-mode {:?}: expected permission bits in octal, 0 to 777, such as 600",
                a.socket_mode
            )
        })?;
    for (flag, value) in [
        ("--max-connections", a.max_connections as u64),
        ("--handshake-timeout-seconds", a.handshake_timeout_seconds),
        ("--idle-timeout-seconds", a.idle_timeout_seconds),
        ("--plan-retry-seconds", a.plan_retry_seconds),
    ] {
        if value == 0 {
            bail!("{flag} 0 would leave the kubelet without a runtime: give 1 or more");
        }
    }
    healthz_flag(&a.kubelet_healthz)?;
    let listen = socket_path(&a.listen)?;
    if Path::new(&listen) == Path::new(&socket_path(&a.runtime_endpoint)?) {
        bail!(
            "--listen and --runtime-endpoint are one socket, {listen}: the shim listens where the \
             kubelet connects and forwards to the runtime's own socket"
        );
    }
    // Checked again when it binds; here, before it plans or records anything.
    stale_socket_at(&listen)?;
    Ok(mode)
}

pub fn run(a: ShimArgs) -> Result<ExitStatus> {
    no_claims(&a.source, "the shim")?;
    init_logs(a.log_format);
    let rt = runtime()?;
    let existing = ShimState::load(&a.state)?;
    if a.status {
        let state = existing.with_context(|| format!("no shim state at {}", a.state.display()))?;
        let listed = rt.block_on(async {
            let mut cri = Cri::connect(&a.runtime_endpoint).await?;
            cri.list_containers().await
        })?;
        let live = state
            .translations
            .iter()
            .filter(|(id, t)| {
                listed.iter().any(|c| {
                    &c.id == *id
                        && c.annotations.get(crate::runtime::cri::keys::HASH)
                            == Some(&t.stored_hash)
                })
            })
            .count();
        let status = ShimStatus {
            live,
            translated: state.translations.len(),
            to: state.to.clone(),
            audited_by: audit_record::audit_files(&a.state)
                .0
                .exists()
                .then(|| a.state.display().to_string()),
        };
        write_shim_status(&status, &mut stdout())?;
        return Ok(ExitStatus::Success);
    }
    let mode = check(&a)?;
    let to = optional_version("--to", a.to.as_deref())?;
    let limits = crate::shim::proxy::Limits {
        max_connections: a.max_connections,
        handshake_timeout: std::time::Duration::from_secs(a.handshake_timeout_seconds),
        idle_timeout: std::time::Duration::from_secs(a.idle_timeout_seconds),
    };
    let existing = match existing {
        Some(mut s) => {
            if let Some(t) = to {
                if s.to != t.to_string() {
                    bail!(
                        "the shim state {} was made for kubelet {}, not {t}; remove it to plan again",
                        a.state.display(),
                        s.to
                    );
                }
            }
            // A saved plan is proven again under today's rule; what fails is passed through.
            // What the runtime recorded is asked too, and a static pod's container is proved
            // against its manifest (the kubelet runs the file), before any translation is
            // shown: where the runtime does not answer yet (the node starting, containerd
            // restarting), the shim waits for it before serving. The kubelet can do nothing
            // without the runtime meanwhile, so nothing is lost by the wait.
            let mut dropped = s.recheck();
            let answered = match s.translations.is_empty() {
                true => None,
                false => match rt.block_on(Cri::connect(&a.runtime_endpoint)) {
                    Ok(cri) => Some(cri),
                    Err(e) => {
                        say!("kubehash: shim state: the runtime does not answer ({e}); its saved translations are checked against the runtime's records and the manifests before any is shown, so the shim serves once the runtime answers");
                        match rt.block_on(runtime_answering(&a.runtime_endpoint)) {
                            Some(cri) => Some(cri),
                            None => return Ok(ExitStatus::Success),
                        }
                    }
                },
            };
            if let Some(mut cri) = answered {
                dropped.extend(rt.block_on(s.recheck_with_the_runtime(&mut cri)));
                let manifests = node_pods::manifests(&a.source, None)?;
                let node = node_pods::node_name(&a.source);
                dropped.extend(rt.block_on(s.recheck_with_the_manifests(
                    &mut cri,
                    &manifests,
                    node.as_deref(),
                )));
            }
            for (id, why) in dropped {
                say!("kubehash: shim state: not translating container {id}: {why}");
            }
            Some(s)
        }
        None => {
            let to = to.context("--to VERSION is needed to plan (there is no shim state yet)")?;
            if a.source.pods.is_none() && !a.source.from_cluster() {
                bail!("to plan, give --pods PATH or --cluster");
            }
            // Plan before serving when that works, so the kubelet never sees an untranslated
            // moment; otherwise serve pass-through and keep trying (below).
            match rt.block_on(plan_shim(&a, to)) {
                Ok(mut planned) => {
                    planned.state.save(&a.state)?;
                    // Nothing has been served yet: what runs now is what ran before the new
                    // kubelet could see a translation, the moment an audit compares with,
                    // unless that kubelet already runs straight on the runtime.
                    let running = rt.block_on(target_kubelet_running(to, &a.kubelet_healthz));
                    let begun = running
                        .map(|found| {
                            format!("a kubelet that may be {to} runs ({found}) and may already have restarted containers")
                        })
                        .or_else(|| carries_the_targets_hash(&planned.plans, planned.from, to));
                    match begun {
                        None => rt.block_on(record_for_audit(&mut planned, &a.state)),
                        Some(why) => {
                            audit_record::forget(&a.state);
                            say!(
                                "kubehash: {why}, so what runs now is no record of before the upgrade: nothing recorded for the audit"
                            );
                        }
                    }
                    Some(planned.state)
                }
                Err(e) => {
                    say!("kubehash: no shim plan yet (passing everything through): {e:#}");
                    // A plan made later, after the kubelet may have acted on untranslated
                    // hashes, is no moment to compare with; nor is an earlier plan's record.
                    audit_record::forget(&a.state);
                    say!(
                        "kubehash: the shim serves before its plan, so it records nothing for the audit; to audit this upgrade, take `kubehash audit snapshot` before the new kubelet starts"
                    );
                    None
                }
            }
        }
    };
    let planned = existing;
    let shown = crate::shim::proxy::ShownPlan::new(planned.as_ref());
    // Without a plan yet (first start), serve pure pass-through and plan until it works: the
    // kubelet must never be left without a runtime because the API server or the runtime is
    // not reachable yet.
    let planner = {
        let shown = shown.clone();
        let a = &a;
        async move {
            let Some(to) = to.filter(|_| planned.is_none()) else {
                return std::future::pending::<()>().await;
            };
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(a.plan_retry_seconds)).await;
                match plan_shim(a, to).await {
                    Ok(Planned { state, .. }) => {
                        match state.save(&a.state) {
                            Ok(()) => {}
                            Err(e) => say!("kubehash: cannot save the shim state: {e}"),
                        }
                        say!(
                            "kubehash: shim plan made: {} containers translated for kubelet {to}",
                            state.translations.len()
                        );
                        shown.set(&state);
                        return std::future::pending::<()>().await;
                    }
                    Err(e) => {
                        say!("kubehash: no shim plan yet (passing everything through): {e:#}");
                    }
                }
            }
        }
    };
    rt.block_on(async {
        tokio::select! {
            r = crate::shim::proxy::serve(&a.listen, &a.runtime_endpoint, shown.clone(), mode, limits, Some(&a.state), stop_requested()) => r,
            () = planner => Ok(()),
        }
    })?;
    Ok(ExitStatus::Success)
}

/// The runtime at `endpoint` once it answers (tried every 200 ms), or `None` when the shim is
/// told to stop first.
async fn runtime_answering(endpoint: &str) -> Option<Cri> {
    let answering = async {
        loop {
            match Cri::connect(endpoint).await {
                Ok(cri) => return cri,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
        }
    };
    tokio::select! {
        cri = answering => Some(cri),
        () = stop_requested() => None,
    }
}

/// A plan made: the shim's state, the plan it came from, the old kubelet it was made for, and
/// the runtime it was made with.
struct Planned {
    state: ShimState,
    plans: Vec<ContainerPlan>,
    from: Option<KubeletVersion>,
    cri: Cri,
}

/// The shim's plan: this node's containers and pods, proven for `from` → `to`.
async fn plan_shim(a: &ShimArgs, to: KubeletVersion) -> Result<Planned> {
    let mut cri = Cri::connect(&a.runtime_endpoint).await?;
    let containers = cri.list_containers().await?;
    // Only the specs of the pods these containers belong to are kept.
    let inputs = node_pods::read(&a.source, Some(&RuntimePods::of(&containers)), false).await?;
    let (mut pods, node_version) = (inputs.index, inputs.version);
    let from = node_pods::old_kubelet(a.from.as_deref(), node_version)?;
    let manifests = node_pods::manifests(&a.source, None)?;
    // A static pod runs what its manifest says, whatever its mirror pod still holds.
    let node = node_pods::node_name(&a.source);
    join_static_pods(&mut cri, &mut pods, &manifests, node.as_deref(), false).await?;
    let mut plans = plan(&containers, &pods, &manifests, to, from);
    overrule_by_the_runtime(&mut cri, &mut plans, &pods, to).await;
    let state = ShimState::from_plans(&plans, &pods, to, from);
    Ok(Planned {
        state,
        plans,
        from,
        cri,
    })
}

/// A kubelet that may be `to`: a process whose binary says `to` or will not say, or, with no
/// kubelet process in sight, whatever answers on the kubelet's `healthz` address (a kubelet in
/// a PID namespace the shim does not see). It runs straight on the runtime (the shim does not
/// serve yet), so it may have restarted containers on their stored hashes already. The old
/// kubelet, or none, is what the audit's record needs.
async fn target_kubelet_running(to: KubeletVersion, healthz: &str) -> Option<String> {
    let kubelets = kubelet_processes();
    for (pid, name) in &kubelets {
        match process_kubelet_version(*pid).await {
            None => {}
            Some(Ok(v)) if v.minor() != to.minor() => {}
            Some(Ok(v)) => return Some(format!("{name}, pid {pid}, kubelet {v}")),
            Some(Err(e)) => return Some(format!("{name}, pid {pid}, of no known version: {e}")),
        }
    }
    if !kubelets.is_empty() {
        return None;
    }
    let found = healthz_answers(healthz).await?;
    Some(format!(
        "{found}, and no kubelet process in sight says which"
    ))
}

/// A container that carries kubelet `to`'s hash of its spec where kubelet `from`'s differs
/// ([`made_for_the_target`]); the shim rewrites nothing, so none is its own. Without `from`,
/// nothing says so.
fn carries_the_targets_hash(
    plans: &[ContainerPlan],
    from: Option<KubeletVersion>,
    to: KubeletVersion,
) -> Option<String> {
    let from = from?;
    let p = made_for_the_target(plans, from, |_| false)?;
    Some(format!(
        "container {}/{}/{} carries kubelet {to}'s hash of its spec, which kubelet {from}'s is not: a kubelet hashing as {to} does made it (or kubehash node apply rewrote it), so the upgrade has begun",
        p.namespace, p.pod, p.container
    ))
}

/// Records what runs and the plan beside the shim's state, for `audit compare --shim-state`.
/// A record for people, never a condition of serving: what cannot be recorded is logged.
async fn record_for_audit(planned: &mut Planned, state: &Path) {
    match audit_record::record(&mut planned.cri, state, &planned.plans).await {
        Ok(before) => say!(
            "kubehash: the running containers recorded for the audit in {}; after the upgrade: kubehash audit compare --shim-state {}",
            before.display(),
            state.display()
        ),
        Err(e) => say!(
            "kubehash: cannot record the running containers ({e}); audit this upgrade with a snapshot of your own"
        ),
    }
}
