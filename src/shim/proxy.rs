//! The CRI shim: a transparent proxy between the kubelet and the container runtime that shows the
//! new kubelet the hash it expects for every container that provably runs its current spec, with
//! no writes to the runtime and no runtime restart.
//!
//! It proxies HTTP/2 (gRPC) requests as they are: every method of RuntimeService and
//! ImageService, including ones kubehash's `proto/` subset does not model and the server-streaming
//! `GetContainerEvents`, with headers, trailers (status codes), resets and deadlines
//! (`grpc-timeout`) untouched. Only the responses that carry container annotations
//! (`ListContainers`, `StreamContainers`, `ContainerStatus`, `PodSandboxStatus`,
//! `GetContainerEvents`) are edited, at the wire level ([`crate::shim::wire`]): for a container in
//! the [`ShimState`] whose stored hash is still the one planned, `io.kubernetes.container.hash`
//! (and, for targets 1.27 – 1.30, `hashWithoutResources` where present) becomes the target
//! version's value. Containers created after the plan are passed through as they are, and so is
//! every call of a connecting kubelet that is not the target one (`Peer`, by its `--version`).
//!
//! The shim sits on the kubelet's critical path, so a call costs it as few wake-ups as possible:
//! each kubelet connection is served by one task that owns both HTTP/2 connections (the kubelet's
//! and its own to the runtime) and every call in flight on them. A call crosses no task or thread
//! boundary inside the shim, and a request's head and message reach the runtime in one write.
//!
//! The plan is made once and kept in a state file, so a restart of the shim or an API-server
//! outage never changes what the kubelet sees. If the runtime is down, the kubelet gets the
//! runtime's error, or UNAVAILABLE when it cannot be reached: never a made-up answer.

use std::collections::BTreeMap;
use std::future::{poll_fn, Future};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::{client, server, Reason, RecvStream, SendStream};
use http::{Request, Response};
use serde::{Deserialize, Serialize};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::analysis::created_with::the_runtime_contradicts;
use crate::analysis::plan::{
    join_static_pods, prove_rewrite, ContainerKey, ContainerPlan, PodIndex, Verdict,
};
use crate::error::{Error, Result};
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::audit_record::{self, audit_files};
use crate::runtime::cri::{socket_path, Cri};
use crate::shim::batched::{Batched, OutboxHandle};
use crate::shim::decisions::Decisions;
use crate::shim::wire::{Carrier, StreamEditor};
use crate::source::manifests::Manifests;

/// What the kubelet should see instead of the stored hash, for one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Translation {
    pub pod: String,
    pub container: String,
    pub stored_hash: String,
    pub new_hash: String,
    /// The stored hashWithoutResources, if the container has one.
    #[serde(default)]
    pub stored_hash_without_resources: Option<String>,
    /// Target's hashWithoutResources, shown only where the container has one (targets 1.27 – 1.30).
    pub new_hash_without_resources: Option<String>,
    /// The container's spec the plan proved against, so that a loaded state is proven again.
    #[serde(default)]
    pub spec: Option<serde_json::Value>,
}

impl Translation {
    /// Whether the translated values are as long as the stored ones (then answers can be edited
    /// as they stream; otherwise a whole message must be held to re-encode lengths).
    pub fn keeps_lengths(&self) -> bool {
        self.new_hash.len() == self.stored_hash.len()
            && match (
                &self.new_hash_without_resources,
                &self.stored_hash_without_resources,
            ) {
                (Some(n), Some(s)) => n.len() == s.len(),
                (Some(_), None) | (None, _) => true,
            }
    }
}

/// The shim's decisions, made once and persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimState {
    pub to: String,
    /// The old kubelet the plan proved against (`--from`, or the Node's kubeletVersion).
    #[serde(default)]
    pub from: Option<String>,
    pub created_at_unix: u64,
    /// Container id → translation.
    pub translations: BTreeMap<String, Translation>,
}

impl ShimState {
    /// Translations for every `rewrite` container of a plan made against `pods` for `from` → `to`.
    pub fn from_plans(
        plans: &[ContainerPlan],
        pods: &PodIndex,
        to: KubeletVersion,
        from: Option<KubeletVersion>,
    ) -> ShimState {
        let translations = plans
            .iter()
            .filter(|p| p.verdict == Verdict::Rewrite)
            .filter_map(|p| {
                Some((
                    p.id.clone(),
                    Translation {
                        pod: format!("{}/{}", p.namespace, p.pod),
                        container: p.container.clone(),
                        stored_hash: p.stored_hash.clone()?,
                        new_hash: p.new_hash.clone()?,
                        stored_hash_without_resources: p.stored_hash_without_resources.clone(),
                        new_hash_without_resources: p.new_hash_without_resources.clone(),
                        spec: pods
                            .find(&p.pod_uid, &p.namespace, &p.pod, &p.container)
                            .cloned(),
                    },
                ))
            })
            .collect();
        ShimState {
            to: to.to_string(),
            from: from.map(|f| f.to_string()),
            created_at_unix: crate::clock::now_unix(),
            translations,
        }
    }

    /// Proves every translation again under the current proof rule (a state saved by an older
    /// kubehash may hold translations the rule now refuses) and drops those it cannot prove:
    /// returns each dropped container with why.
    pub fn recheck(&mut self) -> Vec<(String, String)> {
        let to: std::result::Result<KubeletVersion, _> = self.to.parse();
        let from: Option<KubeletVersion> = self.from.as_deref().and_then(|f| f.parse().ok());
        let mut dropped = Vec::new();
        self.translations.retain(|id, t| {
            let why = match (&to, from, &t.spec) {
                (Err(e), _, _) => Some(e.to_string()),
                (_, None, _) => Some("the state names no old kubelet version".to_string()),
                (_, _, None) => Some("the state holds no spec to prove it against".to_string()),
                (Ok(to), Some(from), Some(spec)) => {
                    match crate::analysis::plan::prove_rewrite(spec, &t.stored_hash, from, *to) {
                        Ok((new_hash, _)) if new_hash == t.new_hash => None,
                        Ok((new_hash, _)) => Some(format!(
                            "the target hash is {new_hash}, not the saved {}",
                            t.new_hash
                        )),
                        Err(e) => Some(e.0),
                    }
                }
            };
            match why {
                Some(w) => {
                    dropped.push((id.clone(), w));
                    false
                }
                None => true,
            }
        });
        dropped
    }

    /// Drops every translation whose runtime says the container was created from another spec
    /// than the one proved ([`crate::analysis::created_with`]): returns each dropped container
    /// with why. A container the runtime tells nothing of is kept, as proven by its hashes.
    pub async fn recheck_with_the_runtime(&mut self, cri: &mut Cri) -> Vec<(String, String)> {
        let mut dropped = Vec::new();
        for (id, t) in &self.translations {
            let Some(spec) = &t.spec else { continue };
            if let Some(why) = the_runtime_contradicts(cri, id, spec, None).await {
                dropped.push((id.clone(), why));
            }
        }
        for (id, _) in &dropped {
            self.translations.remove(id);
        }
        dropped
    }

    /// Drops every translation of a static pod's container that its manifest in `manifests` does
    /// not prove as the saved spec was proved (the kubelet runs the file; the saved spec is the
    /// mirror pod's, which keeps the old spec under a pinned UID, or a forger's), or whose
    /// runtime record contradicts the manifest: returns each dropped container with why. A
    /// runtime that does not answer leaves the translations on the hashes that proved them.
    pub async fn recheck_with_the_manifests(
        &mut self,
        cri: &mut Cri,
        manifests: &Manifests,
        node: Option<&str>,
    ) -> Vec<(String, String)> {
        let (Ok(to), Some(Ok(from))) = (
            self.to.parse::<KubeletVersion>(),
            self.from.as_deref().map(str::parse::<KubeletVersion>),
        ) else {
            return Vec::new(); // `recheck` dropped every translation already
        };
        let mut statics = PodIndex::default();
        if join_static_pods(cri, &mut statics, manifests, node, false)
            .await
            .is_err()
        {
            return Vec::new();
        }
        let Ok(containers) = cri.list_containers().await else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        for (id, t) in &self.translations {
            let Some(c) = containers.iter().find(|c| c.id == *id) else {
                continue;
            };
            let k = ContainerKey::of(c);
            if statics.pin_action(&k.uid).is_none() {
                continue; // not a static pod joined to a manifest here
            }
            let why = match statics.find(&k.uid, &k.namespace, &k.pod, &k.name) {
                None => Some("its static pod's manifest has no such container".to_string()),
                Some(spec) => match prove_rewrite(spec, &t.stored_hash, from, to) {
                    Ok((new_hash, _)) if new_hash == t.new_hash => {
                        let (pod, _) = statics.pod_levels(&k.uid, &k.namespace, &k.pod);
                        the_runtime_contradicts(cri, id, spec, pod).await
                    }
                    Ok((new_hash, _)) => Some(format!(
                        "its static pod's manifest gives the target hash {new_hash}, not the saved {}",
                        t.new_hash
                    )),
                    Err(e) => Some(format!("its static pod's manifest does not prove it: {}", e.0)),
                },
            };
            if let Some(why) = why {
                dropped.push((id.clone(), why));
            }
        }
        for (id, _) in &dropped {
            self.translations.remove(id);
        }
        dropped
    }

    /// The state in `path`, if there is one.
    pub fn load(path: &Path) -> Result<Option<ShimState>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::Input {
                    source_name: format!("shim state {}", path.display()),
                    reason: format!("unreadable: {e}"),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io {
                source_name: format!("shim state {}", path.display()),
                source: e,
            }),
        }
    }

    /// Writes the state atomically and durably (mode 0600).
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::rewrite::durable::write_json(path, self)
    }

    /// Whether every translation keeps the stored values' lengths.
    pub fn keeps_lengths(&self) -> bool {
        self.translations.values().all(Translation::keeps_lengths)
    }
}

/// What the shim shows: the decisions of a proven plan, or none yet (pure pass-through).
struct Shown {
    decisions: Decisions,
    /// Every translation keeps lengths: edit answers as they stream.
    streaming: bool,
    /// The kubelet the plan translates for (`None`: no plan yet, or a state that names none).
    to: Option<KubeletVersion>,
}

impl Shown {
    fn of(state: Option<&ShimState>) -> Shown {
        match state {
            Some(s) => Shown {
                decisions: Decisions::new(s),
                streaming: s.keeps_lengths(),
                to: s.to.parse().ok(),
            },
            None => Shown {
                decisions: Decisions::default(),
                streaming: true,
                to: None,
            },
        }
    }
}

/// The plan the shim serves, replaced once when a plan is made after the shim started.
#[derive(Clone)]
pub struct ShownPlan(Arc<std::sync::RwLock<Arc<Shown>>>);

impl ShownPlan {
    /// Serves `state`, or passes everything through until [`ShownPlan::set`].
    pub fn new(state: Option<&ShimState>) -> ShownPlan {
        ShownPlan(Arc::new(std::sync::RwLock::new(Arc::new(Shown::of(state)))))
    }

    /// From now on, serve this plan.
    pub fn set(&self, state: &ShimState) {
        let shown = Arc::new(Shown::of(Some(state)));
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = shown;
    }

    fn current(&self) -> Arc<Shown> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct Shim {
    shown: ShownPlan,
    /// The runtime's socket.
    runtime_path: String,
    limits: Limits,
    /// The state file beside which the audit's record of before the upgrade lies, if any.
    record_beside: Option<PathBuf>,
}

impl Shim {
    /// Kubelet `old` connected through the shim while the plan is for kubelet `to`: the
    /// upgrade was rolled back, or the old kubelet was pointed at the shim before it was
    /// swapped. From now on it restarts what it restarts (a crash, a changed image), and the
    /// record of before the upgrade would count those as the upgrade's. The record is removed,
    /// so that `audit compare --shim-state` refuses rather than misreport, as `node apply` does
    /// for an upgrade begun before it.
    fn void_record(&self, old: KubeletVersion, to: KubeletVersion) {
        let Some(state) = &self.record_beside else {
            return;
        };
        if !audit_files(state).0.exists() {
            return;
        }
        audit_record::forget(state);
        warn!(kubelet = %old, plan = %to, "kubelet {old} connected through the shim after it recorded what ran before the upgrade: that record no longer is the moment before kubelet {to} starts, and is removed; to audit the upgrade, take `kubehash audit snapshot` right before kubelet {to} starts");
    }
}

/// Bounds on what kubelet connections may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Kubelet connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A connection that has not completed the HTTP/2 handshake by then is closed.
    pub handshake_timeout: Duration,
    /// A connection with no call in flight for this long is closed (the kubelet reconnects).
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// HTTP/2 flow-control window on both sides: large enough that a ListContainers answer for a
/// full node (hundreds of KB) crosses each hop without waiting for window updates.
const WINDOW: u32 = 4 << 20;
/// Largest HTTP/2 frame the shim accepts (fewer frames per large answer).
const MAX_FRAME: u32 = 1 << 20;

/// Read buffer on the runtime connection: a whole-node ListContainers answer (hundreds of KB)
/// arrives in a few reads instead of two per 16 KB HTTP/2 frame.
const READ_BUFFER: usize = 512 << 10;

/// Read buffer on the kubelet connection (requests are small).
const KUBELET_READ_BUFFER: usize = 64 << 10;

/// Bytes a stream passes on in one turn of its connection task before it lets the task write
/// them out (see [`pipe`]).
const TURN: usize = 64 << 10;

/// Bytes a stream takes in one turn before it lets the task serve its other calls, while it
/// passes nothing on (an answer held whole): yielding sooner would only write the answer's head
/// out alone and wake everyone for nothing.
const HELD_TURN: usize = 1 << 20;

/// How long a stopping shim lets calls in flight finish.
const DRAIN: Duration = Duration::from_secs(10);

/// A trailers-only gRPC answer (the form gRPC gives an error without a body), headers as tonic
/// writes them.
fn grpc_error(code: tonic::Code, message: &str) -> Response<()> {
    tonic::Status::new(code, message).into_http()
}

/// The shim's HTTP/2 connection to the runtime, for one kubelet connection.
struct Runtime {
    calls: client::SendRequest<Bytes>,
    conn: client::Connection<Batched, Bytes>,
    out: OutboxHandle,
}

impl Runtime {
    async fn connect(path: &str) -> std::result::Result<Runtime, String> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| format!("cannot connect to the runtime at {path}: {e}"))?;
        let (io, out) = Batched::new(stream, READ_BUFFER)
            .map_err(|e| format!("cannot use the connection to the runtime at {path}: {e}"))?;
        // Does not wait for the runtime: the preface and settings wait in the outbox.
        let (calls, conn) = client::Builder::new()
            .initial_window_size(WINDOW)
            .initial_connection_window_size(2 * WINDOW)
            .max_frame_size(MAX_FRAME)
            .handshake(io)
            .await
            .map_err(|e| format!("HTTP/2 handshake with the runtime at {path} failed: {e}"))?;
        Ok(Runtime { calls, conn, out })
    }
}

/// A socket write failed: which side's.
enum WriteFailed {
    Kubelet(std::io::Error),
    Runtime(std::io::Error),
}

/// Writes out both outboxes ([`crate::shim::batched`]); Ready only when a write failed.
fn write_out(
    cx: &mut Context<'_>,
    kubelet: &OutboxHandle,
    runtime: Option<&OutboxHandle>,
) -> Poll<WriteFailed> {
    if let Poll::Ready(Err(e)) = kubelet.poll_write_out(cx) {
        return Poll::Ready(WriteFailed::Kubelet(e));
    }
    if let Some(Poll::Ready(Err(e))) = runtime.map(|r| r.poll_write_out(cx)) {
        return Poll::Ready(WriteFailed::Runtime(e));
    }
    Poll::Pending
}

/// Which kubelet is on the other end of a connection, as far as the shim can tell from the
/// socket's peer credentials: the translated hashes are for kubelet T alone. Shown to the old
/// kubelet (pointed at the shim too early, or started again after a rollback of the binary),
/// they would make it restart every translated container.
#[derive(Debug, Clone)]
enum Peer {
    /// Not a kubelet (`crictl`, a test's client), or a process in a PID namespace the shim does
    /// not see: served as the plan says.
    Unidentified,
    /// A kubelet that said its version (`--version` of the binary it runs).
    Kubelet(KubeletVersion),
    /// A process named like a kubelet whose version could not be learnt, and why.
    Unknown(String),
}

impl Peer {
    async fn of(io: &UnixStream) -> Peer {
        let pid = io
            .peer_cred()
            .ok()
            .and_then(|c| c.pid())
            .and_then(|p| u32::try_from(p).ok())
            .filter(|&p| p > 0);
        let Some(pid) = pid else {
            return Peer::Unidentified;
        };
        match crate::source::kubelet_binary::process_kubelet_version(pid).await {
            None => Peer::Unidentified,
            Some(Ok(v)) => Peer::Kubelet(v),
            Some(Err(e)) => Peer::Unknown(format!("pid {pid}: {e}")),
        }
    }

    /// Whether this peer is shown a plan's translations for kubelet `to`: all but a kubelet that
    /// says it is another one. A process named like a kubelet whose binary will not say (a
    /// real kubelet always does) is no evidence of the old kubelet, and is served as the plan
    /// says, with a warning.
    fn translated_for(&self, to: Option<KubeletVersion>) -> bool {
        match (self, to) {
            (Peer::Kubelet(v), Some(to)) => v.minor() == to.minor(),
            _ => true,
        }
    }
}

/// Serves one kubelet connection until it closes, or until `stop` and the calls in flight have
/// finished. The runtime connection is made for the first call and made again for the next call
/// after the runtime went away.
///
/// One pass of the loop polls the calls, both connections, and last (`biased`) writes out what
/// the pass produced: the frames of an answer that is all there leave in one write.
async fn serve_kubelet(shim: Arc<Shim>, io: UnixStream, mut stop: watch::Receiver<bool>) {
    let peer = Peer::of(&io).await;
    if let Some(to) = shim.shown.current().to {
        match &peer {
            Peer::Kubelet(v) if !peer.translated_for(Some(to)) => {
                warn!(kubelet = %v, plan = %to, "kubelet {v} connected, and the plan translates hashes for kubelet {to} only: its calls pass through untranslated");
                shim.void_record(*v, to);
            }
            Peer::Unknown(why) => {
                warn!(error = %why, plan = %to, "a process named like a kubelet connected, and its binary does not say which kubelet it is: serving the plan for kubelet {to}")
            }
            _ => {}
        }
    }
    let (io, kubelet_out) = match Batched::new(io, KUBELET_READ_BUFFER) {
        Ok(both) => both,
        Err(e) => return debug!(error = %e, "cannot use the kubelet's connection"),
    };
    let handshake = server::Builder::new()
        .initial_window_size(WINDOW)
        .initial_connection_window_size(2 * WINDOW)
        .max_frame_size(MAX_FRAME)
        .handshake::<_, Bytes>(io);
    tokio::pin!(handshake);
    // The server's settings must go out while it waits for the kubelet's preface.
    let handshake = poll_fn(|cx| match handshake.as_mut().poll(cx) {
        Poll::Ready(done) => Poll::Ready(done.map_err(|e| e.to_string())),
        Poll::Pending => match kubelet_out.poll_write_out(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.to_string())),
            _ => Poll::Pending,
        },
    });
    let mut kubelet = match tokio::time::timeout(shim.limits.handshake_timeout, handshake).await {
        Ok(Ok(k)) => k,
        Ok(Err(e)) => return debug!(error = %e, "kubelet handshake failed"),
        Err(_) => return debug!("no HTTP/2 handshake in time; closing"),
    };
    let mut runtime: Option<Runtime> = None;
    let mut runtime_out: Option<OutboxHandle> = None;
    let mut calls = FuturesUnordered::new();
    let mut stopping = false;
    let idle = tokio::time::sleep(shim.limits.idle_timeout);
    tokio::pin!(idle);
    loop {
        if !calls.is_empty() {
            idle.as_mut()
                .reset(tokio::time::Instant::now() + shim.limits.idle_timeout);
        }
        tokio::select! {
            biased;
            Some(()) = calls.next(), if !calls.is_empty() => {}
            () = &mut idle, if calls.is_empty() => return debug!("idle connection closed"),
            accepted = kubelet.accept() => match accepted {
                Some(Ok((req, respond))) => {
                    let to_runtime = match &runtime {
                        Some(r) => Ok(r.calls.clone()),
                        None => Runtime::connect(&shim.runtime_path).await.map(|r| {
                            let calls = r.calls.clone();
                            runtime_out = Some(r.out.clone());
                            runtime = Some(r);
                            calls
                        }),
                    };
                    idle.as_mut()
                        .reset(tokio::time::Instant::now() + shim.limits.idle_timeout);
                    calls.push(call(&shim, &peer, to_runtime, req, respond));
                }
                Some(Err(e)) => return debug!(error = %e, "kubelet connection failed"),
                None => return,
            },
            ended = poll_fn(|cx| match runtime.as_mut() {
                Some(r) => std::pin::Pin::new(&mut r.conn).poll(cx),
                None => Poll::Pending,
            }), if runtime.is_some() => {
                if let Err(e) = ended {
                    debug!(error = %e, "runtime connection ended");
                }
                runtime = None;
                runtime_out = None;
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                kubelet.graceful_shutdown();
            }
            failed = poll_fn(|cx| write_out(cx, &kubelet_out, runtime_out.as_ref())) => match failed {
                WriteFailed::Kubelet(e) => return debug!(error = %e, "cannot write to the kubelet"),
                WriteFailed::Runtime(e) => {
                    debug!(error = %e, "cannot write to the runtime");
                    runtime = None;
                    runtime_out = None;
                }
            },
        }
    }
}

/// One call: the request goes to the runtime as it is and the answer comes back, edited where it
/// carries containers. Ends when the answer has ended (or either side gave up).
async fn call(
    shim: &Shim,
    peer: &Peer,
    to_runtime: std::result::Result<client::SendRequest<Bytes>, String>,
    req: Request<RecvStream>,
    mut respond: server::SendResponse<Bytes>,
) {
    let method = req.uri().path().to_string();
    let shown = shim.shown.current();
    let unavailable = |respond: &mut server::SendResponse<Bytes>, e: String| {
        warn!(method = %method, error = %e, "runtime unavailable");
        let _ = respond.send_response(grpc_error(tonic::Code::Unavailable, &e), true);
    };
    let did_not_answer =
        |e: h2::Error| format!("the runtime at {} did not answer: {e}", shim.runtime_path);
    let mut to_runtime = match to_runtime {
        Ok(r) => match r.ready().await {
            Ok(r) => r,
            Err(e) => return unavailable(&mut respond, did_not_answer(e)),
        },
        Err(e) => return unavailable(&mut respond, e),
    };
    let carrier = match method.strip_prefix('/').and_then(|p| p.split_once('/')) {
        Some(("runtime.v1.RuntimeService" | "runtime.v1alpha2.RuntimeService", m))
            if peer.translated_for(shown.to) =>
        {
            Carrier::for_method(m)
        }
        _ => None,
    };
    let (mut head, body) = req.into_parts();
    let path = head
        .uri
        .path_and_query()
        .map_or(method.as_str(), |p| p.as_str());
    head.uri = match format!("http://localhost{path}").parse() {
        Ok(u) => u,
        Err(_) => {
            let _ = respond.send_response(
                grpc_error(tonic::Code::Internal, "kubehash shim: bad request path"),
                true,
            );
            return;
        }
    };
    let ended = body.is_end_stream();
    let (answer, request_body) = match to_runtime.send_request(Request::from_parts(head, ()), ended)
    {
        Ok(sent) => sent,
        Err(e) => return unavailable(&mut respond, did_not_answer(e)),
    };
    let request = async {
        if !ended {
            pipe(body, request_body, None, &shown.decisions).await;
        }
    };
    let response = async {
        let answer = tokio::select! {
            answer = answer => answer,
            _ = poll_fn(|cx| respond.poll_reset(cx)) => return, // the kubelet gave up
        };
        let (head, body) = match answer {
            Ok(a) => a.into_parts(),
            Err(e) if e.is_reset() => return respond.send_reset(passed_reason(&e)),
            Err(e) => return unavailable(&mut respond, did_not_answer(e)),
        };
        let ended = body.is_end_stream();
        let Ok(to_kubelet) = respond.send_response(Response::from_parts(head, ()), ended) else {
            return;
        };
        if !ended {
            // A plan whose translations all keep lengths edits answers as they stream;
            // otherwise each message is held until it ends, to give its new length.
            let editor = carrier.map(|c| match shown.streaming {
                true => StreamEditor::new(c),
                false => StreamEditor::holding(c),
            });
            pipe(body, to_kubelet, editor, &shown.decisions).await;
        }
    };
    tokio::pin!(request, response);
    let mut request_sent = false;
    loop {
        tokio::select! {
            () = &mut request, if !request_sent => request_sent = true,
            () = &mut response => return,
        }
    }
}

/// The reset to pass on for a stream error: the peer's own reason when it reset the stream,
/// otherwise INTERNAL_ERROR.
fn passed_reason(e: &h2::Error) -> Reason {
    match e.reason() {
        Some(r) if e.is_reset() => r,
        _ => Reason::INTERNAL_ERROR,
    }
}

/// Passes one direction of a stream on: its data (edited, if there is an editor), then its
/// trailers or end; a reset on the way is passed on too. Flow control is end to end: the
/// sender's window is released only as its data is passed on, and each chunk but the first waits
/// for the receiver's window, so at most one chunk is held per stream. (The first does not wait:
/// it goes out with the stream's head, in the same write.)
async fn pipe(
    mut from: RecvStream,
    mut to: SendStream<Bytes>,
    mut editor: Option<StreamEditor>,
    decisions: &Decisions,
) {
    let mut first = true;
    // Bytes passed on and taken in this turn of the connection task.
    let (mut sent, mut taken) = (0, 0);
    // What the body gave when polled before a yield.
    let mut ready = None;
    loop {
        let next = match ready.take() {
            Some(next) => next,
            None => tokio::select! {
                next = from.data() => next,
                // The receiver gave up: dropping `from` resets the sender's stream.
                _ = poll_fn(|cx| to.poll_reset(cx)) => return,
            },
        };
        let chunk = match next {
            None => break,
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return to.send_reset(passed_reason(&e)),
        };
        let len = chunk.len();
        let mut out = match editor.as_mut() {
            Some(ed) => Bytes::from(ed.push(&chunk, &mut |id, ann| decisions.decide(id, ann))),
            None => chunk,
        };
        // The stream ended with this chunk and no trailers follow: end it on the same frame.
        let end = from.is_end_stream();
        if end {
            out = with_held(out, &mut editor);
        }
        sent += out.len();
        if !out.is_empty() || end {
            if !first && !out.is_empty() && !window(&mut to).await {
                return;
            }
            first = false;
            if to.send_data(out, end).is_err() {
                return;
            }
        }
        let _ = from.flow_control().release_capacity(len);
        if end {
            return;
        }
        taken += len;
        if sent >= TURN || taken >= HELD_TURN {
            // Let the connection task write out what is ready, so the receiver can start on a
            // large answer while the rest is edited. Only if more data is there already: if
            // not, the task writes out as it waits, and if the data has ended, the trailers
            // that follow go out in the same write.
            if let Poll::Ready(next) = poll_fn(|cx| Poll::Ready(from.poll_data(cx))).await {
                (sent, taken) = (0, 0);
                if next.is_some() {
                    tokio::task::yield_now().await;
                }
                ready = Some(next);
            }
        }
    }
    let rest = with_held(Bytes::new(), &mut editor);
    if !rest.is_empty() && to.send_data(rest, false).is_err() {
        return;
    }
    let _ = match from.trailers().await {
        Ok(Some(trailers)) => to.send_trailers(trailers),
        Ok(None) => to.send_data(Bytes::new(), true),
        Err(e) => {
            to.send_reset(passed_reason(&e));
            Ok(())
        }
    };
}

/// `out` followed by whatever the editor still holds back (the body is ending).
fn with_held(out: Bytes, editor: &mut Option<StreamEditor>) -> Bytes {
    match editor.as_mut().map(StreamEditor::finish) {
        Some(rest) if out.is_empty() => Bytes::from(rest),
        Some(rest) if !rest.is_empty() => {
            let mut all = BytesMut::from(&out[..]);
            all.extend_from_slice(&rest);
            all.freeze()
        }
        _ => out,
    }
}

/// Waits until everything sent on `to` so far fits the receiver's window; false if the stream is
/// gone.
async fn window(to: &mut SendStream<Bytes>) -> bool {
    to.reserve_capacity(1);
    while to.capacity() == 0 {
        match poll_fn(|cx| to.poll_capacity(cx)).await {
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return false,
        }
    }
    true
}

/// Serves kubelet connections on `listen` until `shutdown` resolves, showing `shown` (a plan, or
/// pass-through until one is set). The audit's record beside `state` is removed when an old
/// kubelet connects (`Shim::void_record`).
///
/// The socket is created race-free: bound inside a fresh directory only its owner can enter,
/// given `socket_mode`, then renamed into place, so it never exists at `listen` with a wider
/// mode, whatever the umask.
pub async fn serve(
    listen: &str,
    runtime_endpoint: &str,
    shown: ShownPlan,
    socket_mode: u32,
    limits: Limits,
    state: Option<&Path>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let listen_path = socket_path(listen)?;
    let runtime_path = socket_path(runtime_endpoint)?;
    let (listener, ours) = bind_private(&listen_path, socket_mode)?;
    info!(listen = %listen_path, runtime = %runtime_path, "shim serving");
    let shim = Arc::new(Shim {
        shown,
        runtime_path,
        limits,
        record_beside: state.map(Path::to_path_buf),
    });
    let (stop, stopped) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                // Over the limit, a connection is closed at once rather than left waiting in
                // the backlog behind others: its client reconnects, and the slots free up as
                // handshake and idle timeouts close what holds them.
                Ok((stream, _)) if connections.len() >= shim.limits.max_connections => {
                    debug!(limit = shim.limits.max_connections, "connection limit reached; closing a new connection");
                    drop(stream);
                }
                Ok((stream, _)) => {
                    connections.spawn(serve_kubelet(shim.clone(), stream, stopped.clone()));
                }
                Err(e) => {
                    warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    ours.remove(&listen_path);
    info!("shim stopping");
    let _ = stop.send(true);
    let drained = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        warn!(
            connections = connections.len(),
            "calls still in flight after {DRAIN:?}; closing"
        );
    }
    Ok(())
}

/// Whether the shim may listen at `path`: `Ok(false)` when nothing is there, `Ok(true)` when a
/// socket nobody serves on is (a shim's, left by a kill: replaced), and an error for anything else
/// there (a live socket, or a file, directory, link… that is someone's and never removed).
pub fn stale_socket_at(path: &str) -> Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    let fail = |reason: String| Error::Input {
        source_name: format!("shim socket {path}"),
        reason,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(fail(format!("cannot look at it: {e}"))),
        Ok(m) if !m.file_type().is_socket() => Err(fail(format!(
            "{} is there, not a socket: kubehash removes only a stale socket; give --listen \
             another path",
            a_kind_of_file(&m.file_type())
        ))),
        Ok(_) if std::os::unix::net::UnixStream::connect(path).is_ok() => {
            Err(fail("another process is serving on this socket".into()))
        }
        Ok(_) => Ok(true),
    }
}

/// The socket file the shim put in place (device, inode): the one it removes when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SocketFile(u64, u64);

impl SocketFile {
    /// Removes `path` if it is still this socket, and nothing else that may have replaced it.
    fn remove(self, path: &str) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if SocketFile(m.dev(), m.ino()) == self {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Binds a Unix socket at `path` with `mode` without a window in which it exists with another
/// mode: bind in a fresh 0700 directory beside it, chmod, rename into place. What stands at
/// `path` is replaced only when it is a socket nobody serves on.
fn bind_private(path: &str, mode: u32) -> Result<(UnixListener, SocketFile)> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let fail = |reason: String| Error::Input {
        source_name: format!("shim socket {path}"),
        reason,
    };
    let target = Path::new(path);
    if stale_socket_at(path)? {
        std::fs::remove_file(target)
            .map_err(|e| fail(format!("cannot remove the stale socket: {e}")))?;
    }
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(e.to_string()))?;
    }
    let private = dir.join(format!(".kubehash-bind-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|e| fail(format!("cannot make {}: {e}", private.display())))?;
    let result = (|| {
        let inner = private.join("cri.sock");
        let listener = UnixListener::bind(&inner).map_err(|e| fail(e.to_string()))?;
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(mode))
            .map_err(|e| fail(format!("cannot set the socket's mode: {e}")))?;
        std::fs::rename(&inner, target)
            .map_err(|e| fail(format!("cannot move the socket into place: {e}")))?;
        let ours = std::fs::symlink_metadata(target)
            .map(|m| SocketFile(m.dev(), m.ino()))
            .map_err(|e| fail(format!("cannot look at the socket moved into place: {e}")))?;
        Ok((listener, ours))
    })();
    let _ = std::fs::remove_dir_all(&private);
    result
}

/// "a regular file", "a directory", …: what stands where a socket was wanted.
fn a_kind_of_file(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "something other than a socket"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cri::keys;

    fn state() -> ShimState {
        let mut translations = BTreeMap::new();
        translations.insert(
            "c1".to_string(),
            Translation {
                pod: "ns/p".into(),
                container: "a".into(),
                stored_hash: "111".into(),
                new_hash: "999".into(),
                stored_hash_without_resources: None,
                new_hash_without_resources: Some("888".into()),
                spec: None,
            },
        );
        ShimState {
            to: "1.29".into(),
            from: None,
            created_at_unix: 0,
            translations,
        }
    }

    #[test]
    fn state_round_trips_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state/shim.json");
        state().save(&p).unwrap();
        assert_eq!(ShimState::load(&p).unwrap(), Some(state()));
        assert_eq!(
            ShimState::load(&dir.path().join("none.json")).unwrap(),
            None
        );
    }

    #[test]
    fn grpc_messages_are_held_whole_and_tails_kept() {
        use crate::runtime::cri::proto;
        use prost::Message;
        let msg = proto::ContainerStatusResponse {
            status: Some(proto::ContainerStatus {
                id: "c1".into(),
                annotations: [(keys::HASH.to_string(), "111".to_string())].into(),
                ..Default::default()
            }),
            info: Default::default(),
        }
        .encode_to_vec();
        let mut framed = BytesMut::new();
        framed.extend_from_slice(&[0]);
        framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        framed.extend_from_slice(&msg);
        framed.extend_from_slice(&[0, 0, 0]); // the start of the next frame
        let decisions = Decisions::new(&state());
        let mut editor = StreamEditor::holding(Carrier::Statuses(1));
        let out = editor.push(&framed, &mut |id, ann| decisions.decide(id, ann));
        assert_eq!(editor.finish(), [0, 0, 0], "the next frame's start is held");
        let got = proto::ContainerStatusResponse::decode(&out[5..]).unwrap();
        assert_eq!(got.status.unwrap().annotations[keys::HASH], "999");
        assert_eq!(
            out[1..5],
            ((out.len() - 5) as u32).to_be_bytes(),
            "its new length"
        );
    }
}
