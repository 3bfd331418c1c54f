//! `kubehash audit snapshot|compare`: proof of which containers an upgrade restarted.

use anyhow::{Context, Result};

use crate::analysis::audit::{compare, snapshot, snapshot_document, Fate, Snapshot};
use crate::analysis::plan::ContainerPlan;
use crate::cli::args::{AuditCommand, AuditCompareArgs, AuditSnapshotArgs};
use crate::cli::exit::ExitStatus;
use crate::cli::output::AuditReport;
use crate::cli::support::{print, runtime};
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

fn run_snapshot(a: AuditSnapshotArgs) -> Result<ExitStatus> {
    let snap = take(&a.cri)?;
    crate::rewrite::durable::write_json(&a.out, &snapshot_document(&snap))?;
    eprintln!(
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
    let before: Snapshot = serde_json::from_slice(&read(&a.snapshot)?)
        .with_context(|| format!("{}: not a kubehash audit snapshot", a.snapshot.display()))?;
    let plan: Option<Vec<ContainerPlan>> = match &a.plan {
        None => None,
        Some(p) => {
            let v: serde_json::Value = serde_json::from_slice(&read(p)?)
                .with_context(|| format!("{}: not JSON", p.display()))?;
            Some(
                serde_json::from_value(v["containers"].clone()).with_context(|| {
                    format!("{}: not a kubehash node plan (-o json)", p.display())
                })?,
            )
        }
    };
    let after = take(&a.cri)?;
    let audited = compare(&before, &after, plan.as_deref());
    let changed = audited
        .iter()
        .any(|c| matches!(c.fate, Fate::Restarted | Fate::Recreated));
    print(a.output, &AuditReport { audited })?;
    Ok(if changed {
        ExitStatus::Restarts
    } else {
        ExitStatus::Success
    })
}
