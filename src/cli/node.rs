//! `kubehash node plan|apply|verify|rollback`: this node's containers over CRI, and the write
//! path with its journal.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::analysis::plan::{node_specs, plan_node, RuntimePods, Verdict};
use crate::analysis::preflight::{check_node, worst, Status};
use crate::cli::args::{
    FailOn, NodeApplyArgs, NodeCommand, NodeJournalArgs, NodePreflightArgs, NodeRollbackArgs,
    PodSource,
};
use crate::cli::exit::ExitStatus;
use crate::cli::node_pods;
use crate::cli::output::{Checks, Format, NodePlan, Preflight};
use crate::cli::support::{
    init_logs, no_claims, optional_version, print, runtime, version_flag, warn_upgrade,
};
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::apply::{apply, Target};
use crate::rewrite::gate::Open;
use crate::rewrite::journal;
use crate::rewrite::outcome::{Applied, CheckOutcome};
use crate::rewrite::restart::{reloaded, RestartCommand};
use crate::rewrite::rollback::records_restored;
use crate::rewrite::rollback::rollback;
use crate::rewrite::verify::{verify, Expect};
use crate::runtime::containerd::Store;
use crate::runtime::cri::Cri;
use crate::source::host::HostPaths;

/// How long `--restart-containerd` may take.
const RESTART_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

pub fn run(command: NodeCommand) -> Result<ExitStatus> {
    match command {
        NodeCommand::Plan(a) => {
            let to = version_flag("--to", &a.to)?;
            let from = optional_version("--from", a.from.as_deref())?;
            print_plan(
                &a.cri,
                to,
                from,
                &a.source,
                &a.host.paths(),
                a.output,
                false,
            )
        }
        NodeCommand::Preflight(a) => run_preflight(a),
        NodeCommand::Apply(a) => run_apply(a),
        NodeCommand::Verify(a) => run_verify(a),
        NodeCommand::Rollback(a) => run_rollback(a),
    }
}

/// `node plan` and `scan --cri`: this node's containers joined to their pods, a verdict each.
pub fn print_plan(
    endpoint: &str,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
    source: &PodSource,
    host: &HostPaths,
    output: Format,
    fail_on_restart: bool,
) -> Result<ExitStatus> {
    let rt = runtime()?;
    let (mut cri, running) = rt.block_on(runtime_pods(endpoint))?;
    let mut inputs = rt.block_on(node_pods::read(source, Some(&running), true))?;
    let mut pods = std::mem::take(&mut inputs.index);
    let from = from.or(inputs.version);
    if let Some(f) = from {
        warn_upgrade(f, to);
    }
    let manifests = node_pods::manifests(source, Some(host))?;
    let node = node_pods::node_name(source);
    let (view, version, checks) = rt.block_on(async {
        let view = plan_node(&mut cri, &mut pods, &manifests, node.as_deref(), to, from).await?;
        let checks = preflight(&mut cri, host, &inputs, to, from).await?;
        Ok::<_, crate::Error>((view, cri.runtime_version().clone(), checks))
    })?;
    let report = NodePlan {
        to,
        from,
        runtime: (
            version.runtime_name,
            version.runtime_version,
            version.runtime_api_version,
        ),
        checks,
        statics: view.statics,
        containers: view.containers,
    };
    print(output, &report)?;
    let any = |v: Verdict| report.containers.iter().any(|p| p.verdict == v);
    // What kubelet T restarts even after `node apply`: a spec change, a container kubehash
    // cannot prove (no --from: every changed hash), a static pod it cannot pin, and one whose
    // manifest T refuses.
    let restarts = [
        Verdict::WillRestart,
        Verdict::Unprovable,
        Verdict::Recreated,
        Verdict::Killed,
    ];
    if fail_on_restart && restarts.into_iter().any(any) {
        return Ok(ExitStatus::Restarts);
    }
    Ok(ExitStatus::unless_incomplete(!any(Verdict::Error)))
}

/// The runtime at `endpoint`, and the pods it has containers of: only their specs are kept from
/// the pods read (a container made after this is planned without a spec, and left alone).
async fn runtime_pods(endpoint: &str) -> crate::Result<(Cri, RuntimePods)> {
    let mut cri = Cri::connect(endpoint).await?;
    let containers = cri.list_containers().await?;
    Ok((cri, RuntimePods::of(&containers)))
}

/// The preflight checks for this node; problems reading its files are said on stderr.
async fn preflight(
    cri: &mut Cri,
    host: &HostPaths,
    inputs: &node_pods::NodeInputs,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
) -> crate::Result<Vec<crate::analysis::preflight::Check>> {
    let (checks, problems) = check_node(
        cri,
        host,
        inputs.pods.clone(),
        inputs.node.clone(),
        inputs.claims.clone(),
        to,
        from,
    )
    .await?;
    for p in problems {
        say!("kubehash: preflight: {p}");
    }
    Ok(checks)
}

/// `node preflight`: the checks alone.
fn run_preflight(a: NodePreflightArgs) -> Result<ExitStatus> {
    let to = version_flag("--to", &a.to)?;
    let rt = runtime()?;
    // The checks read the pods scheduled here, not the index: it keeps no spec.
    let inputs = rt.block_on(node_pods::read(
        &a.source,
        Some(&RuntimePods::default()),
        true,
    ))?;
    let from = optional_version("--from", a.from.as_deref())?.or(inputs.version);
    let checks = rt.block_on(async {
        let mut cri = Cri::connect(&a.cri).await?;
        preflight(&mut cri, &a.host.paths(), &inputs, to, from).await
    })?;
    let worst = worst(&checks);
    print(a.output, &Preflight { to, checks })?;
    let limit = match a.fail_on {
        FailOn::Fail => Status::Fail,
        FailOn::Warn => Status::Warn,
        FailOn::Unknown => Status::Unknown,
    };
    Ok(if worst >= limit {
        ExitStatus::Restarts
    } else {
        ExitStatus::Success
    })
}

fn run_apply(a: NodeApplyArgs) -> Result<ExitStatus> {
    no_claims(&a.plan.source, "node apply")?;
    init_logs(a.log_format);
    let to = version_flag("--to", &a.plan.to)?;
    let rt = runtime()?;
    // Checked before anything is read from the runtime, and again before every write.
    let restart = restart_command(&a.restart_containerd)?;
    let mut guard = a.kubelet.guard()?;
    let (mut cri, running) = rt.block_on(runtime_pods(&a.plan.cri))?;
    let inputs = rt.block_on(node_pods::read(&a.plan.source, Some(&running), false))?;
    let (mut pods, node_version) = (inputs.index, inputs.version);
    let node = node_pods::node_name(&a.plan.source);
    let from = node_pods::old_kubelet(a.plan.from.as_deref(), node_version)?;
    if let Some(f) = from {
        warn_upgrade(f, to);
    }
    let journal = a.journal.clone().unwrap_or_else(|| {
        journal::path_for(
            &a.journal_dir,
            from.map(|f| f.to_string()).as_deref(),
            &to.to_string(),
        )
    });
    let manifests = node_pods::manifests(&a.plan.source, Some(&a.plan.host.paths()))?;
    let report = rt.block_on(async {
        let store = Store::connect(&a.containerd).await?;
        let target = Target {
            pods: &mut pods,
            manifests: &manifests,
            node: node.as_deref(),
            to,
            from,
            journal: &journal,
            pins_only: a.pins_only,
        };
        if a.pins_only {
            // Pinning keeps the UID the running kubelet derives: no kubelet check.
            apply(&mut cri, &store, target, &mut Open).await
        } else {
            apply(&mut cri, &store, target, &mut guard).await
        }
    })?;
    print(a.plan.output, &report)?;
    let journal = &report.journal;
    let written = report.count(Applied::Written);
    if report.stopped.is_some() {
        // The table says why apply stopped; containerd is not restarted while the evidence is gone.
    } else if let Some(restart) = restart {
        let (cri, ctrd, new) = (&a.plan.cri, &a.containerd, format!("kubelet {to}"));
        let check = restart_and_check(
            &restart,
            Path::new(journal),
            cri,
            ctrd,
            Expect::Written,
            &new,
        );
        if !rt.block_on(check)? {
            return Ok(ExitStatus::Incomplete);
        }
    } else if written > 0 && !a.pins_only {
        say!(
            "kubehash: next: restart containerd (e.g. systemctl restart containerd) so that CRI reports the new hashes, \
             run `kubehash node verify --journal {journal}`, then start kubelet {to}, and once it has settled, \
             `kubehash audit compare --journal {journal}` says what restarted. To undo: kubehash node rollback --journal {journal}"
        );
    }
    Ok(ExitStatus::unless_incomplete(
        report.count(Applied::Error) == 0 && report.stopped.is_none(),
    ))
}

fn run_verify(a: NodeJournalArgs) -> Result<ExitStatus> {
    init_logs(a.log_format);
    let (journal, contents) = journal_of(&a)?;
    // After a rollback, what must be there is the originals, for the old kubelet.
    let expect = Expect::of(&contents);
    if expect == Expect::Original {
        say!(
            "kubehash: journal {} was rolled back after its last apply: checking that each record holds its original and CRI reports the original hash",
            journal.display()
        );
    }
    let rt = runtime()?;
    let outcomes = rt.block_on(async {
        let store = Store::connect(&a.containerd).await?;
        let mut cri = Cri::connect(&a.cri).await?;
        verify(&mut cri, &store, contents, expect).await
    })?;
    let done = match expect {
        Expect::Written => "verified",
        Expect::Original => "verified as rolled back",
    };
    print_checks(&a, done, outcomes)
}

fn run_rollback(r: NodeRollbackArgs) -> Result<ExitStatus> {
    no_claims(&r.source, "node rollback")?;
    let a = &r.journal;
    init_logs(a.log_format);
    let restart = restart_command(&r.restart_containerd)?;
    let mut guard = a.kubelet.guard()?;
    let (journal, contents) = journal_of(a)?;
    let rt = runtime()?;
    let specs = match r.source.given() {
        true => Some(rt.block_on(async {
            let (mut cri, running) = runtime_pods(&a.cri).await?;
            let mut pods = node_pods::read(&r.source, Some(&running), false)
                .await?
                .index;
            let manifests = node_pods::manifests(&r.source, None)?;
            let node = node_pods::node_name(&r.source);
            Ok::<_, anyhow::Error>(
                node_specs(&mut cri, &mut pods, &manifests, node.as_deref()).await?,
            )
        })?),
        false => None,
    };
    let outcomes = rt.block_on(async {
        let store = Store::connect(&a.containerd).await?;
        rollback(&store, &journal, contents, &mut guard, specs.as_ref()).await
    })?;
    // containerd reports what it loaded at its last start: the restored records only after
    // the next one.
    let restored = records_restored(&outcomes) > 0;
    let status = print_checks(a, "restored or already original", outcomes)?;
    match (restored, restart) {
        (false, _) => {}
        (true, Some(restart)) => {
            let (cri, ctrd, old) = (&a.cri, &a.containerd, "the old kubelet");
            if !rt.block_on(restart_and_check(
                &restart,
                &journal,
                cri,
                ctrd,
                Expect::Original,
                old,
            ))? {
                return Ok(ExitStatus::Incomplete);
            }
        }
        (true, None) => {
            let journal = journal.display();
            say!(
                "kubehash: next: restart containerd (e.g. systemctl restart containerd) so that CRI reports the original hashes, \
                 run `kubehash node verify --journal {journal}`, then start the old kubelet; once it has settled, \
                 `kubehash audit compare --journal {journal}` says what restarted"
            )
        }
    }
    Ok(status)
}

/// `--restart-containerd`: through systemd alone, `sh -c COMMAND` with a value.
fn restart_command(flag: &Option<Option<String>>) -> Result<Option<RestartCommand>> {
    Ok(match flag {
        None => None,
        Some(None) => Some(RestartCommand::systemd("containerd")?),
        Some(Some(cmd)) => {
            RestartCommand::check_shell(cmd).context("--restart-containerd=COMMAND")?;
            Some(RestartCommand::shell(cmd))
        }
    })
}

/// Restarts containerd after apply or rollback wrote to `journal`, checks which of its
/// containers CRI reports as `expect` names, on the runtime at `cri` / `containerd` (a restart
/// command can exit 0 and restart nothing), and says so with the next step. False when some are
/// not reported so: `kubelet` must not start yet.
async fn restart_and_check(
    restart: &RestartCommand,
    journal: &Path,
    cri: &str,
    containerd: &str,
    expect: Expect,
    kubelet: &str,
) -> Result<bool> {
    let at = journal.display();
    restart
        .run(RESTART_TIMEOUT)
        .await
        .with_context(|| format!("journal {at}"))?;
    let (hash, whose) = match expect {
        Expect::Written => ("the new hash", "rewritten containers"),
        Expect::Original => ("the original hash", "containers of the journal"),
    };
    let connect = || async { Ok((Cri::connect(cri).await?, Store::connect(containerd).await?)) };
    let r = reloaded(connect, journal, expect).await.with_context(|| {
        format!(
            "containerd was restarted, but whether CRI reports {hash} of the {whose} could not be checked: run kubehash node verify --journal {at} before {kubelet} starts"
        )
    })?;
    if r.unseen.is_empty() {
        let seen = match r.containers {
            0 => format!("the journal holds no {whose}"),
            n => format!("CRI reports {hash} of all {n} {whose}"),
        };
        say!(
            "kubehash: containerd restarted; {seen}. Now start {kubelet}, \
             and once it has settled: kubehash audit compare --journal {at}"
        );
        return Ok(true);
    }
    let undo = match expect {
        Expect::Written => format!(" To undo: kubehash node rollback --journal {at}"),
        Expect::Original => String::new(),
    };
    say!(
        "kubehash: containerd was restarted, but CRI reports {hash} of only {} of {} {whose} (not {}): \
         do not start {kubelet} yet, or it restarts them. Restart containerd, then run kubehash node verify --journal {at}.{undo}",
        r.seen(),
        r.containers,
        r.unseen_named()
    );
    Ok(false)
}

/// The journal named, or the latest; one that does not validate stops the command before the
/// runtime is asked anything.
fn journal_of(a: &NodeJournalArgs) -> Result<(PathBuf, journal::Contents)> {
    Ok(journal::named_or_latest(
        a.journal.as_deref(),
        &a.journal_dir,
    )?)
}

fn print_checks(
    a: &NodeJournalArgs,
    done: &'static str,
    outcomes: Vec<CheckOutcome>,
) -> Result<ExitStatus> {
    let all_ok = outcomes.iter().all(|r| r.ok);
    print(a.output, &Checks { done, outcomes })?;
    Ok(ExitStatus::unless_incomplete(all_ok))
}
