//! What the write path did, per container: typed, serialized in kebab-case for `-o json`.

use serde::Serialize;

use crate::analysis::plan::Verdict;

/// What `apply` did to one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Applied {
    /// The new hash was journaled, written and read back.
    Written,
    /// The record already held the new hash (an earlier run wrote it).
    AlreadyRewritten,
    /// The plan did not prove a rewrite; nothing was written.
    LeftAlone,
    /// The gate closed before this write.
    Stopped,
    /// The write was refused or failed; the record is as it was.
    Error,
}

impl Applied {
    pub fn as_str(self) -> &'static str {
        match self {
            Applied::Written => "written",
            Applied::AlreadyRewritten => "already-rewritten",
            Applied::LeftAlone => "left-alone",
            Applied::Stopped => "stopped",
            Applied::Error => "error",
        }
    }
}

/// One container in an `apply` run.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyOutcome {
    pub container_id: String,
    pub pod: String,
    pub container: String,
    pub verdict: Verdict,
    pub result: Applied,
    pub detail: String,
}

/// The result of an `apply` run.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub to: String,
    /// The runtime, as the journal names it (`containerd 1.7.24`).
    pub runtime: String,
    pub journal: String,
    /// Static pods' manifests pinned (or not).
    pub pins: Vec<PinOutcome>,
    pub outcomes: Vec<ApplyOutcome>,
    /// Why apply stopped before writing everything it planned (the gate's reason).
    pub stopped: Option<String>,
    /// Why nothing was recorded for the audit beside the journal (`None`: recorded, or pins
    /// only). Said on stderr as it happens.
    #[serde(skip)]
    pub unaudited: Option<String>,
}

impl ApplyReport {
    pub fn count(&self, result: Applied) -> usize {
        self.outcomes.iter().filter(|o| o.result == result).count()
    }
}

/// What `apply` did to one static pod's manifest.
#[derive(Debug, Clone, Serialize)]
pub struct PinOutcome {
    pub path: String,
    pub uid: String,
    pub result: Applied,
    pub detail: String,
}

/// One line of `verify` or `rollback`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckOutcome {
    /// Empty for a manifest.
    pub container_id: String,
    /// The static pod manifest this line is about, if it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    pub name: String,
    pub ok: bool,
    pub detail: String,
}
