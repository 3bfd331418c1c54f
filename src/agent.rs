//! `kubehash agent`: the node agent as a long-running DaemonSet pod that acts by itself at the
//! right moment of a kubelet binary swap — after the old kubelet stopped, before the new one runs.
//!
//! ```text
//! Idle ──(Node annotated kubehash.dev/target-kubelet-version=T, seen through a watch)──▶ Planned
//!   plan: CRI + this node's pods; published as a Node Event, metrics and a plan file;
//!   the pod specs are saved so that apply never needs the API server.
//! Planned ──(kubelet healthz down for the grace period)──▶ Applying ──▶ Applied
//!   apply from the saved specs (re-validated against CRI and containerd), journal on disk;
//!   optionally restart containerd through systemd.
//! Applied ──(kubelet healthz up)──▶ Done (verify passed) or Failed (it did not)
//! ```
//!
//! The phase is saved (atomically) before every step, so a killed agent resumes where it was:
//! an interrupted apply is finished only while the kubelet is still down (apply is idempotent);
//! if the kubelet came back meanwhile the agent stops and says so rather than write. On any
//! failure it stops in `Failed`, publishes why, and never retries a write by itself. With
//! `--dry-run` it publishes what it would do and writes nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{error, info, warn};

use crate::cluster::Cluster;
use crate::cri::Cri;
use crate::error::{Error, Result};
use crate::plan::{plan, PodIndex, Verdict};
use crate::version::KubeletVersion;

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
    pub grace: Duration,
    pub poll: Duration,
    pub annotation: String,
    /// Command that restarts containerd after apply (e.g. `systemctl restart containerd`).
    pub restart_containerd: Option<String>,
    pub dry_run: bool,
}

/// Where the agent is in an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "kebab-case")]
pub enum Phase {
    Idle,
    Planned {
        to: String,
        from: Option<String>,
        rewrite: usize,
    },
    Applying {
        to: String,
        from: Option<String>,
        journal: String,
    },
    Applied {
        to: String,
        journal: String,
        written: usize,
    },
    Done {
        to: String,
        detail: String,
    },
    Failed {
        to: String,
        reason: String,
    },
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Planned { .. } => "planned",
            Phase::Applying { .. } => "applying",
            Phase::Applied { .. } => "applied",
            Phase::Done { .. } => "done",
            Phase::Failed { .. } => "failed",
        }
    }

    fn target(&self) -> Option<&str> {
        match self {
            Phase::Idle => None,
            Phase::Planned { to, .. }
            | Phase::Applying { to, .. }
            | Phase::Applied { to, .. }
            | Phase::Done { to, .. }
            | Phase::Failed { to, .. } => Some(to),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

/// The agent's Prometheus metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    plan: Family<VerdictLabel, Gauge<i64, AtomicI64>>,
    phase: Family<PhaseLabel, Gauge<i64, AtomicI64>>,
    kubelet_up: Gauge<i64, AtomicI64>,
    written: Counter<u64, AtomicU64>,
    verify_failures: Counter<u64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("kubehash");
        let m = Metrics {
            registry: Arc::new(Mutex::new(Registry::default())),
            plan: Family::default(),
            phase: Family::default(),
            kubelet_up: Gauge::default(),
            written: Counter::default(),
            verify_failures: Counter::default(),
        };
        r.register(
            "plan_containers",
            "Containers of the current plan, by verdict",
            m.plan.clone(),
        );
        r.register(
            "agent_phase",
            "1 for the agent's current phase",
            m.phase.clone(),
        );
        r.register(
            "kubelet_up",
            "1 when the kubelet's healthz answers",
            m.kubelet_up.clone(),
        );
        r.register("rewrites", "Container records rewritten", m.written.clone());
        r.register(
            "verify_failures",
            "Containers that failed verification",
            m.verify_failures.clone(),
        );
        *m.registry.lock().unwrap_or_else(|p| p.into_inner()) = r;
        m
    }
}

impl Metrics {
    /// The metrics in Prometheus text format.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut s, &r);
        s
    }

    fn set_phase(&self, p: &Phase) {
        for name in ["idle", "planned", "applying", "applied", "done", "failed"] {
            self.phase
                .get_or_create(&PhaseLabel { phase: name.into() })
                .set(i64::from(name == p.name()));
        }
    }
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("agent-state.json")
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

/// Whether the kubelet's healthz answers 200.
async fn kubelet_healthy(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let (authority, path) = rest.split_once('/').map_or((rest, "/"), |(a, p)| (a, p));
    let Ok(Ok(mut stream)) = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(authority),
    )
    .await
    else {
        return false;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!(
        "GET /{} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n",
        path.trim_start_matches('/')
    );
    if stream.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await {
        Ok(Ok(n)) => std::str::from_utf8(&buf[..n])
            .is_ok_and(|s| s.starts_with("HTTP/1.1 200") || s.starts_with("HTTP/1.0 200")),
        _ => false,
    }
}

/// The agent.
pub struct Agent {
    cfg: AgentConfig,
    cluster: Cluster,
    pub metrics: Metrics,
    phase: Phase,
    down_since: Option<Instant>,
    node_uid: String,
    /// The newest Node object, kept by a watch.
    node: Arc<Mutex<Option<Value>>>,
    watch: Option<tokio::task::JoinHandle<()>>,
}

impl Agent {
    pub async fn new(cfg: AgentConfig, metrics: Metrics) -> Result<Agent> {
        let cluster = Cluster::connect(cfg.kubeconfig.as_deref(), None).await?;
        let phase = load_phase(&cfg.state_dir)?;
        metrics.set_phase(&phase);
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
            node_uid: String::new(),
            node,
            watch: Some(watch),
        })
    }

    fn set(&mut self, p: Phase) -> Result<()> {
        crate::durable::write_json(&state_path(&self.cfg.state_dir), &p)?;
        self.metrics.set_phase(&p);
        info!(phase = p.name(), "phase");
        self.phase = p;
        Ok(())
    }

    async fn event(&self, reason: &str, message: &str, warning: bool) {
        if let Err(e) = self
            .cluster
            .node_event(
                &self.cfg.node_name,
                &self.node_uid,
                reason,
                message,
                warning,
            )
            .await
        {
            warn!(error = %e, reason, "could not publish an event");
        }
    }

    fn pods_file(&self, to: &str) -> PathBuf {
        self.cfg.state_dir.join(format!("pods-{to}.json"))
    }

    /// One step of the state machine; the loop calls it every poll interval.
    pub async fn step(&mut self) -> Result<()> {
        let up = kubelet_healthy(&self.cfg.kubelet_healthz).await;
        self.metrics.kubelet_up.set(i64::from(up));
        match self.phase.clone() {
            Phase::Idle | Phase::Done { .. } | Phase::Failed { .. } => self.look_for_target().await,
            Phase::Planned { to, from, .. } => {
                if up {
                    self.down_since = None;
                    return Ok(());
                }
                let since = *self.down_since.get_or_insert_with(Instant::now);
                if since.elapsed() < self.cfg.grace {
                    return Ok(());
                }
                if self.cfg.dry_run {
                    let msg = format!("dry run: the kubelet is down; would now rewrite the planned containers for kubelet {to}");
                    self.event("KubehashDryRun", &msg, false).await;
                    return self.set(Phase::Done { to, detail: msg });
                }
                let journal = crate::journal::path_for(
                    &self.cfg.state_dir.join("journal"),
                    from.as_deref(),
                    &to,
                )
                .display()
                .to_string();
                self.set(Phase::Applying {
                    to: to.clone(),
                    from: from.clone(),
                    journal: journal.clone(),
                })?;
                self.apply(&to, from.as_deref(), &journal).await
            }
            Phase::Applying { to, from, journal } => {
                // Only after a restart of the agent in the middle of apply.
                if up {
                    let reason = format!(
                        "apply for kubelet {to} was interrupted and the kubelet is running again; not writing. \
                         Check with `kubehash node verify --journal {journal}`, or undo with `kubehash node rollback --journal {journal}`"
                    );
                    self.event("KubehashStopped", &reason, true).await;
                    return self.set(Phase::Failed { to, reason });
                }
                info!(journal = %journal, "resuming an interrupted apply (it is idempotent)");
                self.apply(&to, from.as_deref(), &journal).await
            }
            Phase::Applied { to, journal, .. } => {
                if !up {
                    return Ok(());
                }
                match crate::node::verify(&self.cfg.cri, &self.cfg.containerd, Path::new(&journal))
                    .await
                {
                    Ok(results) => {
                        let bad: Vec<_> = results.iter().filter(|r| !r.ok).collect();
                        self.metrics.verify_failures.inc_by(bad.len() as u64);
                        if bad.is_empty() {
                            let msg = format!(
                                "kubelet {to} is up; verified {} rewritten containers",
                                results.len()
                            );
                            self.event("KubehashVerified", &msg, false).await;
                            let _ = std::fs::remove_file(self.pods_file(&to));
                            self.set(Phase::Done { to, detail: msg })
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
        }
    }

    async fn look_for_target(&mut self) -> Result<()> {
        let watched = self.node.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let node = match watched {
            Some(n) => n,
            None => return Ok(()), // the watch has not delivered the Node yet
        };
        self.node_uid = node
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(target) = node
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(&self.cfg.annotation))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        let to: KubeletVersion = match target.parse() {
            Ok(v) => v,
            Err(e) => {
                if self.phase.target() != Some(target) {
                    let reason = format!("annotation {}: {e}", self.cfg.annotation);
                    self.event("KubehashFailed", &reason, true).await;
                    self.set(Phase::Failed {
                        to: target.to_string(),
                        reason,
                    })?;
                }
                return Ok(());
            }
        };
        if self.phase.target() == Some(to.to_string().as_str()) {
            return Ok(()); // already handled this target (done or failed): wait for a new one
        }
        let from = node
            .pointer("/status/nodeInfo/kubeletVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<KubeletVersion>().ok());
        self.plan(to, from).await
    }

    async fn plan(&mut self, to: KubeletVersion, from: Option<KubeletVersion>) -> Result<()> {
        let selector = format!("spec.nodeName={}", self.cfg.node_name);
        let mut pods_json = Vec::new();
        self.cluster
            .for_each_pod(Some(&selector), &mut |p| pods_json.push(p))
            .await?;
        let pods_file = self.pods_file(&to.to_string());
        crate::durable::write_json(
            &pods_file,
            &serde_json::json!({"kind": "List", "apiVersion": "v1", "items": pods_json}),
        )?;
        let mut pods = PodIndex::default();
        for p in pods_json {
            pods.add_pod(p);
        }
        let mut cri = Cri::connect(&self.cfg.cri).await?;
        let containers = cri.list_containers().await?;
        let plans = plan(&containers, &pods, to, from);
        crate::durable::write_json(&self.cfg.state_dir.join(format!("plan-{to}.json")), &plans)?;
        let counts = crate::report::plan_counts(&plans);
        for (v, n) in &counts {
            self.metrics
                .plan
                .get_or_create(&VerdictLabel {
                    verdict: v.to_string(),
                })
                .set(*n as i64);
        }
        let rewrite = plans
            .iter()
            .filter(|p| p.verdict == Verdict::Rewrite)
            .count();
        let msg = format!(
            "plan for kubelet {to}{}: {}",
            if self.cfg.dry_run { " (dry run)" } else { "" },
            counts
                .iter()
                .map(|(v, n)| format!("{n} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.event("KubehashPlanned", &msg, false).await;
        self.down_since = None;
        self.set(Phase::Planned {
            to: to.to_string(),
            from: from.map(|f| f.to_string()),
            rewrite,
        })
    }

    async fn apply(&mut self, to: &str, from: Option<&str>, journal: &str) -> Result<()> {
        let to_v: KubeletVersion = to.parse()?;
        let from_v: Option<KubeletVersion> = from.map(str::parse).transpose()?;
        let mut pods = PodIndex::default();
        crate::pods::for_each_object_in_path(&self.pods_file(to), |p| pods.add_pod(p))?;
        let result = crate::node::apply(
            &self.cfg.cri,
            &self.cfg.containerd,
            &pods,
            to_v,
            from_v,
            Path::new(journal),
            &crate::node::KubeletGuard {
                // The state machine judged the healthz; the process check still applies.
                healthz: None,
                force: false,
            },
        )
        .await;
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                let reason = format!("apply failed: {e}");
                error!(%reason);
                self.event("KubehashFailed", &reason, true).await;
                return self.set(Phase::Failed {
                    to: to.into(),
                    reason,
                });
            }
        };
        let written = report.count("written");
        self.metrics.written.inc_by(written as u64);
        let errors = report.count("error");
        let msg = format!(
            "rewrote {written} containers for kubelet {to} ({} already done, {errors} errors); journal {journal}",
            report.count("already-rewritten")
        );
        self.event("KubehashApplied", &msg, errors > 0).await;
        if let Some(cmd) = &self.cfg.restart_containerd {
            let status = tokio::process::Command::new("sh")
                .args(["-c", cmd])
                .status()
                .await;
            if !status.map(|s| s.success()).unwrap_or(false) {
                let reason = format!("`{cmd}` failed after apply; journal {journal}");
                self.event("KubehashFailed", &reason, true).await;
                return self.set(Phase::Failed {
                    to: to.into(),
                    reason,
                });
            }
        }
        self.set(Phase::Applied {
            to: to.into(),
            journal: journal.into(),
            written,
        })
    }

    /// Runs steps until `stop` resolves.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        tokio::pin!(stop);
        loop {
            if let Err(e) = self.step().await {
                warn!(error = %e, phase = self.phase.name(), "step failed; will try again");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.poll) => {}
                _ = &mut stop => {
                    if let Some(w) = self.watch.take() {
                        w.abort();
                    }
                    return Ok(());
                }
            }
        }
    }
}

/// [`serve_metrics`] for an owned address (to spawn it).
pub async fn serve_metrics_owned(addr: String, metrics: Metrics) -> Result<()> {
    serve_metrics(&addr, metrics).await
}

/// Serves `/metrics` (Prometheus text) and `/healthz` on `addr` until the process ends.
pub async fn serve_metrics(addr: &str, metrics: Metrics) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Io {
            source_name: format!("metrics address {addr}"),
            source: e,
        })?;
    info!(%addr, "serving /metrics and /healthz");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let metrics = metrics.clone();
                    async move {
                        let (status, ctype, body) = match req.uri().path() {
                            "/metrics" => (
                                200,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                metrics.encode(),
                            ),
                            "/healthz" => (200, "text/plain", "ok\n".to_string()),
                            _ => (404, "text/plain", "not found\n".to_string()),
                        };
                        let mut r = http::Response::new(http_body_util::Full::new(
                            bytes::Bytes::from(body),
                        ));
                        *r.status_mut() =
                            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
                        r.headers_mut()
                            .insert("content-type", http::HeaderValue::from_static(ctype));
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}
