//! The node commands' reports: `node plan`, `node apply`, `node verify` / `node rollback` and
//! `node preflight`.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::analysis::plan::ContainerPlan;
use crate::analysis::preflight::{worst, Check, Status};
use crate::analysis::statics::{PinAction, StaticPod};
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::outcome::{Applied, ApplyReport, CheckOutcome};

use super::table::{paint, write_columns};
use super::{to_value, Render};

/// `node plan` and `scan --cri`: one node's containers, a verdict each.
pub struct NodePlan {
    pub to: KubeletVersion,
    pub from: Option<KubeletVersion>,
    /// What CRI's Version call reports: name, version, API version.
    pub runtime: (String, String, String),
    /// The preflight checks.
    pub checks: Vec<Check>,
    /// Static pod manifests and what apply does with them.
    pub statics: Vec<StaticPod>,
    pub containers: Vec<ContainerPlan>,
}

impl NodePlan {
    fn heading(&self) -> String {
        let (name, version, api) = &self.runtime;
        format!(
            "Plan for kubelet {} on this node ({name} {version}, CRI {api})",
            self.to
        )
    }
}

impl Render for NodePlan {
    fn kind(&self) -> Option<&'static str> {
        Some("NodePlan")
    }

    fn document(&self) -> Value {
        let counts: Map<String, Value> = crate::analysis::plan::plan_counts(&self.containers)
            .into_iter()
            .map(|(k, n)| (k.to_string(), n.into()))
            .collect();
        let (name, version, api) = &self.runtime;
        json!({
            "to": self.to.to_string(),
            "from": self.from.map(|f| f.to_string()),
            "runtime": {"name": name, "version": version, "api_version": api},
            "counts": counts,
            "in_place": worst(&self.checks) < Status::Fail,
            "checks": to_value(&self.checks),
            "static_pods": to_value(&self.statics),
            "containers": to_value(&self.containers),
        })
    }

    /// One line of counts, then one row per container.
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let counts: Vec<String> = crate::analysis::plan::plan_counts(&self.containers)
            .iter()
            .map(|(v, n)| format!("{n} {v}"))
            .collect();
        writeln!(out, "{}: {}.", self.heading(), counts.join(", "))?;
        let stale = self
            .containers
            .iter()
            .filter(|p| p.runs_another_spec.is_some())
            .count();
        if stale > 0 {
            let (s, its, it) = if stale == 1 {
                ("container runs", "its", "it")
            } else {
                ("containers run", "their", "them")
            };
            writeln!(
                out,
                "{stale} unchanged {s} another spec than {its} current one, by the runtime's record: kubelet {} keeps {it} as created (see WHY).",
                self.to
            )?;
        }
        writeln!(out)?;
        write_checks(&self.checks, out)?;
        writeln!(out)?;
        if !self.statics.is_empty() {
            let mut rows = vec![["STATIC POD", "MANIFEST", "UID", "ACTION"]
                .map(String::from)
                .to_vec()];
            for p in &self.statics {
                rows.push(vec![
                    format!("{}/{}", p.namespace, p.name),
                    p.path.clone(),
                    if p.uid.is_empty() { "-".into() } else { p.uid.clone() },
                    match &p.action {
                        PinAction::AlreadyPinned => "already pinned".into(),
                        PinAction::Pin => {
                            "pin metadata.uid (harmless to the running kubelet: it derives this very UID)"
                                .into()
                        }
                        PinAction::Refused(why) => format!("left alone: {why}"),
                        PinAction::NotAdmitted(why) => format!("left alone: {why}"),
                    },
                ]);
            }
            write_columns(&rows, out)?;
            writeln!(out)?;
        }
        let mut rows = vec![[
            "CONTAINER",
            "POD",
            "NAME",
            "STATE",
            "STORED",
            "NEW",
            "VERDICT",
            "PROVENANCE",
            "WHY",
        ]
        .map(String::from)
        .to_vec()];
        for p in &self.containers {
            rows.push(vec![
                p.id.chars().take(13).collect(),
                format!("{}/{}", p.namespace, p.pod),
                p.container.clone(),
                p.state.clone(),
                p.stored_hash.clone().unwrap_or_else(|| "-".into()),
                p.new_hash.clone().unwrap_or_else(|| "-".into()),
                p.verdict.as_str().into(),
                if p.provenance.is_empty() {
                    "-".into()
                } else {
                    p.provenance.join(",")
                },
                p.reason.clone(),
            ]);
        }
        write_columns(&rows, out)
    }
}

impl Render for ApplyReport {
    fn document(&self) -> Value {
        to_value(self)
    }
    fn kind(&self) -> Option<&'static str> {
        Some("ApplyReport")
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        if !self.pins.is_empty() {
            let mut rows = vec![["MANIFEST", "UID", "RESULT", "DETAIL"]
                .map(String::from)
                .to_vec()];
            for p in &self.pins {
                rows.push(vec![
                    p.path.clone(),
                    p.uid.clone(),
                    p.result.as_str().into(),
                    p.detail.clone(),
                ]);
            }
            write_columns(&rows, out)?;
            writeln!(out)?;
        }
        let mut rows = vec![["CONTAINER", "POD", "NAME", "VERDICT", "RESULT", "DETAIL"]
            .map(String::from)
            .to_vec()];
        for o in &self.outcomes {
            rows.push(vec![
                o.container_id.chars().take(13).collect(),
                o.pod.clone(),
                o.container.clone(),
                o.verdict.as_str().into(),
                o.result.as_str().into(),
                o.detail.clone(),
            ]);
        }
        write_columns(&rows, out)?;
        writeln!(out)?;
        writeln!(
            out,
            "Summary: {} written, {} already rewritten, {} left alone, {} errors. Journal: {}",
            self.count(Applied::Written),
            self.count(Applied::AlreadyRewritten),
            self.count(Applied::LeftAlone),
            self.count(Applied::Error),
            self.journal
        )?;
        if let Some(why) = &self.stopped {
            writeln!(
                out,
                "Stopped before {} planned writes: {why}",
                self.count(Applied::Stopped)
            )?;
        }
        Ok(())
    }
}

/// `node verify` / `node rollback`: one line per journaled container.
pub struct Checks {
    /// `verified`, `verified as rolled back`, or `restored or already original`.
    pub done: &'static str,
    pub outcomes: Vec<CheckOutcome>,
}

impl Render for Checks {
    fn document(&self) -> Value {
        to_value(&self.outcomes)
    }

    fn lines(&self) -> Vec<Value> {
        self.outcomes.iter().map(to_value).collect()
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut rows = vec![["CONTAINER", "NAME", "OK", "DETAIL"]
            .map(String::from)
            .to_vec()];
        for r in &self.outcomes {
            rows.push(vec![
                r.container_id.chars().take(13).collect(),
                r.name.clone(),
                if r.ok { "yes".into() } else { "NO".into() },
                r.detail.clone(),
            ]);
        }
        write_columns(&rows, out)?;
        writeln!(out)?;
        let bad = self.outcomes.iter().filter(|r| !r.ok).count();
        writeln!(
            out,
            "Summary: {} of {} containers {}.",
            self.outcomes.len() - bad,
            self.outcomes.len(),
            self.done
        )
    }
}

/// `node preflight`: the checks for an upgrade to `to`.
pub struct Preflight {
    pub to: KubeletVersion,
    pub checks: Vec<Check>,
}

impl Render for Preflight {
    fn kind(&self) -> Option<&'static str> {
        Some("Preflight")
    }

    fn document(&self) -> Value {
        json!({
            "to": self.to.to_string(),
            "in_place": worst(&self.checks) < Status::Fail,
            "checks": to_value(&self.checks),
        })
    }

    fn lines(&self) -> Vec<Value> {
        self.checks.iter().map(to_value).collect()
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "Preflight for kubelet {}:", self.to)?;
        write_checks(&self.checks, out)
    }
}

/// One row per check, what to do under it, and the conclusion.
fn write_checks(checks: &[Check], out: &mut dyn Write) -> io::Result<()> {
    let mut rows = vec![["CHECK", "RESULT", "EVIDENCE"].map(String::from).to_vec()];
    for c in checks {
        rows.push(vec![
            c.name.to_string(),
            paint(
                format!("{:?}", c.status).to_lowercase(),
                match c.status {
                    Status::Pass => 2,
                    Status::Fail => 1,
                    _ => 3,
                },
            ),
            c.evidence.clone(),
        ]);
    }
    write_columns(&rows, out)?;
    for c in checks.iter().filter(|c| !c.action.is_empty()) {
        writeln!(out, "  {}: {}", c.name, c.action)?;
    }
    let verdict = if worst(checks) >= Status::Fail {
        "drain needed: a check fails (a hash rewrite alone would not keep these pods)"
    } else {
        "in place: no check fails"
    };
    writeln!(out, "Preflight: {verdict}.")
}
