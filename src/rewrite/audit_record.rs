//! What an upgrade leaves for its audit: the containers that ran before the new kubelet could
//! act, and the plan kubehash made for them, beside the upgrade's journal (`node apply`, the
//! agent) or the shim's state (`kubehash shim`). `audit compare` and the agent read them back.

use std::path::{Path, PathBuf};

use crate::analysis::audit::{snapshot, snapshot_document};
use crate::analysis::plan::ContainerPlan;
use crate::error::Result;
use crate::rewrite::durable::write_json;
use crate::runtime::cri::Cri;

/// Beside `file` (a journal, `1.30-to-1.31.jsonl`, or the shim's state, `shim-state.json`): the
/// containers that ran and the plan (`1.30-to-1.31.before.json`, `1.30-to-1.31.plan.json`).
pub fn audit_files(file: &Path) -> (PathBuf, PathBuf) {
    (
        file.with_extension("before.json"),
        file.with_extension("plan.json"),
    )
}

/// Records every container running now and `plans` beside `file` ([`audit_files`]); returns
/// the snapshot's path. Whatever fails, no snapshot is left: one without its moment's plan, or
/// half written, would be read as evidence.
pub async fn record(cri: &mut Cri, file: &Path, plans: &[ContainerPlan]) -> Result<PathBuf> {
    let (before, plan) = audit_files(file);
    let recorded = match snapshot(cri).await {
        Ok(s) => write_json(&before, &snapshot_document(&s))
            .and_then(|()| write_json(&plan, &serde_json::json!({ "containers": plans }))),
        Err(e) => Err(e),
    };
    match recorded {
        Ok(()) => Ok(before),
        Err(e) => {
            forget(file);
            Err(e)
        }
    }
}

/// Removes what was recorded beside `file`, so that nothing stale is taken for this upgrade's.
pub fn forget(file: &Path) {
    let (before, plan) = audit_files(file);
    let _ = std::fs::remove_file(before);
    let _ = std::fs::remove_file(plan);
}
