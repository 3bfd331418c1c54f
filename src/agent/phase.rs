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
        /// The audit of the rollback still to do (what the old kubelet, back, kept), as in
        /// `Done`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audit: Option<PendingAudit>,
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

    /// The audit this phase waits for, if any.
    pub fn pending_audit(&self) -> Option<&PendingAudit> {
        match self {
            Phase::Done { audit, .. } | Phase::RolledBack { audit, .. } => audit.as_ref(),
            _ => None,
        }
    }

    /// This phase with its audit done, what the audit found (`note`) added to what it says.
    pub fn audited(self, note: Option<&str>) -> Phase {
        let with = |text: String| match note {
            Some(n) => format!("{text}; {n}"),
            None => text,
        };
        match self {
            Phase::Done { to, detail, .. } => Phase::Done {
                to,
                detail: with(detail),
                audit: None,
            },
            Phase::RolledBack { to, reason, .. } => Phase::RolledBack {
                to,
                reason: with(reason),
                audit: None,
            },
            other => other,
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
    crate::rewrite::durable::make_dir(dir, 0o777).map_err(|e| Error::Io {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A state file an agent wrote before rollbacks were audited still loads, with nothing due.
    #[test]
    fn a_rolled_back_phase_saved_without_an_audit_loads() {
        let old = r#"{"phase":"rolled-back","to":"1.31","reason":"kubelet 1.30 came back"}"#;
        let p: Phase = serde_json::from_str(old).unwrap();
        assert_eq!(p.name(), "rolled-back");
        assert_eq!(p.pending_audit(), None);
    }

    /// Audited once: the note is added and nothing stays due, in both phases that audit.
    #[test]
    fn an_audited_phase_keeps_what_it_said_and_owes_nothing() {
        let due = Some(PendingAudit {
            after: 1,
            journal: "j".into(),
        });
        for p in [
            Phase::Done {
                to: "1.31".into(),
                detail: "verified".into(),
                audit: due.clone(),
            },
            Phase::RolledBack {
                to: "1.31".into(),
                reason: "rolled back".into(),
                audit: due.clone(),
            },
        ] {
            assert!(p.pending_audit().is_some());
            let done = p.audited(Some("2 kept"));
            assert_eq!(done.pending_audit(), None);
            let said = serde_json::to_value(&done).unwrap();
            let text = said["detail"].as_str().or(said["reason"].as_str()).unwrap();
            assert!(text.ends_with("; 2 kept"), "{said}");
        }
    }
}
