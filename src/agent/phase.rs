//! Where the agent is in an upgrade ([`Phase`]), saved in its state directory before every step
//! so that a killed agent resumes where it was, and the lock that lets one agent per node use it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where the agent is in an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "kebab-case")]
pub enum Phase {
    Idle,
    Planned {
        to: String,
        from: Option<String>,
        rewrite: usize,
        /// The kubelet's healthz answered 200 and its process was visible, since planning.
        #[serde(default)]
        seen_up: bool,
    },
    Applying {
        to: String,
        from: Option<String>,
        journal: String,
        /// The Node's last heartbeat while the old kubelet was down (unix seconds): a newer one
        /// comes from whichever kubelet started since.
        #[serde(default)]
        down_heartbeat: Option<u64>,
    },
    Applied {
        to: String,
        #[serde(default)]
        from: Option<String>,
        journal: String,
        written: usize,
        #[serde(default)]
        down_heartbeat: Option<u64>,
    },
    Done {
        to: String,
        detail: String,
        /// The audit still to do: `None` once done, or with nothing to audit against.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audit: Option<PendingAudit>,
    },
    RolledBack {
        to: String,
        reason: String,
    },
    Failed {
        to: String,
        reason: String,
    },
}

/// An upgrade to audit: at `after` (unix seconds), compare the containers that ran when apply
/// began (recorded beside `journal`) with those running once the new kubelet has settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAudit {
    pub after: u64,
    pub journal: String,
}

pub(super) const PHASES: [&str; 7] = [
    "idle",
    "planned",
    "applying",
    "applied",
    "done",
    "rolled-back",
    "failed",
];

impl Phase {
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Planned { .. } => "planned",
            Phase::Applying { .. } => "applying",
            Phase::Applied { .. } => "applied",
            Phase::Done { .. } => "done",
            Phase::RolledBack { .. } => "rolled-back",
            Phase::Failed { .. } => "failed",
        }
    }

    pub fn target(&self) -> Option<&str> {
        match self {
            Phase::Idle => None,
            Phase::Planned { to, .. }
            | Phase::Applying { to, .. }
            | Phase::Applied { to, .. }
            | Phase::Done { to, .. }
            | Phase::RolledBack { to, .. }
            | Phase::Failed { to, .. } => Some(to),
        }
    }
}

/// The file the phase is saved in.
fn state_path(dir: &Path) -> PathBuf {
    dir.join("agent-state.json")
}

/// Saves `phase` atomically (a killed agent finds the old phase or the new one, whole).
pub(super) fn save_phase(dir: &Path, phase: &Phase) -> Result<()> {
    crate::rewrite::durable::write_json(&state_path(dir), phase)
}

/// The saved phase (Idle when there is none).
pub fn load_phase(dir: &Path) -> Result<Phase> {
    match std::fs::read(state_path(dir)) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| Error::Input {
            source_name: state_path(dir).display().to_string(),
            reason: format!("unreadable agent state: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Phase::Idle),
        Err(e) => Err(Error::Io {
            source_name: state_path(dir).display().to_string(),
            source: e,
        }),
    }
}

/// Takes the state directory's lock, made if missing: one agent per node.
pub(super) fn lock_state_dir(dir: &Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        source_name: dir.display().to_string(),
        source: e,
    })?;
    let path = dir.join("agent.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::Io {
            source_name: path.display().to_string(),
            source: e,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Input {
            source_name: path.display().to_string(),
            reason: "another kubehash agent runs on this node (it holds this lock); \
                     one agent per node"
                .into(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::Io {
            source_name: path.display().to_string(),
            source: e,
        }),
    }
}
