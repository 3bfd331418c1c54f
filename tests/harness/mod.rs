//! A real containerd for integration tests (Debian's `containerd` and `runc`, installed by
//! `.ci/run`), on its own root, state, socket and runc root under a temporary directory, with a
//! locally built OCI image (busybox-static) as both the sandbox image and the container image, the
//! `native` snapshotter and `restrict_oom_score_adj = true` (needed on these machines), and
//! host-network pods without a hostname. See docs/containerd-notes.md.
//!
//! Pods are created through the real CRI API the way a kubelet of a given version does: labels,
//! annotations and the container hash computed by kubehash for that version.
//!
//! If containerd cannot be started the test fails: it never skips silently.

#![allow(dead_code)]

pub mod apiserver;
pub mod kills;
pub mod kubelet;
pub mod rbac;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kubehash::kubelet::hash::hash_container;
use kubehash::kubelet::sink::format_hash;
use kubehash::kubelet::version::KubeletVersion;
use kubehash::runtime::cri::{keys, proto, Cri};
use serde_json::Value;

/// The calls a kubelet makes to create and remove pods, which kubehash itself never makes.
#[allow(async_fn_in_trait, dead_code)]
pub trait KubeletCalls {
    async fn run_pod_sandbox(
        &mut self,
        config: proto::PodSandboxConfig,
    ) -> kubehash::Result<String>;
    async fn create_container(
        &mut self,
        sandbox_id: &str,
        config: proto::ContainerConfig,
        sandbox: proto::PodSandboxConfig,
    ) -> kubehash::Result<String>;
    async fn start_container(&mut self, id: &str) -> kubehash::Result<()>;
    async fn stop_container(&mut self, id: &str, timeout_s: i64) -> kubehash::Result<()>;
    async fn remove_container(&mut self, id: &str) -> kubehash::Result<()>;
    async fn stop_pod_sandbox(&mut self, id: &str) -> kubehash::Result<()>;
    async fn remove_pod_sandbox(&mut self, id: &str) -> kubehash::Result<()>;
}

impl KubeletCalls for Cri {
    async fn run_pod_sandbox(
        &mut self,
        config: proto::PodSandboxConfig,
    ) -> kubehash::Result<String> {
        let r: proto::RunPodSandboxResponse = self
            .rpc(
                "RunPodSandbox",
                proto::RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                },
            )
            .await?;
        Ok(r.pod_sandbox_id)
    }

    async fn create_container(
        &mut self,
        sandbox_id: &str,
        config: proto::ContainerConfig,
        sandbox: proto::PodSandboxConfig,
    ) -> kubehash::Result<String> {
        let r: proto::CreateContainerResponse = self
            .rpc(
                "CreateContainer",
                proto::CreateContainerRequest {
                    pod_sandbox_id: sandbox_id.into(),
                    config: Some(config),
                    sandbox_config: Some(sandbox),
                },
            )
            .await?;
        Ok(r.container_id)
    }

    async fn start_container(&mut self, id: &str) -> kubehash::Result<()> {
        let _: proto::StartContainerResponse = self
            .rpc(
                "StartContainer",
                proto::StartContainerRequest {
                    container_id: id.into(),
                },
            )
            .await?;
        Ok(())
    }

    async fn stop_container(&mut self, id: &str, timeout_s: i64) -> kubehash::Result<()> {
        let _: proto::StopContainerResponse = self
            .rpc(
                "StopContainer",
                proto::StopContainerRequest {
                    container_id: id.into(),
                    timeout: timeout_s,
                },
            )
            .await?;
        Ok(())
    }

    async fn remove_container(&mut self, id: &str) -> kubehash::Result<()> {
        let _: proto::RemoveContainerResponse = self
            .rpc(
                "RemoveContainer",
                proto::RemoveContainerRequest {
                    container_id: id.into(),
                },
            )
            .await?;
        Ok(())
    }

    async fn stop_pod_sandbox(&mut self, id: &str) -> kubehash::Result<()> {
        let _: proto::StopPodSandboxResponse = self
            .rpc(
                "StopPodSandbox",
                proto::StopPodSandboxRequest {
                    pod_sandbox_id: id.into(),
                },
            )
            .await?;
        Ok(())
    }

    async fn remove_pod_sandbox(&mut self, id: &str) -> kubehash::Result<()> {
        let _: proto::RemovePodSandboxResponse = self
            .rpc(
                "RemovePodSandbox",
                proto::RemovePodSandboxRequest {
                    pod_sandbox_id: id.into(),
                },
            )
            .await?;
        Ok(())
    }
}

/// The image every pod and sandbox uses; its default command sleeps.
pub const IMAGE: &str = "docker.io/local/app:1";

/// One containerd at a time: the tests share the machine's two cores.
static SERIAL: Mutex<()> = Mutex::new(());

pub struct Containerd {
    pub dir: PathBuf,
    child: Option<Child>,
    _serial: MutexGuard<'static, ()>,
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256(path: &Path) -> (String, u64) {
    let out = run(Command::new("sha256sum").arg(path));
    let digest = out
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    (digest, size)
}

/// Builds an OCI image layout tarball holding busybox-static, and returns its path.
fn build_image(dir: &Path) -> PathBuf {
    let layer = dir.join("image-src/layer");
    let blobs = dir.join("image-src/oci/blobs/sha256");
    std::fs::create_dir_all(layer.join("bin")).unwrap();
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::copy("/bin/busybox", layer.join("bin/busybox")).expect(
        "busybox-static is needed to build the test image (apt-get install busybox-static)",
    );
    for applet in ["sh", "sleep", "cat", "echo", "ls"] {
        std::os::unix::fs::symlink("busybox", layer.join("bin").join(applet)).unwrap();
    }
    // The containers get their spec's command and args, as the kubelet passes them; the test
    // specs' programs are stand-ins that sleep, whatever their arguments.
    for program in [
        "etcd",
        "kube-apiserver",
        "kube-scheduler",
        "kube-controller-manager",
        "app",
    ] {
        let path = layer.join("bin").join(program);
        std::fs::write(&path, "#!/bin/sh\nexec /bin/sleep 1000000\n").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let layer_tar = dir.join("image-src/layer.tar");
    run(Command::new("tar")
        .args(["-C"])
        .arg(&layer)
        .args([
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--sort=name",
            "--mtime=@0",
            "-cf",
        ])
        .arg(&layer_tar)
        .arg("."));
    let blob = |path: &Path| {
        let (d, s) = sha256(path);
        std::fs::copy(path, blobs.join(&d)).unwrap();
        (d, s)
    };
    let (l, ls) = blob(&layer_tar);
    let config = dir.join("image-src/config.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"Entrypoint":["/bin/sh","-c","exec /bin/sleep 1000000","--"],"Env":["PATH=/bin"]}},"rootfs":{{"type":"layers","diff_ids":["sha256:{l}"]}}}}"#
        ),
    )
    .unwrap();
    let (c, cs) = blob(&config);
    let manifest = dir.join("image-src/manifest.json");
    std::fs::write(
        &manifest,
        format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{c}","size":{cs}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:{l}","size":{ls}}}]}}"#
        ),
    )
    .unwrap();
    let (m, ms) = blob(&manifest);
    let oci = dir.join("image-src/oci");
    std::fs::write(
        oci.join("index.json"),
        format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{m}","size":{ms},"annotations":{{"io.containerd.image.name":"{IMAGE}","org.opencontainers.image.ref.name":"1"}}}}]}}"#
        ),
    )
    .unwrap();
    std::fs::write(oci.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let image = dir.join("image.tar");
    run(Command::new("tar")
        .arg("-C")
        .arg(&oci)
        .arg("-cf")
        .arg(&image)
        .arg("."));
    image
}

impl Containerd {
    /// Starts containerd on a fresh temporary directory and imports the test image.
    pub fn start() -> Containerd {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        for tool in ["containerd", "runc", "ctr"] {
            assert!(
                Command::new("sh")
                    .args(["-c", &format!("command -v {tool}")])
                    .stdout(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false),
                "{tool} is not installed: the containerd tests need Debian's containerd and runc (see .ci/run)"
            );
        }
        // Unix socket paths are limited to 108 bytes: keep the directory short.
        let dir = PathBuf::from(format!(
            "/tmp/kh-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(dir.join("cni/bin")).unwrap();
        std::fs::create_dir_all(dir.join("cni/conf")).unwrap();
        let image = build_image(&dir);
        let d = dir.display();
        std::fs::write(
            dir.join("config.toml"),
            format!(
                r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"
"#
            ),
        )
        .unwrap();
        let mut c = Containerd {
            dir,
            child: None,
            _serial: serial,
        };
        c.spawn();
        run(Command::new("ctr")
            .arg("--address")
            .arg(c.socket())
            .args(["-n", "k8s.io", "images", "import", "--all-platforms"])
            .arg(&image));
        c
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// `unix:///…/containerd.sock`
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// containerd's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .unwrap();
        let _ = std::fs::remove_file(self.socket());
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start containerd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.socket().exists() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("containerd exited ({status}) during start:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not open its socket in 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_cri_ready();
    }

    /// Waits until containerd's CRI plugin answers (right after a start it says
    /// "server is not initialized yet" for a moment).
    fn wait_cri_ready(&self) {
        let ep = self.endpoint();
        let ready = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let end = Instant::now() + Duration::from_secs(30);
                loop {
                    if let Ok(mut c) = Cri::connect(&ep).await {
                        if c.list_containers().await.is_ok() {
                            return Some(());
                        }
                    }
                    if Instant::now() > end {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .join()
        .ok()
        .flatten();
        assert!(
            ready.is_some(),
            "containerd's CRI did not become ready in 30 s:\n{}",
            self.log()
        );
    }

    /// Stops containerd (SIGTERM) and waits for it; shims and containers keep running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Restarts containerd, as an operator would after rewriting its metadata.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Starts containerd again after [`Containerd::stop`], on the same root and socket.
    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// The PID of a container's task as runc sees it.
    pub fn task_pid(&self, id: &str) -> Option<u32> {
        let out = Command::new("runc")
            .arg("--root")
            .arg(self.dir.join("runc/k8s.io"))
            .args(["state", id])
            .output()
            .ok()?;
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        v["pid"].as_u64().map(|p| p as u32)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Kill every container and sandbox task, then containerd and its shims, then the files.
        let runc_root = self.dir.join("runc/k8s.io");
        if let Ok(out) = Command::new("runc")
            .arg("--root")
            .arg(&runc_root)
            .args(["list", "-q"])
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(&runc_root)
                    .args(["kill", id, "KILL"])
                    .output();
            }
        }
        self.stop();
        let _ = Command::new("pkill")
            .args(["-9", "-f", &self.dir.display().to_string()])
            .status();
        std::thread::sleep(Duration::from_millis(200));
        if let Ok(mounts) = std::fs::read_to_string("/proc/mounts") {
            let prefix = self.dir.display().to_string();
            let mut points: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter(|m| m.starts_with(&prefix))
                .collect();
            points.sort_by_key(|p| std::cmp::Reverse(p.len()));
            for m in points {
                let _ = Command::new("umount").args(["-l", m]).status();
            }
        }
        if std::env::var_os("KUBEHASH_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One container of a test pod: its spec and, optionally, the hash to store instead of the
/// creating kubelet's (to model a spec that changed after the container was created).
pub struct TestContainer {
    pub spec: Value,
    pub stored_hash: Option<String>,
}

/// A pod created over CRI as kubelet `version` creates it.
pub struct CreatedPod {
    pub sandbox_id: String,
    pub container_ids: Vec<String>,
    pub config: proto::PodSandboxConfig,
}

fn ns_options() -> proto::NamespaceOption {
    proto::NamespaceOption {
        network: proto::NamespaceMode::Node as i32,
        pid: proto::NamespaceMode::Container as i32,
        ipc: proto::NamespaceMode::Pod as i32,
        target_id: String::new(),
    }
}

/// Runs a host-network sandbox and creates and starts each container with the labels and
/// annotations kubelet `version` sets, including its `io.kubernetes.container.hash`.
pub async fn create_pod(
    cri: &mut Cri,
    logs: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
    containers: &[TestContainer],
    version: KubeletVersion,
) -> CreatedPod {
    let source = [("kubernetes.io/config.source", "api")];
    create_pod_from(
        cri, logs, namespace, name, uid, containers, version, &source,
    )
    .await
}

/// A static pod as the kubelet runs one read from a manifest file: its sandbox is named
/// `<manifest name>-<node>`, carries `kubernetes.io/config.source: file` and the UID the kubelet
/// derived as `kubernetes.io/config.hash`.
#[allow(dead_code)]
pub async fn create_static_pod(
    cri: &mut Cri,
    logs: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
    containers: &[TestContainer],
    version: KubeletVersion,
) -> CreatedPod {
    let source = [
        ("kubernetes.io/config.source", "file"),
        ("kubernetes.io/config.hash", uid),
    ];
    create_pod_from(
        cri, logs, namespace, name, uid, containers, version, &source,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn create_pod_from(
    cri: &mut Cri,
    logs: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
    containers: &[TestContainer],
    version: KubeletVersion,
    source: &[(&str, &str)],
) -> CreatedPod {
    let mut labels = HashMap::new();
    labels.insert(keys::POD_UID.to_string(), uid.to_string());
    labels.insert(keys::POD_NAMESPACE.to_string(), namespace.to_string());
    labels.insert(keys::POD_NAME.to_string(), name.to_string());
    let config = proto::PodSandboxConfig {
        metadata: Some(proto::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: namespace.into(),
            attempt: 0,
        }),
        hostname: String::new(),
        log_directory: logs
            .join(format!("{namespace}_{name}_{uid}"))
            .display()
            .to_string(),
        labels: labels.clone(),
        annotations: std::iter::once(("kubernetes.io/config.seen", "2026-01-01T00:00:00Z"))
            .chain(source.iter().copied())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        linux: Some(proto::LinuxPodSandboxConfig {
            cgroup_parent: String::new(),
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(ns_options()),
                readonly_rootfs: false,
                privileged: false,
            }),
            sysctls: HashMap::new(),
        }),
    };
    let sandbox_id = cri
        .run_pod_sandbox(config.clone())
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox {namespace}/{name}: {e}"));
    let mut container_ids = Vec::new();
    for tc in containers {
        let cname = tc.spec["name"]
            .as_str()
            .expect("container name")
            .to_string();
        let hashes = hash_container(&tc.spec, &[version], "test").expect("test spec hashes");
        let mut annotations: HashMap<String, String> = [
            (
                keys::HASH.to_string(),
                tc.stored_hash
                    .clone()
                    .unwrap_or_else(|| format_hash(hashes.hash[0].1)),
            ),
            (
                "io.kubernetes.container.restartCount".to_string(),
                "0".to_string(),
            ),
            (
                "io.kubernetes.container.terminationMessagePath".to_string(),
                "/dev/termination-log".to_string(),
            ),
            (
                "io.kubernetes.container.terminationMessagePolicy".to_string(),
                "File".to_string(),
            ),
            (
                "io.kubernetes.pod.terminationGracePeriod".to_string(),
                "30".to_string(),
            ),
        ]
        .into();
        if let Some(&(_, h)) = hashes.hash_without_resources.first() {
            annotations.insert(keys::HASH_WITHOUT_RESOURCES.to_string(), format_hash(h));
        }
        let mut clabels = labels.clone();
        clabels.insert(keys::CONTAINER_NAME.to_string(), cname.clone());
        let caps = &tc.spec["securityContext"]["capabilities"];
        let cconfig = proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: cname.clone(),
                attempt: 0,
            }),
            // kubelet ≥ 1.28 (kubernetes#118652): `UserSpecifiedImage: container.Image`.
            image: Some(proto::ImageSpec {
                image: IMAGE.into(),
                user_specified_image: if version.minor() >= 28 {
                    tc.spec["image"].as_str().unwrap_or_default().into()
                } else {
                    String::new()
                },
                ..Default::default()
            }),
            // generateContainerConfig: command, args and env (no test spec has a `$(VAR)` to
            // expand, or a valueFrom to resolve), workingDir, stdin and tty, as the spec says.
            command: strings(&tc.spec["command"]),
            args: strings(&tc.spec["args"]),
            envs: environment(&tc.spec["env"]),
            working_dir: tc.spec["workingDir"].as_str().unwrap_or_default().into(),
            stdin: tc.spec["stdin"].as_bool().unwrap_or_default(),
            stdin_once: tc.spec["stdinOnce"].as_bool().unwrap_or_default(),
            tty: tc.spec["tty"].as_bool().unwrap_or_default(),
            labels: clabels,
            annotations,
            log_path: format!("{cname}/0.log"),
            // convertToRuntimeSecurityContext and AddNoNewPrivileges: the container's own
            // security context as the spec says (no capabilities where it names none).
            linux: Some(proto::LinuxContainerConfig {
                security_context: Some(proto::LinuxContainerSecurityContext {
                    capabilities: caps.is_object().then(|| proto::Capability {
                        add_capabilities: strings(&caps["add"]),
                        drop_capabilities: strings(&caps["drop"]),
                    }),
                    privileged: flag(&tc.spec, "privileged"),
                    namespace_options: Some(ns_options()),
                    readonly_rootfs: flag(&tc.spec, "readOnlyRootFilesystem"),
                    no_new_privs: tc.spec["securityContext"]["allowPrivilegeEscalation"]
                        == serde_json::json!(false),
                    // The user and group as the container sets them (no test pod sets them
                    // at pod level, and the image names no user); the seccomp profile of
                    // `getSeccompProfile`, Unconfined where none is named.
                    run_as_user: tc.spec["securityContext"]["runAsUser"]
                        .as_i64()
                        .map(|value| proto::Int64Value { value }),
                    run_as_group: tc.spec["securityContext"]["runAsGroup"]
                        .as_i64()
                        .map(|value| proto::Int64Value { value }),
                    seccomp: Some(proto::SecurityProfile {
                        profile_type: match tc.spec["securityContext"]["seccompProfile"]["type"]
                            .as_str()
                        {
                            Some("RuntimeDefault") => {
                                proto::security_profile::ProfileType::RuntimeDefault
                            }
                            _ => proto::security_profile::ProfileType::Unconfined,
                        } as i32,
                        localhost_ref: String::new(),
                    }),
                    ..Default::default()
                }),
            }),
        };
        let id = cri
            .create_container(&sandbox_id, cconfig, config.clone())
            .await
            .unwrap_or_else(|e| panic!("CreateContainer {cname}: {e}"));
        cri.start_container(&id)
            .await
            .unwrap_or_else(|e| panic!("StartContainer {cname}: {e}"));
        container_ids.push(id);
    }
    CreatedPod {
        sandbox_id,
        container_ids,
        config,
    }
}

/// A container's `securityContext` flag, unset being false.
fn flag(spec: &Value, key: &str) -> bool {
    spec["securityContext"][key].as_bool().unwrap_or_default()
}

/// The environment the kubelet makes of a spec's `env` of plain values
/// (`makeEnvironmentVariables`): each name once, its last value.
fn environment(env: &Value) -> Vec<proto::KeyValue> {
    let mut out: Vec<proto::KeyValue> = Vec::new();
    for e in env.as_array().into_iter().flatten() {
        let key = e["name"].as_str().unwrap_or_default().to_string();
        let value = e["value"].as_str().unwrap_or_default().to_string();
        out.retain(|kv| kv.key != key);
        out.push(proto::KeyValue { key, value });
    }
    out
}

/// A spec's list of strings (`command`, `args`), empty when absent.
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Creates pod `ns/p` (uid `uid-p`) with these container specs as kubelet `version` would (each
/// stored hash current), and writes the matching `--pods` file. Returns the pod and the file.
pub async fn current_pod(
    ctrd: &Containerd,
    cri: &mut Cri,
    specs: &[Value],
    version: &str,
) -> (CreatedPod, PathBuf) {
    let tcs: Vec<TestContainer> = specs
        .iter()
        .map(|s| TestContainer {
            spec: s.clone(),
            stored_hash: None,
        })
        .collect();
    let v: KubeletVersion = version.parse().expect("test version");
    let pod = create_pod(cri, &ctrd.dir.join("pods"), "ns", "p", "uid-p", &tcs, v).await;
    let pods_file = ctrd.dir.join("pods.json");
    std::fs::write(
        &pods_file,
        serde_json::to_vec(&pod_json("ns", "p", "uid-p", specs)).expect("pod json"),
    )
    .expect("pods file");
    (pod, pods_file)
}

/// The scenario several tests share: pod `shop/web-1` (uid `uid-web-1`) created by kubelet
/// `from`, with `web` running its current spec and `changed` created from an older spec
/// (`changed_then`) than the one the API server now has (`changed_now`).
pub struct WebPod {
    pub web: Value,
    pub changed_now: Value,
    pub changed_then: Value,
    pub web_id: String,
    pub changed_id: String,
}

pub async fn web_pod(ctrd: &Containerd, cri: &mut Cri, from: &str) -> WebPod {
    let web = serde_json::json!({"name":"web","image":IMAGE,"args":["--port=8080"]});
    let changed_now = serde_json::json!({"name":"changed","image":IMAGE,"args":["--new"]});
    let changed_then = serde_json::json!({"name":"changed","image":IMAGE,"args":["--old"]});
    let v: KubeletVersion = from.parse().expect("test version");
    let pod = create_pod(
        cri,
        &ctrd.dir.join("pods"),
        "shop",
        "web-1",
        "uid-web-1",
        &[
            TestContainer {
                spec: web.clone(),
                stored_hash: None,
            },
            TestContainer {
                spec: changed_now.clone(),
                stored_hash: Some(hash(&changed_then, from)),
            },
        ],
        v,
    )
    .await;
    WebPod {
        web,
        changed_now,
        changed_then,
        web_id: pod.container_ids[0].clone(),
        changed_id: pod.container_ids[1].clone(),
    }
}

/// Runs the real `kubehash` binary with `args`.
pub fn kubehash(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(args)
        .output()
        .expect("kubehash runs")
}

/// Runs kubehash with `args` in a PID namespace of its own, beside a process named `name` (a copy
/// of `sleep` in `dir`) that is running when kubehash starts. Only this kubehash sees that
/// "kubelet": the tests that run beside it in the same test binary, whose writes a kubelet on the
/// machine would stop, never do.
pub fn kubehash_beside_process(name: &str, dir: &Path, args: &[&str]) -> std::process::Output {
    let bin = dir.join(name);
    std::fs::copy("/bin/sleep", &bin).expect("copy of sleep");
    // $0 is the process to start; the rest is the command. The loop waits until the process
    // has its name, so that kubehash always finds it.
    let script = r#"p="$0"; n=$(basename "$p"); "$p" 60 & until [ "$(cat /proc/$!/comm 2>/dev/null)" = "$n" ]; do :; done; exec "$@""#;
    Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "sh",
            "-c",
            script,
        ])
        .arg(&bin)
        .arg(env!("CARGO_BIN_EXE_kubehash"))
        .args(args)
        .output()
        .expect("kubehash runs in its own PID namespace")
}

/// A process's output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A loopback TCP port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// kubelet `version`'s hash of a container spec, as stored in the annotation.
pub fn hash(spec: &Value, version: &str) -> String {
    let v: KubeletVersion = version.parse().expect("test version");
    format_hash(
        hash_container(spec, &[v], "test")
            .expect("test spec hashes")
            .hash[0]
            .1,
    )
}

/// Where `report` breaks docs/schema/audit-report.schema.json (empty: it is an AuditReport as
/// the README documents).
#[allow(dead_code)]
pub fn audit_report_schema_errors(report: &Value) -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/schema/audit-report.schema.json"
    );
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the schema")).expect("JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    validator
        .iter_errors(report)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect()
}

/// A kubelet restarting container `id` of pod `shop/web-1` (uid `uid-web-1`): the container is
/// stopped and removed, and another instance of `spec` starts under the same pod UID, as created
/// by kubelet 1.31 (in a sandbox of its own named `sandbox`: the harness makes one per pod it
/// creates). Returns the new container's id.
#[allow(dead_code)]
pub async fn restart_in_shop_pod(
    cri: &mut Cri,
    ctrd: &Containerd,
    id: &str,
    spec: &Value,
    sandbox: &str,
) -> String {
    cri.stop_container(id, 0).await.expect("stop");
    cri.remove_container(id).await.expect("remove");
    let pod = create_pod(
        cri,
        &ctrd.dir.join("pods"),
        "shop",
        sandbox,
        "uid-web-1",
        &[TestContainer {
            spec: spec.clone(),
            stored_hash: None,
        }],
        "1.31".parse().expect("test version"),
    )
    .await;
    pod.container_ids[0].clone()
}

/// Pod `shop/web-1` (uid `uid-web-1`) created by kubelet `made_by` with one container per
/// `(spec now, hash stored)` — a stored hash other than `made_by`'s of the spec models a spec that
/// changed since, or a forged one — and `ctrd.dir/pods.json` holding the current specs. Returns
/// the container ids, in order, and the pods file.
pub async fn shop_pod(
    ctrd: &Containerd,
    made_by: &str,
    containers: &[(Value, String)],
) -> (Vec<String>, PathBuf) {
    let created: Vec<TestContainer> = containers
        .iter()
        .map(|(now, stored)| TestContainer {
            spec: now.clone(),
            stored_hash: Some(stored.clone()),
        })
        .collect();
    let listed: Vec<Value> = containers.iter().map(|(n, _)| n.clone()).collect();
    shop_pod_listing(ctrd, made_by, &created, &listed).await
}

/// A container kubelet `made_by` created from `then` (pod shop/web-1) whose stored hash is that
/// kubelet's hash of `now`, as a hash collision leaves it, and the `--pods` file listing `now`.
/// Returns the container's id and the file.
#[allow(dead_code)]
pub async fn collided_pod(
    ctrd: &Containerd,
    made_by: &str,
    then: &Value,
    now: &Value,
) -> (String, PathBuf) {
    let created = TestContainer {
        spec: then.clone(),
        stored_hash: Some(hash(now, made_by)),
    };
    let (ids, pods_file) =
        shop_pod_listing(ctrd, made_by, &[created], std::slice::from_ref(now)).await;
    (ids[0].clone(), pods_file)
}

/// Pod shop/web-1 with the containers `created`, made by kubelet `made_by`, and a `--pods` file
/// whose pod lists the specs `listed`.
async fn shop_pod_listing(
    ctrd: &Containerd,
    made_by: &str,
    created: &[TestContainer],
    listed: &[Value],
) -> (Vec<String>, PathBuf) {
    let mut cri = Cri::connect(&ctrd.endpoint()).await.expect("CRI");
    let pod = create_pod(
        &mut cri,
        &ctrd.dir.join("pods"),
        "shop",
        "web-1",
        "uid-web-1",
        created,
        made_by.parse().expect("test version"),
    )
    .await;
    let pods_file = ctrd.dir.join("pods.json");
    std::fs::write(
        &pods_file,
        serde_json::json!({"kind":"List","items":[pod_json("shop","web-1","uid-web-1",listed)]})
            .to_string(),
    )
    .expect("pods file");
    (pod.container_ids, pods_file)
}

/// A pod object as the API server returns it, for `--pods` files.
pub fn pod_json(namespace: &str, name: &str, uid: &str, containers: &[Value]) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"nodeName": "test-node", "hostNetwork": true, "containers": containers},
    })
}

/// The stand-in kubelet (`examples/fake_kubelet.rs`, built by `cargo test`) copied to `dir` as
/// `kubelet-VERSION`: a process named like a kubelet, whose `--version` says VERSION.
pub fn fake_kubelet(dir: &Path, version: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let built = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/fake_kubelet");
    assert!(
        built.exists(),
        "{} is built by `cargo test` (examples/fake_kubelet.rs)",
        built.display()
    );
    let at = dir.join(format!("kubelet-{version}"));
    std::fs::copy(&built, &at).unwrap();
    at
}

/// Starts `kubehash shim` (the real binary) in front of `runtime`, with its state file
/// `dir/shim-state.json` and its log in `dir/shim.log`; returns it and its endpoint.
pub fn start_shim(dir: &Path, runtime: &str, extra: &[&str]) -> (Child, String) {
    let sock = dir.join("shim.sock");
    let listen = format!("unix://{}", sock.display());
    let child = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args([
            "shim",
            "--listen",
            &listen,
            "--runtime-endpoint",
            runtime,
            "--state",
        ])
        .arg(dir.join("shim-state.json"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("shim.log")).unwrap(),
        ))
        .spawn()
        .unwrap();
    wait_for_socket(&sock, || {
        format!(
            "the shim did not start: {}",
            std::fs::read_to_string(dir.join("shim.log")).unwrap_or_default()
        )
    });
    (child, listen)
}

/// Waits up to 20 s for a process to open its socket; panics with `why()` if it does not.
pub fn wait_for_socket(sock: &Path, why: impl Fn() -> String) {
    let end = Instant::now() + Duration::from_secs(20);
    while !sock.exists() {
        assert!(Instant::now() < end, "{}", why());
        std::thread::sleep(Duration::from_millis(10));
    }
}
