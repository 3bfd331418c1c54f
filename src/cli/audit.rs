//! `kubehash audit snapshot|compare`: proof of which containers an upgrade restarted.

use anyhow::{anyhow, bail, Context, Result};

use crate::analysis::audit::{
    compare, how_they_ended, plan_of, snapshot, snapshot_document, Fate, Snapshot,
};
use crate::analysis::plan::ContainerPlan;
use crate::cli::args::{AuditCommand, AuditCompareArgs, AuditSnapshotArgs};
use crate::cli::exit::ExitStatus;
use crate::cli::output::AuditReport;
use crate::cli::support::{print, runtime};
use crate::rewrite::audit_record::audit_files;
use crate::rewrite::journal;
use crate::runtime::cri::Cri;

pub fn run(command: AuditCommand) -> Result<ExitStatus> {
    match command {
        AuditCommand::Snapshot(a) => run_snapshot(a),
        AuditCommand::Compare(a) => run_compare(a),
    }
}

fn take(endpoint: &str) -> Result<Snapshot> {
    let rt = runtime()?;
    Ok(rt.block_on(async {
        let mut cri = Cri::connect(endpoint).await?;
        snapshot(&mut cri).await
    })?)
}

/// `--out` may replace an earlier snapshot only: anything else there (a journal, a plan, a
/// manifest given by mistake) is someone's, and is refused before the runtime is asked.
fn replaceable(out: &std::path::Path) -> Result<()> {
    let refuse = |what: &str| {
        anyhow!(
            "--out {}: {what}; kubehash replaces only an earlier audit snapshot: give another path",
            out.display()
        )
    };
    match std::fs::symlink_metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(refuse(&format!("cannot look at it ({e})"))),
        Ok(m) if !m.file_type().is_file() => Err(refuse("it is there and not a regular file")),
        Ok(_) => {
            let bytes = std::fs::read(out).map_err(|e| refuse(&format!("cannot read it ({e})")))?;
            // As compare reads one (snapshots of kubehash 0.1 have no kind).
            match serde_json::from_slice::<Snapshot>(&bytes) {
                Ok(_) => Ok(()),
                Err(_) => Err(refuse(
                    "it holds something other than a kubehash audit snapshot",
                )),
            }
        }
    }
}

fn run_snapshot(a: AuditSnapshotArgs) -> Result<ExitStatus> {
    replaceable(&a.out)?;
    let snap = take(&a.cri)?;
    crate::rewrite::durable::write_json(&a.out, &snapshot_document(&snap))?;
    say!(
        "kubehash: {} running containers recorded in {}; after the upgrade: kubehash audit compare --snapshot {}",
        snap.containers.len(),
        a.out.display(),
        a.out.display()
    );
    Ok(ExitStatus::Success)
}

fn run_compare(a: AuditCompareArgs) -> Result<ExitStatus> {
    let read = |p: &std::path::Path| -> Result<Vec<u8>> {
        std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))
    };
    let (snapshot_file, plan_file) = match &a.snapshot {
        Some(s) => (s.clone(), a.plan.clone()),
        None => {
            let (beside, what, who, rolled_back) = match &a.shim_state {
                Some(s) => (
                    s.clone(),
                    "shim state",
                    "the shim records one when it plans before serving, unless the upgrade had begun, and removes it when the old kubelet connects through it",
                    false,
                ),
                None => {
                    let (j, contents) =
                        journal::named_or_latest(a.journal.as_deref(), &a.journal_dir).map_err(
                            |e| match &e {
                                // No journal in the directory: an audit has two other sources.
                                crate::Error::Input { source_name, .. }
                                    if a.journal.is_none()
                                        && *source_name == a.journal_dir.display().to_string() =>
                                {
                                    anyhow!("{e}, or --snapshot (from kubehash audit snapshot), or --shim-state")
                                }
                                _ => e.into(),
                            },
                        )?;
                    // After a rollback the old kubelet is back: apply's plan was for the other.
                    let rolled_back = contents.rolled_back();
                    (
                        j,
                        "journal",
                        "node apply records one when it begins, unless the upgrade had begun",
                        rolled_back,
                    )
                }
            };
            let (before, plan) = audit_files(&beside);
            if !before.exists() {
                bail!(
                    "{what} {}: no snapshot beside it ({}); {who} (its log says why; kubehash before this recorded none): pass --snapshot",
                    beside.display(),
                    before.display()
                );
            }
            if rolled_back && a.plan.is_none() {
                say!(
                    "kubehash: journal {} was rolled back after its last apply, so its plan predicts nothing about the kubelet that runs: fates without predictions",
                    beside.display()
                );
            }
            let plan = plan.exists().then_some(plan).filter(|_| !rolled_back);
            (before, a.plan.clone().or(plan))
        }
    };
    let before: Snapshot = serde_json::from_slice(&read(&snapshot_file)?)
        .with_context(|| format!("{}: not a kubehash audit snapshot", snapshot_file.display()))?;
    let plan: Option<Vec<ContainerPlan>> =
        match &plan_file {
            None => None,
            Some(p) => {
                let v: serde_json::Value = serde_json::from_slice(&read(p)?)
                    .with_context(|| format!("{}: not JSON", p.display()))?;
                Some(plan_of(&v).with_context(|| {
                    format!("{}: not a kubehash node plan (-o json)", p.display())
                })?)
            }
        };
    let audited = runtime()?.block_on(async {
        let mut cri = Cri::connect(&a.cri).await?;
        let after = snapshot(&mut cri).await?;
        let mut audited = compare(&before, &after, plan.as_deref());
        how_they_ended(&mut cri, &mut audited).await;
        Ok::<_, crate::error::Error>(audited)
    })?;
    // A container gone is no proof of a restart-free upgrade either: the new kubelet may have
    // killed it and failed to start its successor.
    let changed = audited.iter().any(|c| c.fate != Fate::Kept);
    print(a.output, &AuditReport { audited })?;
    Ok(if changed {
        ExitStatus::Restarts
    } else {
        ExitStatus::Success
    })
}
