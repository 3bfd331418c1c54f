//! The agent's Prometheus metrics, and the HTTP endpoint that serves them with `/healthz`
//! (503 while the agent's loop stands still).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing::info;

use crate::agent::phase::{Phase, PHASES};
use crate::analysis::audit::Tally;
use crate::clock::now_unix;
use crate::error::{Error, Result};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FateLabel {
    fate: String,
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
    audit: Family<FateLabel, Gauge<i64, AtomicI64>>,
    audit_mispredicted: Gauge<i64, AtomicI64>,
    /// When the agent's loop last turned (unix seconds), and how long it may stand still.
    last_tick: Arc<AtomicU64>,
    stuck_after: Arc<AtomicU64>,
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
            audit: Family::default(),
            audit_mispredicted: Gauge::default(),
            last_tick: Arc::new(AtomicU64::new(now_unix())),
            stuck_after: Arc::new(AtomicU64::new(u64::MAX)),
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
        r.register(
            "audit_containers",
            "Containers that ran before the last audited upgrade, by what became of them",
            m.audit.clone(),
        );
        r.register(
            "audit_mispredicted",
            "Containers of the last audited upgrade whose fate was not the one predicted",
            m.audit_mispredicted.clone(),
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

    /// The loop turned.
    pub(super) fn tick(&self) {
        self.last_tick.store(now_unix(), Ordering::Relaxed);
    }

    /// `None` when the loop turns; otherwise how long it has stood still.
    pub fn stuck_for(&self) -> Option<u64> {
        let idle = now_unix().saturating_sub(self.last_tick.load(Ordering::Relaxed));
        (idle > self.stuck_after.load(Ordering::Relaxed)).then_some(idle)
    }

    pub(super) fn set_phase(&self, p: &Phase) {
        for name in PHASES {
            self.phase
                .get_or_create(&PhaseLabel { phase: name.into() })
                .set(i64::from(name == p.name()));
        }
    }

    /// `/healthz` answers 503 once the loop has not turned for `secs`.
    pub(super) fn set_stuck_after(&self, secs: u64) {
        self.stuck_after.store(secs, Ordering::Relaxed);
    }

    pub(super) fn set_kubelet_up(&self, up: bool) {
        self.kubelet_up.set(i64::from(up));
    }

    /// The current plan's containers, by verdict.
    pub(super) fn set_plan(&self, verdict: &str, containers: usize) {
        self.plan
            .get_or_create(&VerdictLabel {
                verdict: verdict.to_string(),
            })
            .set(i64::try_from(containers).unwrap_or(i64::MAX));
    }

    pub(super) fn wrote(&self, records: usize) {
        self.written.inc_by(records as u64);
    }

    /// The last audit: containers by fate, and those not as predicted.
    pub(super) fn set_audit(&self, t: &Tally) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (fate, n) in t.by_fate() {
            self.audit
                .get_or_create(&FateLabel {
                    fate: fate.as_str().into(),
                })
                .set(gauge(n));
        }
        self.audit_mispredicted.set(gauge(t.mispredicted));
    }

    pub(super) fn verify_failed(&self, containers: usize) {
        self.verify_failures.inc_by(containers as u64);
    }
}

/// Binds the address for `/metrics` and `/healthz`; a failure is the caller's to report.
pub async fn bind_metrics(addr: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Io {
            source_name: format!("metrics address {addr}"),
            source: e,
        })
}

/// Serves `/metrics` (Prometheus text) and `/healthz` (503 while the agent is stuck) until the
/// process ends.
pub async fn serve_metrics(listener: tokio::net::TcpListener, metrics: Metrics) {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
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
                            "/healthz" => match metrics.stuck_for() {
                                None => (200, "text/plain", "ok\n".to_string()),
                                Some(s) => (
                                    503,
                                    "text/plain",
                                    format!("stuck: the agent's loop has not turned for {s} s\n"),
                                ),
                            },
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
