//! The CRI shim: a transparent proxy between the kubelet and the container runtime that shows the
//! new kubelet the hash it expects for every container that provably runs its current spec, with
//! no writes to the runtime and no runtime restart.
//!
//! It proxies HTTP/2 (gRPC) requests as they are: every method of RuntimeService and
//! ImageService, including ones kubehash's `proto/` subset does not model and the server-streaming
//! `GetContainerEvents`, with headers, trailers (status codes) and deadlines (`grpc-timeout`)
//! untouched. Only the responses that carry container annotations (`ListContainers`,
//! `StreamContainers`, `ContainerStatus`, `PodSandboxStatus`, `GetContainerEvents`) are edited, at
//! the wire level ([`crate::protowire`]): for a container in the [`ShimState`] whose stored hash is
//! still the one planned, `io.kubernetes.container.hash` (and, for targets 1.27 – 1.30,
//! `hashWithoutResources` where present) becomes the target version's value. Containers created
//! after the plan are passed through as they are.
//!
//! The plan is made once and kept in a state file, so a restart of the shim or an API-server
//! outage never changes what the kubelet sees. If the runtime is down, the kubelet gets the
//! runtime's error, or UNAVAILABLE when it cannot be reached: never a made-up answer.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::{Deserialize, Serialize};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, info, warn};

use crate::cri::socket_path;
use crate::error::{Error, Result};
use crate::plan::{ContainerPlan, Verdict};
use crate::protowire::{edit_response, Carrier, Hashes};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

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
    pub created_at_unix: u64,
    /// Container id → translation.
    pub translations: BTreeMap<String, Translation>,
}

impl ShimState {
    /// Translations for every `rewrite` container of a plan.
    pub fn from_plans(plans: &[ContainerPlan], to: &str) -> ShimState {
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
                    },
                ))
            })
            .collect();
        ShimState {
            to: to.into(),
            created_at_unix: crate::journal::now_unix(),
            translations,
        }
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

    /// Writes the state atomically and durably.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::durable::write_json(path, self)
    }

    /// Whether every translation keeps the stored values' lengths.
    pub fn keeps_lengths(&self) -> bool {
        self.translations.values().all(Translation::keeps_lengths)
    }

    /// The hash values to show for one container, given the ones the runtime reported: the
    /// translation, only when the stored hash is still exactly the one planned.
    pub fn decide(&self, id: &[u8], carried: Hashes<'_>) -> Hashes<'_> {
        let Some(t) = std::str::from_utf8(id)
            .ok()
            .and_then(|id| self.translations.get(id))
        else {
            return Hashes::default();
        };
        if carried.hash != Some(t.stored_hash.as_bytes()) {
            return Hashes::default(); // not what was planned: never masked
        }
        Hashes {
            hash: Some(t.new_hash.as_bytes()),
            // Shown only where the container has one.
            hash_without_resources: carried
                .hash_without_resources
                .and(t.new_hash_without_resources.as_deref().map(str::as_bytes)),
        }
    }
}

/// The runtime side: one HTTP/2 connection, made again when the runtime comes back.
struct Upstream {
    path: String,
    sender: tokio::sync::Mutex<Option<SendRequest<Incoming>>>,
}

impl Upstream {
    async fn sender(&self) -> std::result::Result<SendRequest<Incoming>, String> {
        let mut guard = self.sender.lock().await;
        if let Some(s) = guard.as_ref() {
            if !s.is_closed() {
                return Ok(s.clone());
            }
        }
        let stream = UnixStream::connect(&self.path)
            .await
            .map_err(|e| format!("cannot connect to the runtime at {}: {e}", self.path))?;
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(WINDOW)
            .initial_connection_window_size(2 * WINDOW)
            .max_frame_size(MAX_FRAME)
            .handshake(TokioIo::new(tokio::io::BufReader::with_capacity(
                READ_BUFFER,
                stream,
            )))
            .await
            .map_err(|e| {
                format!(
                    "HTTP/2 handshake with the runtime at {} failed: {e}",
                    self.path
                )
            })?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(error = %e, "runtime connection ended");
            }
        });
        *guard = Some(sender.clone());
        Ok(sender)
    }
}

struct Shim {
    state: Arc<ShimState>,
    upstream: Upstream,
    /// Every translation keeps lengths: edit answers as they stream.
    streaming: bool,
}

/// A trailers-only gRPC answer with this status.
fn grpc_error(code: u16, message: &str) -> Response<ProxyBody> {
    let mut r = Response::new(
        Empty::<Bytes>::new()
            .map_err(|e: Infallible| match e {})
            .boxed_unsync(),
    );
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from(code));
    let encoded: String = message
        .bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&encoded) {
        h.insert("grpc-message", v);
    }
    r
}

/// HTTP/2 flow-control window on both sides: large enough that a ListContainers answer for a
/// full node (hundreds of KB) crosses each hop without waiting for window updates.
const WINDOW: u32 = 4 << 20;
/// Largest HTTP/2 frame the shim accepts (fewer frames per large answer).
const MAX_FRAME: u32 = 1 << 20;

/// Read buffer on the runtime connection: a whole-node ListContainers answer (hundreds of KB)
/// arrives in a few reads instead of two per 16 KB HTTP/2 frame.
const READ_BUFFER: usize = 512 << 10;

/// gRPC status UNAVAILABLE.
const UNAVAILABLE: u16 = 14;

async fn handle(
    shim: Arc<Shim>,
    req: Request<Incoming>,
) -> std::result::Result<Response<ProxyBody>, Infallible> {
    let path = req.uri().path().to_string();
    let carrier = match path.strip_prefix('/').and_then(|p| p.split_once('/')) {
        Some(("runtime.v1.RuntimeService" | "runtime.v1alpha2.RuntimeService", method)) => {
            Carrier::for_method(method)
        }
        _ => None,
    };
    let (mut parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or(path.clone());
    parts.uri = match format!("http://localhost{pq}").parse() {
        Ok(u) => u,
        Err(_) => return Ok(grpc_error(13, "kubehash shim: bad request path")),
    };
    parts.version = http::Version::HTTP_2;
    let up = Request::from_parts(parts, body);
    let mut sender = match shim.upstream.sender().await {
        Ok(s) => s,
        Err(e) => {
            warn!(method = %path, error = %e, "runtime unavailable");
            return Ok(grpc_error(UNAVAILABLE, &e));
        }
    };
    let resp = match sender.send_request(up).await {
        Ok(r) => r,
        Err(e) => {
            warn!(method = %path, error = %e, "runtime request failed");
            return Ok(grpc_error(
                UNAVAILABLE,
                &format!("the runtime at {} did not answer: {e}", shim.upstream.path),
            ));
        }
    };
    let (parts, body) = resp.into_parts();
    let body = match carrier {
        None => body.map_err(|e| Box::new(e) as BoxError).boxed_unsync(),
        Some(c) => translate(body, Editor::new(c, shim.streaming), shim.state.clone()),
    };
    Ok(Response::from_parts(parts, body))
}

/// Takes every complete gRPC message from `buf`, edits the uncompressed ones, and returns the
/// bytes to send; an incomplete tail stays in `buf`.
fn take_messages(buf: &mut BytesMut, carrier: Carrier, state: &ShimState) -> Bytes {
    let mut out = BytesMut::new();
    while buf.len() >= 5 {
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if buf.len() < 5 + len {
            break;
        }
        let compressed = buf[0] != 0;
        let frame = buf.split_to(5 + len);
        let edited = if compressed {
            None // compressed messages are forwarded untouched (the kubelet does not compress)
        } else {
            edit_response(&frame[5..], carrier, &mut |id, ann| state.decide(id, ann))
        };
        match edited {
            Some(msg) => {
                out.extend_from_slice(&[0]);
                out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
                out.extend_from_slice(&msg);
            }
            None => out.extend_from_slice(&frame),
        }
    }
    out.freeze()
}

/// How a response's gRPC messages are edited: whole messages (lengths may change), or in place as
/// the bytes stream (every translation keeps lengths).
enum Editor {
    Whole(Carrier, BytesMut),
    Streaming(crate::protowire::StreamEditor),
}

impl Editor {
    fn new(carrier: Carrier, streaming: bool) -> Editor {
        if streaming {
            Editor::Streaming(crate::protowire::StreamEditor::new(carrier))
        } else {
            Editor::Whole(carrier, BytesMut::new())
        }
    }

    /// Takes the next body bytes; returns what can be sent on now.
    fn push(&mut self, data: &[u8], state: &ShimState) -> Bytes {
        match self {
            Editor::Whole(carrier, buf) => {
                buf.extend_from_slice(data);
                take_messages(buf, *carrier, state)
            }
            Editor::Streaming(ed) => {
                let mut out = Vec::with_capacity(data.len());
                ed.push(data, &mut |id, ann| state.decide(id, ann), &mut out);
                Bytes::from(out)
            }
        }
    }

    /// The body ended (or its trailers came): what is still held goes on unedited.
    fn finish(&mut self) -> Bytes {
        match self {
            Editor::Whole(_, buf) => buf.split().freeze(),
            Editor::Streaming(ed) => {
                let mut out = Vec::new();
                ed.finish(&mut out);
                Bytes::from(out)
            }
        }
    }
}

/// A response body whose gRPC messages are edited as they pass; trailers pass as is.
fn translate(body: Incoming, editor: Editor, state: Arc<ShimState>) -> ProxyBody {
    type St = Option<(Incoming, Editor, std::collections::VecDeque<Frame<Bytes>>)>;
    let init: St = Some((body, editor, Default::default()));
    let stream = futures_util::stream::unfold(init, move |st: St| {
        let state = state.clone();
        async move {
            let (mut body, mut editor, mut pending) = st?;
            loop {
                if let Some(f) = pending.pop_front() {
                    return Some((Ok::<_, BoxError>(f), Some((body, editor, pending))));
                }
                match body.frame().await {
                    None => {
                        let rest = editor.finish();
                        if rest.is_empty() {
                            return None;
                        }
                        return Some((Ok(Frame::data(rest)), None));
                    }
                    Some(Err(e)) => return Some((Err(Box::new(e) as BoxError), None)),
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => {
                            let out = editor.push(&data, &state);
                            if !out.is_empty() {
                                pending.push_back(Frame::data(out));
                            }
                        }
                        Err(trailers) => {
                            let rest = editor.finish();
                            if !rest.is_empty() {
                                pending.push_back(Frame::data(rest));
                            }
                            pending.push_back(trailers);
                        }
                    },
                }
            }
        }
    });
    StreamBody::new(stream).boxed_unsync()
}

/// Runs the shim until `shutdown` resolves, then stops accepting, lets requests in flight finish
/// (up to 10 s) and removes its socket.
pub async fn serve(
    listen: &str,
    runtime_endpoint: &str,
    state: ShimState,
    socket_mode: u32,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let listen_path = socket_path(listen)?;
    let runtime_path = socket_path(runtime_endpoint)?;
    let fail = |reason: String| Error::Input {
        source_name: format!("shim socket {listen_path}"),
        reason,
    };
    if Path::new(&listen_path).exists() {
        if UnixStream::connect(&listen_path).await.is_ok() {
            return Err(fail("another process is serving on this socket".into()));
        }
        std::fs::remove_file(&listen_path)
            .map_err(|e| fail(format!("cannot remove the stale socket: {e}")))?;
    }
    if let Some(dir) = Path::new(&listen_path).parent() {
        std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
    }
    let listener = UnixListener::bind(&listen_path).map_err(|e| fail(e.to_string()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&listen_path, std::fs::Permissions::from_mode(socket_mode))
            .map_err(|e| fail(format!("cannot set the socket's mode: {e}")))?;
    }
    info!(listen = %listen_path, runtime = %runtime_path, to = %state.to, translated = state.translations.len(),
        streaming = state.keeps_lengths(), "shim serving");
    let streaming = state.keeps_lengths();
    let shim = Arc::new(Shim {
        streaming,
        state: Arc::new(state),
        upstream: Upstream {
            path: runtime_path,
            sender: tokio::sync::Mutex::new(None),
        },
    });
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shim = shim.clone();
                let service = hyper::service::service_fn(move |req| handle(shim.clone(), req));
                let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .initial_stream_window_size(WINDOW)
                    .initial_connection_window_size(2 * WINDOW)
                    .max_frame_size(MAX_FRAME)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        debug!(error = %e, "kubelet connection ended");
                    }
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(&listen_path);
    info!("shim stopping");
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), graceful.shutdown()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::keys;

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
            },
        );
        ShimState {
            to: "1.29".into(),
            created_at_unix: 0,
            translations,
        }
    }

    #[test]
    fn translates_only_what_was_planned() {
        let s = state();
        let carried = |h: &'static str| Hashes {
            hash: Some(h.as_bytes()),
            hash_without_resources: None,
        };
        assert_eq!(
            s.decide(b"c1", carried("111")),
            Hashes {
                hash: Some(b"999"),
                hash_without_resources: None
            }
        );
        assert_eq!(
            s.decide(b"c1", carried("222")),
            Hashes::default(),
            "a hash that changed is never masked"
        );
        assert_eq!(
            s.decide(b"other", carried("111")),
            Hashes::default(),
            "containers created later pass through"
        );
        let both = Hashes {
            hash_without_resources: Some(b"x"),
            ..carried("111")
        };
        assert_eq!(
            s.decide(b"c1", both).hash_without_resources,
            Some(&b"888"[..])
        );
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
    fn grpc_frames_are_edited_whole_and_tails_kept() {
        use crate::cri::proto;
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
        let out = take_messages(&mut framed, Carrier::Statuses(1), &state());
        assert_eq!(&framed[..], &[0, 0, 0]);
        let got = proto::ContainerStatusResponse::decode(&out[5..]).unwrap();
        assert_eq!(got.status.unwrap().annotations[keys::HASH], "999");
    }
}
