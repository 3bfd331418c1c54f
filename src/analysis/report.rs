//! A scan's report: totals, per node, per workload, and every container. What grows with the
//! input stays in bounded memory: the containers are kept in a [`Details`] and the objects not
//! scanned in a [`Spill`], which go to disk past a size, and the totals per workload in
//! [`Totals`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::plan::Verdict;
use crate::analysis::preflight::Check;
use crate::analysis::scan::{ContainerImpact, Impact};
use crate::analysis::spill::{Details, Spill};
use crate::analysis::totals::{Add, Totals};
use crate::kubelet::version::KubeletVersion;

/// The `apiVersion` of kubehash's machine-readable reports and records.
pub const API_VERSION: &str = "kubehash.dev/v1alpha1";

/// Counts for a group of containers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Counts {
    pub containers: u64,
    pub kept: u64,
    pub restart: u64,
    pub not_running: u64,
    pub recreated: u64,
    pub error: u64,
}

impl Counts {
    pub fn add(&mut self, i: Impact) {
        self.containers += 1;
        match i {
            Impact::Kept => self.kept += 1,
            Impact::Restart => self.restart += 1,
            Impact::NotRunning => self.not_running += 1,
            Impact::Recreated => self.recreated += 1,
            Impact::Error => self.error += 1,
        }
    }
}

impl Add for Counts {
    fn add_part(&mut self, part: Counts) {
        self.containers += part.containers;
        self.kept += part.kept;
        self.restart += part.restart;
        self.not_running += part.not_running;
        self.recreated += part.recreated;
        self.error += part.error;
    }
}

/// A scan's result: totals, groupings, and every container.
#[derive(Debug, Default, Serialize)]
pub struct ScanReport {
    pub to: String,
    /// What was scanned: a file, or an API server (and the kubeconfig context).
    pub source: String,
    pub total: Counts,
    /// Node → its kubelet version (or the problem with it) and counts.
    pub nodes: BTreeMap<String, NodeSummary>,
    /// `namespace/Kind/name` → counts.
    pub workloads: Totals<Counts>,
    /// Objects that could not be read as pods, with the reason, in input order.
    pub problems: Spill<String>,
    /// Every container, in input order (last, so that JSON output can stream it).
    pub containers: Details,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeSummary {
    pub from: Option<String>,
    /// Why the node's containers could not be assessed (its kubelet version is unknown or not
    /// one kubehash knows). Not `error`: that key is the count of containers in error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    #[serde(flatten)]
    pub counts: Counts,
    /// Restarts kubehash avoids (verdict `rewrite`: the agent, `node apply` or the shim keep
    /// these containers).
    pub avoidable: u64,
    /// What upgrading the node takes (set when the scan ends).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<NodeUpgrade>,
    /// The preflight checks a scan can make from Node objects and pods (admission, volumes, eviction).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Check>,
}

/// What upgrading one node takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeUpgrade {
    /// No container restarts, no pod is recreated, no check fails.
    NothingRestarts,
    /// Every restart is a hash-format change kubehash avoids, and every recreated pod a static
    /// pod whose UID `node apply` pins (as `node plan` confirms on the node).
    InPlace,
    /// Some containers really change, a check fails, or something could not be decided.
    DrainNeeded,
}

impl NodeSummary {
    /// What upgrading this node takes, from its counts and checks.
    pub fn decide_upgrade(&self) -> NodeUpgrade {
        let c = &self.counts;
        let failing = self
            .checks
            .iter()
            .any(|c| c.status == crate::analysis::preflight::Status::Fail);
        if c.error > 0 || self.problem.is_some() || failing || c.restart > self.avoidable {
            NodeUpgrade::DrainNeeded
        } else if c.restart > 0 || c.recreated > 0 {
            NodeUpgrade::InPlace
        } else {
            NodeUpgrade::NothingRestarts
        }
    }
}

impl ScanReport {
    pub fn new(to: KubeletVersion) -> Self {
        ScanReport {
            to: to.to_string(),
            ..ScanReport::default()
        }
    }

    pub fn add(&mut self, c: ContainerImpact) -> std::io::Result<()> {
        self.total.add(c.outcome.impact);
        let node = self.nodes.entry(c.node.clone()).or_default();
        node.counts.add(c.outcome.impact);
        if c.outcome.impact == Impact::Restart && c.outcome.verdict == Verdict::Rewrite {
            node.avoidable += 1;
        }
        if node.from.is_none() {
            node.from = c.from.clone();
        }
        if c.from.is_none() && node.problem.is_none() {
            node.problem = c.outcome.error.clone();
        }
        self.workloads
            .entry(format!("{}/{}", c.namespace, c.workload))?
            .add(c.outcome.impact);
        self.containers.push(c)
    }
}
