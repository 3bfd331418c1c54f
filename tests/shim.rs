//! `kubehash shim` between a CRI client (playing the new kubelet 1.31) and a real containerd
//! (tests/harness) whose containers were created by kubelet 1.30.

mod harness;

use std::process::{Child, Command};

use harness::{create_pod, hash, pod_json, start_shim, Containerd, TestContainer};
use kubehash::runtime::cri::{keys, Cri};
use serde_json::json;
use tonic::codegen::http::uri::PathAndQuery;

// Messages outside kubehash's proto subset, as a kubelet sends them (field numbers from api.proto).
#[derive(Clone, PartialEq, prost::Message)]
struct ExecSyncRequest {
    #[prost(string, tag = "1")]
    container_id: String,
    #[prost(string, repeated, tag = "2")]
    cmd: Vec<String>,
    #[prost(int64, tag = "3")]
    timeout: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
struct ExecSyncResponse {
    #[prost(bytes = "vec", tag = "1")]
    stdout: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    stderr: Vec<u8>,
    #[prost(int32, tag = "3")]
    exit_code: i32,
}
#[derive(Clone, PartialEq, prost::Message)]
struct ListImagesRequest {}
#[derive(Clone, PartialEq, prost::Message)]
struct Image {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, repeated, tag = "2")]
    repo_tags: Vec<String>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct ListImagesResponse {
    #[prost(message, repeated, tag = "1")]
    images: Vec<Image>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct StatusRequest {
    #[prost(bool, tag = "1")]
    verbose: bool,
}
#[derive(Clone, PartialEq, prost::Message)]
struct RuntimeCondition {
    #[prost(string, tag = "1")]
    r#type: String,
    #[prost(bool, tag = "2")]
    status: bool,
}
#[derive(Clone, PartialEq, prost::Message)]
struct RuntimeStatus {
    #[prost(message, repeated, tag = "1")]
    conditions: Vec<RuntimeCondition>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    status: Option<RuntimeStatus>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct GetEventsRequest {}

async fn raw_call<Req, Resp>(
    endpoint: &str,
    path: &'static str,
    req: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let channel = kubehash::runtime::cri::unix_channel(endpoint)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    grpc.unary(
        tonic::Request::new(req),
        PathAndQuery::from_static(path),
        tonic_prost::ProstCodec::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// The shim in front of `ctrd`, planning 1.30 → 1.31 for the pods in `pods_file`.
fn start_planned_shim(ctrd: &Containerd, pods_file: &std::path::Path) -> (Child, String) {
    start_planned_shim_with(ctrd, pods_file, &[])
}

/// [`start_planned_shim`] with more arguments.
fn start_planned_shim_with(
    ctrd: &Containerd,
    pods_file: &std::path::Path,
    extra: &[&str],
) -> (Child, String) {
    let pods = pods_file.display().to_string();
    let mut args = vec!["--to", "1.31", "--from", "1.30", "-i", &pods];
    args.extend_from_slice(extra);
    start_shim(&ctrd.dir, &ctrd.endpoint(), &args)
}

fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status(); // SIGTERM: graceful
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_kubelet_sees_translated_hashes_and_everything_else_as_is() {
    let mut ctrd = Containerd::start();
    let runtime = ctrd.endpoint();
    let mut cri = Cri::connect(&runtime).await.unwrap();
    let harness::WebPod {
        web,
        changed_now,
        changed_then,
        web_id,
        changed_id,
    } = harness::web_pod(&ctrd, &mut cri, "1.30").await;
    let pods_file = ctrd.dir.join("pods.json");
    std::fs::write(
        &pods_file,
        serde_json::to_vec(&pod_json(
            "shop",
            "web-1",
            "uid-web-1",
            &[web.clone(), changed_now],
        ))
        .unwrap(),
    )
    .unwrap();

    let (mut shim, listen) = start_planned_shim(&ctrd, &pods_file);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(ctrd.dir.join("shim.sock"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    // A container created after the shim planned is passed through as it is.
    let late = json!({"name":"late","image":harness::IMAGE});
    let late_pod = create_pod(
        &mut cri,
        &ctrd.dir.join("pods"),
        "shop",
        "late-1",
        "uid-late-1",
        &[TestContainer {
            spec: late.clone(),
            stored_hash: Some(hash(&late, "1.30")),
        }],
        "1.30".parse().unwrap(),
    )
    .await;

    let mut via = Cri::connect(&listen)
        .await
        .expect("connect through the shim");
    assert_eq!(
        via.runtime_version().runtime_name,
        "containerd",
        "Version passes through"
    );
    let listed = via.list_containers().await.unwrap();
    let ann = |id: &str| {
        listed
            .iter()
            .find(|c| c.id == id)
            .unwrap()
            .annotations
            .clone()
    };
    assert_eq!(
        ann(&web_id)[keys::HASH],
        hash(&web, "1.31"),
        "translated for the new kubelet"
    );
    assert_eq!(
        ann(&changed_id)[keys::HASH],
        hash(&changed_then, "1.30"),
        "a changed spec is never masked"
    );
    assert_eq!(
        ann(&late_pod.container_ids[0])[keys::HASH],
        hash(&late, "1.30"),
        "later containers pass through"
    );
    assert_eq!(
        ann(&web_id)["io.kubernetes.container.restartCount"],
        "0",
        "other annotations as they are"
    );
    let direct = cri.list_containers().await.unwrap();
    assert_eq!(direct.len(), listed.len());
    assert_eq!(
        direct.iter().find(|c| c.id == web_id).unwrap().annotations[keys::HASH],
        hash(&web, "1.30"),
        "the runtime itself is unchanged"
    );

    let status = via.container_status(&web_id).await.unwrap();
    assert_eq!(
        status.status.unwrap().annotations[keys::HASH],
        hash(&web, "1.31")
    );
    assert!(
        status.info.contains_key("info"),
        "verbose info passes through"
    );

    // Methods outside kubehash's proto subset: exec, images, runtime status.
    let exec: ExecSyncResponse = raw_call(
        &listen,
        "/runtime.v1.RuntimeService/ExecSync",
        ExecSyncRequest {
            container_id: web_id.clone(),
            cmd: vec!["echo".into(), "hi".into()],
            timeout: 10,
        },
    )
    .await
    .unwrap();
    assert_eq!((exec.stdout.as_slice(), exec.exit_code), (&b"hi\n"[..], 0));
    let images: ListImagesResponse = raw_call(
        &listen,
        "/runtime.v1.ImageService/ListImages",
        ListImagesRequest {},
    )
    .await
    .unwrap();
    assert!(
        images
            .images
            .iter()
            .any(|i| i.repo_tags.iter().any(|t| t == harness::IMAGE)),
        "{images:?}"
    );
    let st: StatusResponse = raw_call(
        &listen,
        "/runtime.v1.RuntimeService/Status",
        StatusRequest { verbose: false },
    )
    .await
    .unwrap();
    assert!(st
        .status
        .unwrap()
        .conditions
        .iter()
        .any(|c| c.r#type == "RuntimeReady" && c.status));

    // Status codes pass through: the runtime's NotFound, and its Unimplemented for a method it lacks.
    let err = via
        .container_status("no-such-container")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("NotFound"), "{err}");
    let events = raw_call::<_, GetEventsRequest>(
        &listen,
        "/runtime.v1.RuntimeService/GetContainerEvents",
        GetEventsRequest {},
    )
    .await;
    if let Err(s) = events {
        // containerd 1.6 has no GetContainerEvents; its answer must reach the client unchanged.
        assert_eq!(s.code(), tonic::Code::Unimplemented, "{s}");
    }

    // The runtime socket disappears: the shim keeps serving and answers UNAVAILABLE; it comes back.
    ctrd.stop();
    let down = raw_call::<_, ListImagesResponse>(
        &listen,
        "/runtime.v1.ImageService/ListImages",
        ListImagesRequest {},
    )
    .await
    .unwrap_err();
    assert_eq!(down.code(), tonic::Code::Unavailable, "{down}");
    assert!(
        down.message().contains(&format!(
            "cannot connect to the runtime at {}",
            ctrd.socket().display()
        )),
        "the error says what could not be reached, and why: {down}"
    );
    // The same on the connection the kubelet keeps open.
    let down = via.list_containers().await.unwrap_err().to_string();
    assert!(down.contains("Unavailable"), "{down}");
    ctrd.restart();
    // That connection works again once the runtime is back, as does a new one.
    let listed = via
        .list_containers()
        .await
        .expect("the kubelet's connection outlives the runtime's restart");
    assert_eq!(
        listed.iter().find(|c| c.id == web_id).unwrap().annotations[keys::HASH],
        hash(&web, "1.31")
    );
    let mut via = Cri::connect(&listen).await.expect("the shim still serves");
    let listed = via.list_containers().await.unwrap();
    assert_eq!(
        listed.iter().find(|c| c.id == web_id).unwrap().annotations[keys::HASH],
        hash(&web, "1.31")
    );

    // A restarted shim keeps its decisions (no pods given: it must use the state file).
    stop(&mut shim);
    assert!(
        !ctrd.dir.join("shim.sock").exists(),
        "graceful shutdown removes the socket"
    );
    let (mut shim, listen) = start_shim(&ctrd.dir, &runtime, &[]);
    let mut via = Cri::connect(&listen).await.unwrap();
    let listed = via.list_containers().await.unwrap();
    assert_eq!(
        listed.iter().find(|c| c.id == web_id).unwrap().annotations[keys::HASH],
        hash(&web, "1.31")
    );
    let status = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args([
            "shim",
            "--status",
            "--runtime-endpoint",
            &runtime,
            "--state",
        ])
        .arg(ctrd.dir.join("shim-state.json"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout)
            .starts_with("1 of 1 translated containers are still there"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    stop(&mut shim);
}

/// The usual case on a real node: for some containers, kubelet 1.31's hash is not as long as
/// 1.30's (both are unpadded hex), so the shim holds each answer whole to give it its new
/// lengths. What the kubelet receives must be the runtime's answer with those values changed and
/// nothing else.
#[tokio::test(flavor = "current_thread")]
async fn translations_that_change_lengths_reach_the_kubelet_whole() {
    let ctrd = Containerd::start();
    let runtime = ctrd.endpoint();
    let mut cri = Cri::connect(&runtime).await.unwrap();
    // Containers whose 1.31 hash is longer, shorter and as long as their 1.30 hash, and one
    // whose spec changed since 1.30 created it, which is never translated.
    let named = |prefix: &str, wanted: std::cmp::Ordering| {
        (0..)
            .map(|j| json!({"name": format!("{prefix}-{j}"), "image": harness::IMAGE}))
            .find(|s| hash(s, "1.31").len().cmp(&hash(s, "1.30").len()) == wanted)
            .unwrap()
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    let (longer, shorter, kept) = (named("g", Greater), named("s", Less), named("k", Equal));
    let changed = json!({"name": "changed", "image": harness::IMAGE, "args": ["--new"]});
    let then = json!({"name": "changed", "image": harness::IMAGE, "args": ["--old"]});
    let stored = |spec: &serde_json::Value| (spec.clone(), hash(spec, "1.30"));
    let (ids, pods_file) = harness::shop_pod(
        &ctrd,
        "1.30",
        &[
            stored(&longer),
            stored(&shorter),
            stored(&kept),
            (changed, hash(&then, "1.30")),
        ],
    )
    .await;
    let (mut shim, listen) = start_planned_shim(&ctrd, &pods_file);
    let mut via = Cri::connect(&listen).await.unwrap();
    // What the kubelet should see: the 1.31 hash for a translated container, also as its
    // hashWithoutResources (kubelet 1.31 still compares that one: see analysis::plan).
    let shown = |id: &str, annotations: &mut std::collections::HashMap<String, String>| {
        let new = match ids.iter().position(|i| i == id) {
            Some(0) => hash(&longer, "1.31"),
            Some(1) => hash(&shorter, "1.31"),
            Some(2) => hash(&kept, "1.31"),
            _ => return,
        };
        for key in [keys::HASH, keys::HASH_WITHOUT_RESOURCES] {
            if let Some(v) = annotations.get_mut(key) {
                *v = new.clone();
            }
        }
    };
    let direct = cri.list_containers().await.unwrap();
    let listed = via.list_containers().await.unwrap();
    assert_eq!(listed.len(), direct.len());
    for d in &direct {
        let mut want = d.clone();
        shown(&d.id, &mut want.annotations);
        let got = listed.iter().find(|c| c.id == d.id).unwrap();
        assert_eq!(
            got, &want,
            "only the hashes differ from the runtime's answer"
        );
    }
    for id in &ids {
        let direct = cri.container_status(id).await.unwrap();
        let status = via.container_status(id).await.unwrap();
        let mut want = direct.clone();
        if let Some(s) = want.status.as_mut() {
            shown(id, &mut s.annotations);
        }
        assert_eq!(status, want, "ContainerStatus of {id}");
    }
    stop(&mut shim);
}

/// The shim records for the audit what runs when it first plans, as the moment before the
/// upgrade. A kubelet that may be the target, already running straight on the runtime (started
/// before the shim), may have restarted containers by then: the shim records nothing and says
/// why, as for a kubelet whose binary will not say its version, and for one that answers on the
/// kubelet's healthz address with no kubelet process in sight. The old kubelet still running
/// is no obstacle: it restarts nothing whose spec did not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_audit_record_while_a_kubelet_that_may_be_the_target_runs() {
    let ctrd = Containerd::start();
    let web = serde_json::json!({"name": "web", "image": harness::IMAGE});
    let (_, pods_file) =
        harness::shop_pod(&ctrd, "1.30", &[(web.clone(), hash(&web, "1.30"))]).await;
    let before = ctrd.dir.join("shim-state.before.json");
    for (version, recorded) in [("v1.31.4", false), ("unknown", false), ("v1.30.2", true)] {
        let binary = harness::fake_kubelet(&ctrd.dir, version);
        let mut kubelet = Command::new(&binary).args(["sleep", "60"]).spawn().unwrap();
        // Running, past exec (not yet, or no longer, a process whose binary answers).
        let cmdline = format!("/proc/{}/cmdline", kubelet.id());
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read(&cmdline)
            .unwrap_or_default()
            .ends_with(b"60\0")
        {
            assert!(
                std::time::Instant::now() < end,
                "kubelet {version} did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let (mut shim, _) = start_planned_shim(&ctrd, &pods_file);
        let log = std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
        assert_eq!(before.exists(), recorded, "kubelet {version}: {log}");
        let why = match version {
            "v1.31.4" => "kubelet 1.31) and may already have restarted containers",
            "unknown" => "of no known version",
            _ => "the running containers recorded for the audit",
        };
        assert!(log.contains(why), "kubelet {version}: {log}");
        stop(&mut shim);
        let _ = kubelet.kill();
        let _ = kubelet.wait();
        std::fs::remove_file(ctrd.dir.join("shim-state.json")).unwrap();
    }

    // No kubelet process in sight, but one answers on the kubelet's healthz address: it may be
    // the new one, in a PID namespace the shim does not see.
    let port = harness::free_port();
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    let _kubelet = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (mut shim, _) =
        start_planned_shim_with(&ctrd, &pods_file, &["--kubelet-healthz", &healthz]);
    let log = std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
    assert!(!before.exists(), "{log}");
    assert!(
        log.contains("answers on the kubelet's healthz address")
            && log.contains("no kubelet process in sight says which"),
        "{log}"
    );
    stop(&mut shim);
}

/// No kubelet process in sight and nothing on the healthz address (kubelet 1.31 in another PID
/// namespace, its healthz elsewhere), but it has already restarted a container: the new instance
/// carries kubelet 1.31's hash, which kubelet 1.30's is not. That alone means the upgrade has
/// begun, and the shim records nothing for the audit (a record would call the new instance kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_audit_record_once_a_container_carries_the_targets_hash() {
    let ctrd = Containerd::start();
    let web = serde_json::json!({"name": "web", "image": harness::IMAGE});
    let log = serde_json::json!({"name": "log", "image": harness::IMAGE, "args": ["-v"]});
    let before = ctrd.dir.join("shim-state.before.json");
    let stored = [
        (web.clone(), hash(&web, "1.30")),
        (log.clone(), hash(&log, "1.31")),
    ];
    let (_, pods_file) = harness::shop_pod(&ctrd, "1.30", &stored).await;
    let (mut shim, _) = start_planned_shim(&ctrd, &pods_file);
    let log_text = std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
    assert!(!before.exists(), "{log_text}");
    assert!(
        log_text.contains("container shop/web-1/log carries kubelet 1.31's hash of its spec, which kubelet 1.30's is not"),
        "{log_text}"
    );
    stop(&mut shim);
}

/// The old kubelet connects through the shim after it recorded what ran before the upgrade (the
/// binary rolled back with the shim left in place, or pointed at the shim before the swap). From
/// then on it restarts what it restarts, which the record would count as the upgrade's: the
/// record is removed, the log says why, and `audit compare --shim-state` refuses. The target
/// kubelet's connection, and a client that is no kubelet, leave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_kubelet_connecting_through_the_shim_removes_its_audit_record() {
    let ctrd = Containerd::start();
    let web = serde_json::json!({"name": "web", "image": harness::IMAGE});
    let (_, pods_file) =
        harness::shop_pod(&ctrd, "1.30", &[(web.clone(), hash(&web, "1.30"))]).await;
    let before = ctrd.dir.join("shim-state.before.json");
    let (mut shim, ep) = start_planned_shim(&ctrd, &pods_file);
    let shim_log = || std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
    assert!(before.exists(), "{}", shim_log());
    let list_as = |version: &str| {
        let kubelet = harness::fake_kubelet(&ctrd.dir, version);
        let out = Command::new(&kubelet).args(["list", &ep]).output().unwrap();
        assert!(out.status.success(), "kubelet {version}: {out:?}");
    };
    list_as("v1.31.4");
    assert!(Cri::connect(&ep)
        .await
        .unwrap()
        .list_containers()
        .await
        .is_ok());
    assert!(before.exists(), "after kubelet 1.31: {}", shim_log());
    list_as("v1.30.2");
    assert!(!before.exists(), "after kubelet 1.30: {}", shim_log());
    assert!(
        shim_log().contains(
            "kubelet 1.30 connected through the shim after it recorded what ran before the upgrade"
        ),
        "{}",
        shim_log()
    );
    stop(&mut shim);
    let state = ctrd.dir.join("shim-state.json").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(["audit", "compare", "--shim-state", &state, "--cri"])
        .arg(ctrd.endpoint())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no snapshot beside it")
            && err.contains("removes it when the old kubelet connects through it"),
        "{err}"
    );
}
