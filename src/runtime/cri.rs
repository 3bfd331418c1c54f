//! A CRI client over a unix socket: what the kubelet sees of a node's containers.
//!
//! Speaks `runtime.v1`, and falls back to `runtime.v1alpha2` for runtimes that only have that
//! (containerd < 1.7 with old configs, CRI-O < 1.23): the messages kubehash uses are identical in
//! both, so one set of generated types serves both and only the gRPC path differs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubehash::Error> {
//! let mut cri = kubehash::runtime::cri::Cri::connect("unix:///run/containerd/containerd.sock").await?;
//! for c in cri.list_containers().await? {
//!     println!("{} {:?}", c.id, c.annotations.get("io.kubernetes.container.hash"));
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::{Error, Result};
use crate::runtime::record::CreatedWith;

/// The generated CRI types (our `proto/cri.proto` subset of runtime.v1).
pub mod proto {
    tonic::include_proto!("runtime.v1");
}

/// Labels and annotations the kubelet puts on CRI objects.
pub mod keys {
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    pub const HASH: &str = "io.kubernetes.container.hash";
    pub const HASH_WITHOUT_RESOURCES: &str = "io.kubernetes.container.hashWithoutResources";
}

/// Which CRI API package the runtime answered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiVersion {
    V1,
    V1Alpha2,
}

impl ApiVersion {
    pub fn package(self) -> &'static str {
        match self {
            ApiVersion::V1 => "runtime.v1",
            ApiVersion::V1Alpha2 => "runtime.v1alpha2",
        }
    }
}

/// A connected CRI runtime.
#[derive(Debug, Clone)]
pub struct Cri {
    grpc: tonic::client::Grpc<Channel>,
    api: ApiVersion,
    endpoint: String,
    version: proto::VersionResponse,
}

/// How long one CRI call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The socket path of `unix:///path` or a plain `/path`.
pub fn socket_path(endpoint: &str) -> Result<String> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(path.to_string())
    } else {
        Err(Error::Cri {
            endpoint: endpoint.to_string(),
            reason: "expected unix:///path/to/socket or an absolute socket path".into(),
        })
    }
}

/// A tonic channel to a unix socket (the URI is a placeholder; the connector ignores it).
pub async fn unix_channel(endpoint: &str) -> Result<Channel> {
    let path = socket_path(endpoint)?;
    let fail = |reason: String| Error::Cri {
        endpoint: endpoint.to_string(),
        reason,
    };
    match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(fail(format!(
                "no socket at {path} (is the runtime running?)"
            )))
        }
        Err(e) => return Err(fail(format!("cannot reach {path}: {e}"))),
        Ok(m) if !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            let what = if m.is_dir() { "a directory" } else { "a file" };
            return Err(fail(format!("{path} is {what}, not a socket")));
        }
        Ok(_) => {}
    }
    let connector_path = path.clone();
    Endpoint::try_from("http://[::]:0")
        .map_err(|e| fail(e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = connector_path.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| {
            fail(format!(
                "cannot connect to {path}: {}",
                crate::error::causes(&e)
            ))
        })
}

impl Cri {
    /// Connects and asks the runtime for its version, on runtime.v1 first, then v1alpha2.
    pub async fn connect(endpoint: &str) -> Result<Cri> {
        let channel = unix_channel(endpoint).await?;
        let mut cri = Cri {
            grpc: tonic::client::Grpc::new(channel),
            api: ApiVersion::V1,
            endpoint: endpoint.to_string(),
            version: proto::VersionResponse::default(),
        };
        let req = proto::VersionRequest {
            version: "0.1.0".into(),
        };
        match cri
            .call::<_, proto::VersionResponse>("Version", req.clone())
            .await
        {
            Ok(v) => cri.version = v,
            Err(CallError::Status(s)) if s.code() == tonic::Code::Unimplemented => {
                cri.api = ApiVersion::V1Alpha2;
                cri.version = cri
                    .call("Version", req)
                    .await
                    .map_err(|e| cri.error("Version", e))?;
            }
            Err(e) => return Err(cri.not_a_runtime(e)),
        }
        Ok(cri)
    }

    /// The first call failed other than by being unimplemented: say what that suggests about
    /// what listens at the endpoint, then what failed.
    fn not_a_runtime(&self, e: CallError) -> Error {
        let hint = match &e {
            // tower's timeout, as tonic reports it.
            CallError::Status(s) if s.message().contains("Timeout expired") => format!(
                "nothing answered the first call within {CALL_TIMEOUT:?} (a runtime that hangs, or \
                 not a CRI socket)"
            ),
            CallError::Status(s)
                if matches!(
                    s.code(),
                    tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::Internal
                ) =>
            {
                "what listens there does not speak CRI (gRPC), or closed the connection".to_string()
            }
            _ => String::new(),
        };
        match self.error("Version", e) {
            Error::Cri { endpoint, reason } if !hint.is_empty() => Error::Cri {
                endpoint,
                reason: format!("{hint}: {reason}"),
            },
            other => other,
        }
    }

    pub fn api(&self) -> ApiVersion {
        self.api
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The runtime's answer to Version (name, version, API version).
    pub fn runtime_version(&self) -> &proto::VersionResponse {
        &self.version
    }

    fn error(&self, method: &str, e: CallError) -> Error {
        Error::Cri {
            endpoint: self.endpoint.clone(),
            reason: match e {
                CallError::Status(s) => format!("{method}: {} ({:?})", s.message(), s.code()),
                CallError::Path => format!("{method}: bad method path"),
            },
        }
    }

    async fn call<Req, Resp>(
        &mut self,
        method: &str,
        req: Req,
    ) -> std::result::Result<Resp, CallError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let path =
            PathAndQuery::try_from(format!("/{}.RuntimeService/{method}", self.api.package()))
                .map_err(|_| CallError::Path)?;
        self.grpc
            .ready()
            .await
            .map_err(|e| CallError::Status(tonic::Status::unavailable(e.to_string())))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        self.grpc
            .unary(tonic::Request::new(req), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(CallError::Status)
    }

    /// Any unary RuntimeService call by method name (`RunPodSandbox`), in the API version the
    /// runtime speaks. kubehash itself only reads; tests create pods through this as a kubelet
    /// does.
    pub async fn rpc<Req, Resp>(&mut self, method: &str, req: Req) -> Result<Resp>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let r = self.call(method, req).await;
        r.map_err(|e| self.error(method, e))
    }

    /// Every container the runtime knows (all states).
    pub async fn list_containers(&mut self) -> Result<Vec<proto::Container>> {
        let r: proto::ListContainersResponse = self
            .rpc(
                "ListContainers",
                proto::ListContainersRequest { filter: None },
            )
            .await?;
        Ok(r.containers)
    }

    pub async fn container_status(&mut self, id: &str) -> Result<proto::ContainerStatusResponse> {
        self.rpc(
            "ContainerStatus",
            proto::ContainerStatusRequest {
                container_id: id.into(),
                verbose: true,
            },
        )
        .await
    }

    /// What container `id` was created with, where the runtime says so: containerd's verbose
    /// `ContainerStatus` carries the CRI config in `info["info"]` (`{"config": …}`). `None` where
    /// the runtime gives no such config, or the container is gone.
    pub async fn created_with(&mut self, id: &str) -> Option<CreatedWith> {
        let status = self.container_status(id).await.ok()?;
        let info: serde_json::Value = serde_json::from_str(status.info.get("info")?).ok()?;
        let config = info.get("config").filter(|c| c.is_object())?;
        CreatedWith::from_config(config).ok()
    }

    /// A sandbox's status: state, network namespace mode and IP (what `PodSandboxChanged` reads).
    pub async fn pod_sandbox_status(&mut self, id: &str) -> Result<proto::PodSandboxStatus> {
        let r: proto::PodSandboxStatusResponse = self
            .rpc(
                "PodSandboxStatus",
                proto::PodSandboxStatusRequest {
                    pod_sandbox_id: id.into(),
                    verbose: false,
                },
            )
            .await?;
        r.status.ok_or_else(|| Error::Cri {
            endpoint: self.endpoint.clone(),
            reason: format!("PodSandboxStatus {id}: empty answer"),
        })
    }

    /// The cgroup driver the runtime reports (`systemd`, `cgroupfs`), or `None` where the runtime
    /// does not implement `RuntimeConfig` (containerd before 2.0, CRI-O before 1.28).
    pub async fn cgroup_driver(&mut self) -> Result<Option<String>> {
        let r: std::result::Result<proto::RuntimeConfigResponse, CallError> = self
            .call("RuntimeConfig", proto::RuntimeConfigRequest {})
            .await;
        match r {
            Ok(r) => Ok(r
                .linux
                .map(|l| match proto::CgroupDriver::try_from(l.cgroup_driver) {
                    Ok(proto::CgroupDriver::Cgroupfs) => "cgroupfs".to_string(),
                    _ => "systemd".to_string(),
                })),
            Err(CallError::Status(s)) if s.code() == tonic::Code::Unimplemented => Ok(None),
            Err(e) => Err(self.error("RuntimeConfig", e)),
        }
    }

    /// Every pod sandbox the runtime knows (for preflight and static pods).
    pub async fn list_pod_sandboxes(&mut self) -> Result<Vec<proto::PodSandbox>> {
        let r: proto::ListPodSandboxResponse = self
            .rpc(
                "ListPodSandbox",
                proto::ListPodSandboxRequest { filter: None },
            )
            .await?;
        Ok(r.items)
    }
}

enum CallError {
    Status(tonic::Status),
    Path,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            "/run/containerd/containerd.sock"
        );
        assert_eq!(socket_path("/tmp/x.sock").unwrap(), "/tmp/x.sock");
        assert!(socket_path("tcp://1.2.3.4:5").is_err());
    }

    #[tokio::test]
    async fn a_missing_socket_is_a_clear_error() {
        let err = Cri::connect("unix:///nonexistent/cri.sock")
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "CRI endpoint unix:///nonexistent/cri.sock: no socket at /nonexistent/cri.sock (is the runtime running?)"
        );
    }
}
