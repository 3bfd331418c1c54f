//! `kubehash agent`: the node agent as a long-running DaemonSet pod that acts by itself at the
//! right moment of a kubelet binary swap — after the old kubelet stopped, before the new one runs —
//! and only on positive evidence.
//!
//! ```text
//! Idle ──(Node annotated kubehash.dev/target-kubelet-version=T, seen through a watch)──▶ Planned
//!   plan: CRI + this node's pods; published as a Node Event, metrics and a plan file;
//!   the pod specs are saved so that apply never needs the API server for them.
//! Planned ──(kubelet seen up, then down for the grace period, new binary in place)──▶ Applying
//!   apply from the saved specs (re-validated against CRI and containerd), journal on disk,
//!   the evidence checked again before every write; then restart containerd (with a timeout).
//! Applying ──▶ Applied ──(kubelet up again, and the Node's status posted since)──▶
//!   kubeletVersion T   → verify → Done (KubehashVerified) or Failed (KubehashVerifyFailed)
//!   any other version  → roll back at once → RolledBack (KubehashRolledBack)
//! Done ──(--audit-after later)──▶ Done, audited: the containers that ran when apply began
//!   (recorded by apply beside the journal) against what runs now and the plan (KubehashAudited)
//! RolledBack ──(--audit-after later)──▶ RolledBack, audited: the same, without the plan's
//!   predictions (they were for the kubelet that did not stay); a restart is a warning
//! ```
//!
//! **Evidence.** "The kubelet is down" means both: its process is gone (found by name in `/proc`,
//! so the DaemonSet runs with `hostPID`) and its healthz, read with a real HTTP client, refuses
//! connections — and both were *seen up* before, while planned. An agent that cannot see the
//! kubelet's process, a healthz on another port, a slow answer or a protocol error never count as
//! down. "The new kubelet is in place" means the kubelet binary (`--kubelet-binary`, mounted
//! read-only) reports the target version. "Still wanted" means the Node's annotation, read again,
//! names the planned version. All three are checked before the first write and before every
//! other one; the moment one fails, apply stops. "The kubelet came back" is judged by the version
//! the kubelet itself posts to the Node after it came up, never by hash checks alone.
//!
//! The phase is saved (atomically) before every step, so a killed agent resumes where it was.
//! One agent runs per node (a lock in the state directory). Events that could not be published
//! (an API outage) are kept and sent again. `/healthz` answers 503 when the loop has not turned
//! for `--stuck-seconds`. With `--dry-run` it publishes what it would do and writes nothing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::{error, info, warn};

use crate::agent::kubelet_health::{healthz, kubelet_process, Health};
use crate::agent::metrics::Metrics;
use crate::agent::phase::{load_phase, lock_state_dir, save_phase, PendingAudit, Phase};
use crate::analysis::audit::{
    compare, how_they_ended, plan_of, report_document, snapshot, Audited, Fate, Snapshot, Tally,
};
use crate::analysis::plan::{node_specs, plan_node, PodIndex, Verdict};
use crate::analysis::preflight::removed_sources;
use crate::error::Result;
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::apply::{apply, Target};
use crate::rewrite::audit_record::audit_files;
use crate::rewrite::gate::{Open, Unsafe, WriteGate};
use crate::rewrite::outcome::Applied;
use crate::rewrite::restart::{reloaded, Reloaded, RestartCommand};
use crate::rewrite::rollback::{records_restored, rollback};
use crate::rewrite::verify::{verify, Expect};
use crate::runtime::containerd::Store;
use crate::runtime::cri::Cri;
use crate::source::cluster::Cluster;
use crate::source::kubelet_binary::binary_version;

/// The Node annotation upgrade tooling sets.
pub const TARGET_ANNOTATION: &str = "kubehash.dev/target-kubelet-version";

/// How the agent is set up.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node_name: String,
    pub kubeconfig: Option<PathBuf>,
    pub cri: String,
    pub containerd: String,
    pub state_dir: PathBuf,
    pub kubelet_healthz: String,
    /// The kubelet binary on the host (mounted read-only), whose `--version` must be the target.
    pub kubelet_binary: PathBuf,
    /// The static pod manifests (mounted read-only): a static pod is rewritten only where its
    /// manifest pins the UID it runs under.
    pub manifests: PathBuf,
    /// Where preflight reads the node's cgroups and kubelet files (mounted from the host).
    pub host: crate::source::host::HostPaths,
    pub grace: Duration,
    pub poll: Duration,
    pub annotation: String,
    /// Command that restarts containerd after apply (e.g. `systemctl restart containerd`).
    pub restart_containerd: Option<String>,
    /// How long that command may take before it is killed and the agent fails.
    pub restart_timeout: Duration,
    /// `/healthz` answers 503 when the loop has not turned for this long.
    pub stuck_after: Duration,
    /// How long after verifying the new kubelet the agent audits the upgrade: the time that
    /// kubelet is given to restart what it restarts.
    pub audit_after: Duration,
    pub dry_run: bool,
}

/// How long one attempt to publish an Event may take.
const EVENT_TIMEOUT: Duration = Duration::from_secs(2);

/// One Event to publish on the Node.
#[derive(Debug, Clone)]
struct PendingEvent {
    reason: String,
    message: String,
    warning: bool,
}

/// What the agent saw of the kubelet in one step.
#[derive(Debug, Clone)]
struct Seen {
    health: Health,
    process: Option<String>,
}

impl Seen {
    fn up(&self) -> bool {
        self.health == Health::Up && self.process.is_some()
    }

    fn down(&self) -> bool {
        self.health == Health::Refused && self.process.is_none()
    }
}

/// The agent.
pub struct Agent {
    cfg: AgentConfig,
    cluster: Cluster,
    pub metrics: Metrics,
    phase: Phase,
    down_since: Option<Instant>,
    /// When the kubelet's healthz was last seen coming up (for the Node's status to be fresh).
    up_since: Option<std::time::SystemTime>,
    node_uid: String,
    /// The newest Node object, kept by a watch.
    node: Arc<Mutex<Option<Value>>>,
    watch: Option<tokio::task::JoinHandle<()>>,
    /// Events not yet published (the API server was unreachable), oldest first.
    pending: std::collections::VecDeque<PendingEvent>,
    /// Warnings already published for the current phase, so they are not repeated every step.
    said: std::collections::BTreeSet<String>,
    /// Held while the agent runs: one agent per node.
    _lock: std::fs::File,
}

/// Parses a Node's `status.nodeInfo.kubeletVersion`.
fn reported_version(node: &Value) -> Option<KubeletVersion> {
    node.pointer("/status/nodeInfo/kubeletVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.parse().ok())
}

/// The target version a Node's `annotation` names: `Ok(None)` when there is none.
fn wanted_target(
    node: &Value,
    annotation: &str,
) -> std::result::Result<Option<KubeletVersion>, String> {
    match node
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(annotation))
        .and_then(Value::as_str)
    {
        None => Ok(None),
        Some(t) => t
            .parse()
            .map(Some)
            .map_err(|e| format!("annotation {annotation}: {e}")),
    }
}

/// [`heartbeat`] in unix seconds.
fn heartbeat_secs(node: &Value) -> Option<u64> {
    heartbeat(node)?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// The Ready condition's `lastHeartbeatTime`: the kubelet posts it, with its own clock.
fn heartbeat(node: &Value) -> Option<std::time::SystemTime> {
    let conditions = node.pointer("/status/conditions")?.as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    let t: k8s_openapi::jiff::Timestamp = ready["lastHeartbeatTime"].as_str()?.parse().ok()?;
    let secs = u64::try_from(t.as_second()).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

impl Agent {
    pub async fn new(cfg: AgentConfig, metrics: Metrics) -> Result<Agent> {
        let lock = lock_state_dir(&cfg.state_dir)?;
        let cluster = Cluster::connect(cfg.kubeconfig.as_deref(), None).await?;
        let phase = load_phase(&cfg.state_dir)?;
        metrics.set_phase(&phase);
        metrics.set_stuck_after(cfg.stuck_after.as_secs());
        info!(node = %cfg.node_name, phase = phase.name(), "agent starting");
        let node = Arc::new(Mutex::new(None));
        let watch = {
            let (cluster, name, node, pause) = (
                cluster.clone(),
                cfg.node_name.clone(),
                node.clone(),
                cfg.poll,
            );
            tokio::spawn(async move { cluster.watch_node(&name, node, pause).await })
        };
        Ok(Agent {
            cfg,
            cluster,
            metrics,
            phase,
            down_since: None,
            up_since: None,
            node_uid: String::new(),
            node,
            watch: Some(watch),
            pending: Default::default(),
            said: Default::default(),
            _lock: lock,
        })
    }

    fn set(&mut self, p: Phase) -> Result<()> {
        save_phase(&self.cfg.state_dir, &p)?;
        self.metrics.set_phase(&p);
        info!(phase = p.name(), "phase");
        if p.name() != self.phase.name() || p.target() != self.phase.target() {
            self.said.clear();
        }
        self.phase = p;
        Ok(())
    }

    /// Queues an Event and publishes every queued one it can, oldest first.
    async fn event(&mut self, reason: &str, message: &str, warning: bool) {
        if warning {
            warn!(reason, message, "event");
        } else {
            info!(reason, message, "event");
        }
        self.pending.push_back(PendingEvent {
            reason: reason.into(),
            message: message.into(),
            warning,
        });
        self.flush_events().await;
    }

    /// An Event published once per phase (a condition that holds for many steps).
    async fn event_once(&mut self, reason: &str, message: &str, warning: bool) -> Result<()> {
        if self.said.insert(format!("{reason}: {message}")) {
            self.event(reason, message, warning).await;
        }
        Ok(())
    }

    async fn flush_events(&mut self) {
        while let Some(e) = self.pending.front().cloned() {
            // Never hold the state machine up for long: an Event not published in time stays
            // queued and is sent again at the next step.
            let send = self.cluster.node_event(
                &self.cfg.node_name,
                &self.node_uid,
                &e.reason,
                &e.message,
                e.warning,
            );
            match tokio::time::timeout(EVENT_TIMEOUT, send).await {
                Ok(Ok(())) => {
                    self.pending.pop_front();
                }
                Ok(Err(err)) => {
                    warn!(error = %err, queued = self.pending.len(), "could not publish events; will send them again");
                    return;
                }
                Err(_) => {
                    warn!(
                        queued = self.pending.len(),
                        "publishing an event timed out; will send it again"
                    );
                    return;
                }
            }
        }
    }

    fn pods_file(&self, to: &str) -> PathBuf {
        self.cfg.state_dir.join(format!("pods-{to}.json"))
    }

    /// The upgrade to `to`, audited once its kubelet has had `audit_after` to restart what it
    /// restarts: every container that ran when apply began (recorded beside the journal) against
    /// what runs now, and against the plan's prediction for each (`analysis::audit`). Written to
    /// `audit-<to>.json`, counted in the metrics, and published as `KubehashAudited`, a warning
    /// when any container's fate is not the one predicted. After a rollback (`phase`
    /// `RolledBack`) the old kubelet is back: the plan predicts nothing about it, so each fate is
    /// reported without a prediction (`audit-<to>-rolled-back.json`), a warning when any
    /// container restarted or was recreated. The runtime not answering is tried again at the
    /// next step.
    async fn audit(&mut self, phase: Phase, journal: &str) -> Result<()> {
        let rolled_back = matches!(phase, Phase::RolledBack { .. });
        let to = phase.target().unwrap_or_default().to_string();
        let (before_file, plan_file) = audit_files(Path::new(journal));
        let before: Option<Snapshot> = std::fs::read(&before_file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(before) = before else {
            warn!(file = %before_file.display(), "the containers recorded when apply began are unreadable; not auditing");
            return self.set(phase.audited(None));
        };
        let plan: Option<Vec<crate::analysis::plan::ContainerPlan>> = std::fs::read(&plan_file)
            .ok()
            .filter(|_| !rolled_back)
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| plan_of(&v).ok());
        let mut cri = None;
        let now = match Cri::connect(&self.cfg.cri).await {
            Ok(c) => snapshot(cri.insert(c)).await,
            Err(e) => Err(e),
        };
        let now = match now {
            Ok(n) => n,
            Err(e) => {
                let msg = format!(
                    "cannot list the running containers to audit the upgrade ({e}); will try again"
                );
                return self.event_once("KubehashAuditWaiting", &msg, true).await;
            }
        };
        let mut audited = compare(&before, &now, plan.as_deref());
        if let Some(cri) = cri.as_mut() {
            how_they_ended(cri, &mut audited).await;
        }
        let tally = Tally::of(&audited);
        let file = self.cfg.state_dir.join(if rolled_back {
            format!("audit-{to}-rolled-back.json")
        } else {
            format!("audit-{to}.json")
        });
        crate::rewrite::durable::write_json(&file, &report_document(&audited))?;
        self.metrics.set_audit(&tally);
        // The first few not as predicted (after a rollback: not kept, a container gone too), by
        // name, so that `kubectl describe node` says which.
        const NAMED: usize = 5;
        let unexpected: Vec<&Audited> = audited
            .iter()
            .filter(|a| {
                if rolled_back {
                    a.fate != Fate::Kept
                } else {
                    a.as_predicted == Some(false)
                }
            })
            .collect();
        let named = unexpected
            .iter()
            .take(NAMED)
            .map(|a| {
                let what = format!(
                    "{}/{}/{} {}",
                    a.before.namespace,
                    a.before.pod,
                    a.before.container,
                    a.fate.as_str()
                );
                match (rolled_back, a.predicted) {
                    (true, _) => what,
                    (false, p) => format!("{what} ({})", p.map_or("-", Verdict::as_str)),
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let more = if unexpected.len() > NAMED {
            ", …"
        } else {
            ""
        };
        let said = match (rolled_back, unexpected.len(), plan.is_some()) {
            (true, 0, _) => "none restarted".to_string(),
            (true, n, _) => format!("{n} not kept: {named}{more}"),
            (false, _, false) => "no plan to check them against".to_string(),
            (false, 0, true) => "each as kubehash predicted".to_string(),
            (false, n, true) => format!("{n} not as kubehash predicted: {named}{more}"),
        };
        let after = if rolled_back {
            format!("after the rollback from kubelet {to}")
        } else {
            format!("after kubelet {to}")
        };
        let msg = format!(
            "{after}: {}; {said} (see {})",
            tally.summary(),
            file.display()
        );
        self.event("KubehashAudited", &msg, !unexpected.is_empty())
            .await;
        self.set(phase.audited(Some(&msg)))
    }

    fn watched_node(&mut self) -> Option<Value> {
        let node = self
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        if let Some(uid) = node.pointer("/metadata/uid").and_then(Value::as_str) {
            self.node_uid = uid.to_string();
        }
        Some(node)
    }

    /// The target the Node's annotation names now: `Ok(None)` when there is none.
    fn wanted(&self, node: &Value) -> std::result::Result<Option<KubeletVersion>, String> {
        wanted_target(node, &self.cfg.annotation)
    }

    async fn look(&self) -> Seen {
        Seen {
            health: healthz(&self.cfg.kubelet_healthz).await,
            process: kubelet_process(),
        }
    }

    /// One step of the state machine; the loop calls it every poll interval.
    pub async fn step(&mut self) -> Result<()> {
        self.flush_events().await;
        let seen = self.look().await;
        self.metrics.set_kubelet_up(seen.health == Health::Up);
        if seen.health == Health::Up {
            self.up_since.get_or_insert_with(std::time::SystemTime::now);
        } else {
            self.up_since = None;
        }
        match self.phase.clone() {
            phase
                if phase
                    .pending_audit()
                    .is_some_and(|p| crate::clock::now_unix() >= p.after) =>
            {
                let journal = phase.pending_audit().map(|p| p.journal.clone());
                self.audit(phase, &journal.unwrap_or_default()).await
            }
            Phase::Idle | Phase::Done { .. } | Phase::Failed { .. } | Phase::RolledBack { .. } => {
                self.look_for_target().await
            }
            Phase::Planned {
                to,
                from,
                rewrite,
                seen_up,
            } => self.planned(&seen, to, from, rewrite, seen_up).await,
            Phase::Applying {
                to,
                from,
                journal,
                down_heartbeat,
            } => {
                // Only after a restart of the agent in the middle of apply.
                if !seen.down() {
                    let reason = format!(
                        "apply for kubelet {to} was interrupted and the kubelet is not down now; not writing more"
                    );
                    self.event("KubehashStopped", &reason, true).await;
                    let written = self.journaled_writes(&journal);
                    return self.set(Phase::Applied {
                        to,
                        from,
                        journal,
                        written,
                        down_heartbeat,
                    });
                }
                info!(journal = %journal, "resuming an interrupted apply (it is idempotent)");
                self.apply(&to, from.as_deref(), &journal, down_heartbeat)
                    .await
            }
            Phase::Applied {
                to,
                from,
                journal,
                written,
                down_heartbeat,
            } => {
                self.applied(&seen, to, from, journal, written, down_heartbeat)
                    .await
            }
        }
    }

    fn journaled_writes(&self, journal: &str) -> usize {
        crate::rewrite::journal::read(Path::new(journal))
            .map(|c| c.attempt_writes().len())
            .unwrap_or(0)
    }

    async fn look_for_target(&mut self) -> Result<()> {
        let Some(node) = self.watched_node() else {
            return Ok(()); // the watch has not delivered the Node yet
        };
        let to = match self.wanted(&node) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()),
            Err(reason) => {
                let target = node
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(&self.cfg.annotation))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                if self.phase.target() != Some(target.as_str()) {
                    self.event("KubehashFailed", &reason, true).await;
                    self.set(Phase::Failed { to: target, reason })?;
                }
                return Ok(());
            }
        };
        if self.phase.target() == Some(to.to_string().as_str()) {
            return Ok(()); // already handled this target: wait for a new one
        }
        self.plan(to, reported_version(&node)).await
    }

    async fn planned(
        &mut self,
        seen: &Seen,
        to: String,
        from: Option<String>,
        rewrite: usize,
        seen_up: bool,
    ) -> Result<()> {
        let Some(node) = self.watched_node() else {
            return Ok(());
        };
        // The target is read again at every step: removed → cancelled; changed → planned anew.
        match self.wanted(&node) {
            Ok(Some(v)) if v.to_string() == to => {}
            Ok(Some(v)) => {
                let msg = format!("the target changed from {to} to {v}; planning again");
                self.event("KubehashReplanned", &msg, false).await;
                return self.plan(v, reported_version(&node)).await;
            }
            Ok(None) | Err(_) => {
                let msg = format!("the target annotation no longer names {to}; nothing to do");
                self.event("KubehashCancelled", &msg, false).await;
                let _ = std::fs::remove_file(self.pods_file(&to));
                return self.set(Phase::Idle);
            }
        }
        if seen.health == Health::Up {
            self.down_since = None;
            if seen.process.is_none() {
                let msg = format!(
                    "the kubelet's healthz ({}) answers but no kubelet process is visible: run the agent with hostPID; it will not write without seeing the kubelet stop",
                    self.cfg.kubelet_healthz
                );
                return self
                    .event_once("KubehashCannotSeeKubelet", &msg, true)
                    .await;
            }
            if reported_version(&node).is_some_and(|v| v.to_string() == to)
                && heartbeat(&node).is_some_and(|h| {
                    self.up_since
                        .is_some_and(|u| h + Duration::from_secs(1) >= u)
                })
                && seen_up
            {
                let msg = format!(
                    "kubelet {to} is already running: the binary was swapped without the kubelet being seen down for {:?}; nothing was rewritten, so the {rewrite} containers planned for a rewrite restart",
                    self.cfg.grace
                );
                self.event("KubehashMissedWindow", &msg, true).await;
                return self.set(Phase::Failed { to, reason: msg });
            }
            if !seen_up {
                return self.set(Phase::Planned {
                    to,
                    from,
                    rewrite,
                    seen_up: true,
                });
            }
            return Ok(());
        }
        if !seen.down() {
            // Unknown health, or the healthz refuses while the process still runs: no evidence.
            self.down_since = None;
            return Ok(());
        }
        if !seen_up {
            let msg = "the kubelet is down, but this agent never saw it up since planning: no evidence of which kubelet stopped; not writing".to_string();
            return self.event_once("KubehashNoEvidence", &msg, true).await;
        }
        let since = *self.down_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.cfg.grace {
            return Ok(());
        }
        match binary_version(&self.cfg.kubelet_binary).await {
            Ok(v) if v.to_string() == to => {}
            Ok(v) => {
                let msg = format!(
                    "the kubelet binary {} is {v}, not {to}: waiting for the new binary",
                    self.cfg.kubelet_binary.display()
                );
                return self
                    .event_once("KubehashWaitingForBinary", &msg, false)
                    .await;
            }
            Err(e) => {
                return self
                    .event_once("KubehashWaitingForBinary", &e.to_string(), true)
                    .await
            }
        }
        if self.cfg.dry_run {
            let msg = format!("dry run: the kubelet is down; would now rewrite the planned containers for kubelet {to}");
            self.event("KubehashDryRun", &msg, false).await;
            return self.set(Phase::Done {
                to,
                detail: msg,
                audit: None,
            });
        }
        let journal = crate::rewrite::journal::path_for(
            &self.cfg.state_dir.join("journal"),
            from.as_deref(),
            &to,
        )
        .display()
        .to_string();
        // The old kubelet's last heartbeat, read from the API server itself (not the watch,
        // which may lag) now that the kubelet has been down for the grace period: any newer one
        // is posted by a kubelet that started since, whatever the clocks say.
        let down_heartbeat = match self.cluster.node(&self.cfg.node_name).await {
            Ok(fresh) => heartbeat_secs(&fresh),
            Err(e) => {
                let msg = format!("cannot read the Node before writing ({e}); not writing");
                return self.event_once("KubehashNoEvidence", &msg, true).await;
            }
        };
        self.set(Phase::Applying {
            to: to.clone(),
            from: from.clone(),
            journal: journal.clone(),
            down_heartbeat,
        })?;
        self.apply(&to, from.as_deref(), &journal, down_heartbeat)
            .await
    }

    async fn plan(&mut self, to: KubeletVersion, from: Option<KubeletVersion>) -> Result<()> {
        let selector = format!("spec.nodeName={}", self.cfg.node_name);
        let mut pods_json = Vec::new();
        self.cluster
            .for_each_pod(Some(&selector), &mut |p| pods_json.push(p))
            .await?;
        let pods_file = self.pods_file(&to.to_string());
        crate::rewrite::durable::write_json(
            &pods_file,
            &serde_json::json!({"kind": "List", "apiVersion": "v1", "items": pods_json}),
        )?;
        let mut pods = PodIndex::default();
        for p in &pods_json {
            pods.add_pod(p.clone());
        }
        // The claims these pods mount and their volumes, got one by one as the kubelet gets them.
        let claims = match self.cluster.claims_of(&pods_json, &removed_sources()).await {
            Ok(claims) => Some(claims),
            Err(why) => {
                warn!(%why, "persistent volumes not read: the volumes check reads inline volumes only");
                None
            }
        };
        let mut cri = Cri::connect(&self.cfg.cri).await?;
        let node_object = self.watched_node();
        let (checks, _) = crate::analysis::preflight::check_node(
            &mut cri,
            &self.cfg.host,
            Some(pods_json),
            node_object,
            claims,
            to,
            from,
        )
        .await?;
        crate::rewrite::durable::write_json(
            &self.cfg.state_dir.join(format!("preflight-{to}.json")),
            &checks,
        )?;
        let manifests = self.manifests()?;
        let node = Some(self.cfg.node_name.as_str());
        let plans = plan_node(&mut cri, &mut pods, &manifests, node, to, from)
            .await?
            .containers;
        crate::rewrite::durable::write_json(
            &self.cfg.state_dir.join(format!("plan-{to}.json")),
            &plans,
        )?;
        let counts = crate::analysis::plan::plan_counts(&plans);
        for (v, n) in &counts {
            self.metrics.set_plan(v, *n);
        }
        let rewrite = plans
            .iter()
            .filter(|p| p.verdict == Verdict::Rewrite)
            .count();
        let failing: Vec<&str> = checks
            .iter()
            .filter(|c| c.status == crate::analysis::preflight::Status::Fail)
            .map(|c| c.name)
            .collect();
        // Kept as created by the kubelet, though not what their spec says (a pinned static pod's
        // manifest edited): nothing kubehash writes, something a person should know.
        let stale = plans
            .iter()
            .filter(|p| p.runs_another_spec.is_some())
            .count();
        let msg = format!(
            "plan for kubelet {to}{}: {}{}; preflight: {}",
            if self.cfg.dry_run { " (dry run)" } else { "" },
            counts
                .iter()
                .map(|(v, n)| format!("{n} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            if stale == 0 {
                String::new()
            } else {
                format!(
                    " ({stale} unchanged running another spec than their current one, by the runtime's record: the kubelet keeps them as created; see {}/plan-{to}.json)",
                    self.cfg.state_dir.display()
                )
            },
            if failing.is_empty() {
                "no check fails".to_string()
            } else {
                format!(
                    "{} fail, drain needed (see {}/preflight-{to}.json)",
                    failing.join(", "),
                    self.cfg.state_dir.display()
                )
            }
        );
        self.event("KubehashPlanned", &msg, !failing.is_empty() || stale > 0)
            .await;
        self.down_since = None;
        let seen = self.look().await;
        self.set(Phase::Planned {
            to: to.to_string(),
            from: from.map(|f| f.to_string()),
            rewrite,
            seen_up: seen.up(),
        })
    }

    async fn apply(
        &mut self,
        to: &str,
        from: Option<&str>,
        journal: &str,
        down_heartbeat: Option<u64>,
    ) -> Result<()> {
        let to_v: KubeletVersion = to.parse()?;
        let from_v: Option<KubeletVersion> = from.map(str::parse).transpose()?;
        let mut pods = self.saved_pods(to)?;
        let mut gate = Evidence {
            cfg: &self.cfg,
            cluster: &self.cluster,
            to: to_v,
        };
        let manifests = self.manifests()?;
        let target = Target {
            pods: &mut pods,
            manifests: &manifests,
            node: Some(self.cfg.node_name.as_str()),
            to: to_v,
            from: from_v,
            journal: Path::new(journal),
            pins_only: false,
        };
        let result = match self.connect().await {
            Ok((mut cri, store)) => apply(&mut cri, &store, target, &mut gate).await,
            Err(e) => Err(e),
        };
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                let reason = format!("apply did not start: {e}");
                error!(%reason);
                self.event("KubehashFailed", &reason, true).await;
                let written = self.journaled_writes(journal);
                if written > 0 {
                    // An earlier, interrupted run wrote some: the Applied phase decides what
                    // happens to them once the kubelet is back.
                    return self.set(Phase::Applied {
                        to: to.into(),
                        from: from.map(str::to_string),
                        journal: journal.into(),
                        written,
                        down_heartbeat,
                    });
                }
                return self.set(Phase::Failed {
                    to: to.into(),
                    reason,
                });
            }
        };
        let written = report.count(Applied::Written);
        self.metrics.wrote(written);
        let errors = report.count(Applied::Error);
        let total = self.journaled_writes(journal);
        let mut msg = format!(
            "rewrote {written} containers for kubelet {to} ({} already done, {errors} errors); journal {journal}",
            report.count(Applied::AlreadyRewritten)
        );
        // Without the record there is no audit later: said now, for the operator to audit by
        // hand.
        if let Some(why) = &report.unaudited {
            msg.push_str(&format!(
                "; nothing recorded for the audit, so the agent will not audit this upgrade: {why}"
            ));
        }
        let warn = errors > 0 || report.unaudited.is_some();
        self.event("KubehashApplied", &msg, warn).await;
        if let Some(why) = &report.stopped {
            let msg = format!(
                "stopped writing after {written} of {} planned rewrites: {why}; containerd is not restarted",
                written + report.count(Applied::Stopped)
            );
            self.event("KubehashStopped", &msg, true).await;
        } else if let Some(cmd) = self.cfg.restart_containerd.clone() {
            let restart = RestartCommand::shell(&cmd);
            if let Err(e) = restart.run(self.cfg.restart_timeout).await {
                let reason = format!("{e}; journal {journal}");
                self.event("KubehashFailed", &reason, true).await;
                return self.set(Phase::Failed {
                    to: to.into(),
                    reason,
                });
            }
            // Said now, while there is still time to restart containerd before kubelet T starts.
            let unseen = match self.reported(journal, Expect::Written).await {
                Ok(r) if !r.unseen.is_empty() => Some(format!(
                    "containerd was restarted, but CRI reports the new hash of only {} of {} rewritten containers (not {}): restart containerd before kubelet {to} starts, or it restarts them (kubehash node verify --journal {journal})",
                    r.seen(),
                    r.containers,
                    r.unseen_named()
                )),
                Ok(_) => None,
                Err(e) => Some(format!(
                    "containerd was restarted, but whether CRI reports the new hashes could not be checked ({e}); run kubehash node verify --journal {journal} before kubelet {to} starts"
                )),
            };
            if let Some(msg) = unseen {
                self.event("KubehashRuntimeNotReloaded", &msg, true).await;
            }
        }
        self.set(Phase::Applied {
            to: to.into(),
            from: from.map(str::to_string),
            journal: journal.into(),
            written: total,
            down_heartbeat,
        })
    }

    async fn applied(
        &mut self,
        seen: &Seen,
        to: String,
        from: Option<String>,
        journal: String,
        written: usize,
        down_heartbeat: Option<u64>,
    ) -> Result<()> {
        let Some(node) = self.watched_node() else {
            return Ok(());
        };
        let wanted = self.wanted(&node).ok().flatten().map(|v| v.to_string());
        if seen.health != Health::Up {
            if seen.down() && wanted.as_deref() != Some(to.as_str()) {
                // Still down, but the target was withdrawn or changed: undo before any kubelet
                // sees the rewritten hashes.
                let why = format!(
                    "the target annotation now says {:?}, not {to}",
                    wanted.as_deref().unwrap_or("nothing")
                );
                return self.roll_back(to, journal, written, why).await;
            }
            return Ok(());
        }
        // The kubelet is up. Which one? Only the version it posted itself after it came up says.
        let fresh = match down_heartbeat {
            Some(stale) => heartbeat_secs(&node).is_some_and(|h| h > stale),
            None => heartbeat(&node)
                .zip(self.up_since)
                .is_some_and(|(h, u)| h + Duration::from_secs(1) >= u),
        };
        let reported = reported_version(&node);
        if !fresh {
            // Read the Node once more, directly, in case the watch lags.
            if let Ok(n) = self.cluster.node(&self.cfg.node_name).await {
                *self.node.lock().unwrap_or_else(|p| p.into_inner()) = Some(n);
            }
            let msg = "the kubelet is up; waiting for it to post the Node's status, which says which kubelet it is".to_string();
            return self.event_once("KubehashWaiting", &msg, false).await;
        }
        match reported {
            Some(v) if v.to_string() == to => self.verify(to, journal).await,
            other => {
                let why = format!(
                    "kubelet {} came back instead of {to}{}",
                    other.map_or("of an unknown version".to_string(), |v| v.to_string()),
                    from.as_deref()
                        .map(|f| format!(" (the plan was {f} → {to})"))
                        .unwrap_or_default()
                );
                self.roll_back(to, journal, written, why).await
            }
        }
    }

    /// CRI and the runtime's own API.
    async fn connect(&self) -> Result<(Cri, Store)> {
        Ok((
            Cri::connect(&self.cfg.cri).await?,
            Store::connect(&self.cfg.containerd).await?,
        ))
    }

    /// The node's static pod manifests, with what the kubelet's flags and config say of the
    /// ones it refuses.
    fn manifests(&self) -> Result<crate::source::manifests::Manifests> {
        crate::source::manifests::Manifests::read_for_kubelet(
            &self.cfg.manifests,
            Some(&self.cfg.host),
        )
    }

    /// The pod specs saved when the plan for `to` was made.
    fn saved_pods(&self, to: &str) -> Result<PodIndex> {
        let mut pods = PodIndex::default();
        crate::source::reader::for_each_object_in_path(&self.pods_file(to), |p| pods.add_pod(p))?;
        Ok(pods)
    }

    /// Rolls back `journal`, each original proved against the specs apply wrote from (saved
    /// with the plan): what is restored is the old kubelet's hash of what runs. Without the saved
    /// specs (the file lost or unreadable), against the specs apply journaled with each write,
    /// which prove the same.
    async fn rollback_proved(
        &self,
        to: &str,
        journal: &str,
        contents: crate::rewrite::journal::Contents,
    ) -> Result<Vec<crate::rewrite::outcome::CheckOutcome>> {
        let (mut cri, store) = self.connect().await?;
        let specs = match self.saved_pods(to) {
            Ok(mut pods) => {
                let manifests = crate::source::manifests::Manifests::read(&self.cfg.manifests)?;
                let node = Some(self.cfg.node_name.as_str());
                Some(node_specs(&mut cri, &mut pods, &manifests, node).await?)
            }
            Err(e) => {
                warn!(error = %e, "the specs saved with the plan are unreadable; proving each original against the spec apply journaled with it");
                None
            }
        };
        rollback(
            &store,
            Path::new(journal),
            contents,
            &mut Open,
            specs.as_ref(),
        )
        .await
    }

    async fn roll_back(
        &mut self,
        to: String,
        journal: String,
        written: usize,
        why: String,
    ) -> Result<()> {
        // The old kubelet may be running again: undoing at once limits the damage, so the gate
        // is open.
        let result = match crate::rewrite::journal::read(Path::new(&journal)) {
            Ok(contents) => self.rollback_proved(&to, &journal, contents).await,
            Err(e) => Err(e),
        };
        let (ok, detail, restored) = match &result {
            Ok(r) => {
                let bad = r.iter().filter(|o| !o.ok).count();
                (
                    bad == 0,
                    format!("rolled back {} of {} containers", r.len() - bad, r.len()),
                    records_restored(r),
                )
            }
            Err(e) => (false, format!("rollback failed: {e}"), 0),
        };
        // The runtime reports what it loaded at its last start: with the rewritten hashes, the
        // old kubelet restarts the containers at its next sync of their pods. Restarting
        // containerd now (its containers keep running) leaves it as little of that time as
        // can be, even after a partial rollback.
        let runtime = match (restored, self.cfg.restart_containerd.clone()) {
            (0, _) if ok => String::new(),
            (0, _) => format!(
                ". If containerd was restarted after the rewrite, up to {written} containers may restart"
            ),
            (_, None) => format!(
                ". If containerd was restarted after the rewrite, up to {written} containers may restart; restart containerd again so that the runtime reports the original hashes"
            ),
            (_, Some(cmd)) => self.restart_after_rollback(&cmd, &journal, written).await,
        };
        let reason = format!("{why}: {detail}; journal {journal}{runtime}");
        self.event("KubehashRolledBack", &reason, true).await;
        if ok {
            let audit = self.audit_later(&journal);
            self.set(Phase::RolledBack { to, reason, audit })
        } else {
            self.set(Phase::Failed { to, reason })
        }
    }

    /// Restarts containerd with `cmd` after rolling back `journal` and checks that CRI reports
    /// the original hashes; what happened, as the end of the `KubehashRolledBack` message.
    async fn restart_after_rollback(&self, cmd: &str, journal: &str, written: usize) -> String {
        if let Err(e) = RestartCommand::shell(cmd)
            .run(self.cfg.restart_timeout)
            .await
        {
            return format!(
                ". Restarting containerd failed ({e}): until it is restarted, the runtime may report the rewritten hashes, and up to {written} containers may restart"
            );
        }
        match self.reported(journal, Expect::Original).await {
            Ok(r) if r.unseen.is_empty() => format!(
                "; containerd restarted, and CRI reports the original hash of all {} containers",
                r.containers
            ),
            Ok(r) => format!(
                "; containerd restarted, but CRI reports the original hash of only {} of {} containers (not {}): the old kubelet restarts them",
                r.seen(),
                r.containers,
                r.unseen_named()
            ),
            Err(e) => format!(
                "; containerd restarted, but whether CRI reports the original hashes could not be checked ({e})"
            ),
        }
    }

    /// After a restart of containerd: which of the containers `journal` wrote CRI reports with
    /// the value `expect` names.
    async fn reported(&self, journal: &str, expect: Expect) -> Result<Reloaded> {
        reloaded(|| self.connect(), Path::new(journal), expect).await
    }

    /// The audit due `audit_after` from now, against what apply recorded beside `journal`;
    /// without that record, none.
    fn audit_later(&self, journal: &str) -> Option<PendingAudit> {
        audit_files(Path::new(journal))
            .0
            .exists()
            .then(|| PendingAudit {
                after: crate::clock::now_unix().saturating_add(self.cfg.audit_after.as_secs()),
                journal: journal.to_string(),
            })
    }

    async fn verify(&mut self, to: String, journal: String) -> Result<()> {
        let result = match crate::rewrite::journal::read(Path::new(&journal)) {
            Ok(contents) => match self.connect().await {
                // Kubelet T is up: it needs what was written, whatever happened since.
                Ok((mut cri, store)) => verify(&mut cri, &store, contents, Expect::Written).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(results) => {
                let bad: Vec<_> = results.iter().filter(|r| !r.ok).collect();
                self.metrics.verify_failed(bad.len());
                if bad.is_empty() {
                    let msg = format!(
                        "kubelet {to} is up (the Node reports it); verified {} rewritten containers",
                        results.len()
                    );
                    self.event("KubehashVerified", &msg, false).await;
                    let _ = std::fs::remove_file(self.pods_file(&to));
                    let audit = self.audit_later(&journal);
                    self.set(Phase::Done {
                        to,
                        detail: msg,
                        audit,
                    })
                } else {
                    let reason = format!(
                        "{} of {} containers failed verification: {}",
                        bad.len(),
                        results.len(),
                        bad.iter()
                            .map(|r| format!("{} ({})", r.name, r.detail))
                            .collect::<Vec<_>>()
                            .join("; ")
                    );
                    self.event("KubehashVerifyFailed", &reason, true).await;
                    self.set(Phase::Failed { to, reason })
                }
            }
            Err(e) => {
                let reason = format!("verify failed: {e}");
                self.event("KubehashVerifyFailed", &reason, true).await;
                self.set(Phase::Failed { to, reason })
            }
        }
    }

    /// Runs steps until `stop` resolves; `stop` is honoured in the middle of a step too.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        tokio::pin!(stop);
        loop {
            self.metrics.tick();
            tokio::select! {
                r = self.step() => {
                    if let Err(e) = r {
                        warn!(error = %e, phase = self.phase.name(), "step failed; will try again");
                    }
                }
                _ = &mut stop => break,
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.poll) => {}
                _ = &mut stop => break,
            }
        }
        if let Some(w) = self.watch.take() {
            w.abort();
        }
        Ok(())
    }
}

/// The agent's write gate: before every write, the kubelet is down (process gone, healthz
/// refusing), the binary on disk is the target version, and the Node still asks for it.
struct Evidence<'a> {
    cfg: &'a AgentConfig,
    cluster: &'a Cluster,
    to: KubeletVersion,
}

impl WriteGate for Evidence<'_> {
    async fn check(&mut self) -> std::result::Result<(), Unsafe> {
        self.why_not().await.map_err(Unsafe)
    }
}

impl Evidence<'_> {
    async fn why_not(&self) -> std::result::Result<(), String> {
        if let Some(p) = kubelet_process() {
            return Err(format!("a kubelet runs again ({p})"));
        }
        match healthz(&self.cfg.kubelet_healthz).await {
            Health::Refused => {}
            Health::Up => return Err("the kubelet's healthz answers again".into()),
            Health::Unknown(why) => {
                return Err(format!("the kubelet's healthz is not refusing ({why})"))
            }
        }
        match binary_version(&self.cfg.kubelet_binary).await {
            Ok(v) if v == self.to => {}
            Ok(v) => return Err(format!("the kubelet binary is now {v}, not {}", self.to)),
            Err(e) => return Err(e.to_string()),
        }
        let node = self
            .cluster
            .node(&self.cfg.node_name)
            .await
            .map_err(|e| format!("cannot read the Node's target: {e}"))?;
        match wanted_target(&node, &self.cfg.annotation) {
            Ok(Some(v)) if v == self.to => Ok(()),
            other => Err(format!(
                "the Node's {} no longer names {} ({other:?})",
                self.cfg.annotation, self.to
            )),
        }
    }
}
