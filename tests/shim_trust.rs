//! The CRI shim against an adversary, in front of a real containerd (tests/harness): it proves
//! what it translates as `node apply` does (and proves a saved state again when it loads it), its
//! socket and state never exist with a wider mode, it serves pass-through instead of exiting when
//! it cannot plan yet, and idle connections cannot exhaust it. Each test failed on kubehash 0.1.

mod harness;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::{fake_kubelet, hash, start_shim, Containerd};
use kubehash::kubelet::defaults::default_container;
use kubehash::runtime::cri::{keys, Cri};
use serde_json::{json, Value};

/// Stops a shim; its socket file is left behind by SIGKILL, so it goes too (the next shim's
/// start is awaited by the socket's appearance).
fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

fn stop_shim(c: Child, dir: &Path) {
    stop(c);
    let _ = std::fs::remove_file(dir.join("shim.sock"));
}

async fn listed_hash(endpoint: &str, id: &str) -> String {
    let mut cri = Cri::connect(endpoint).await.unwrap();
    let cs = cri.list_containers().await.unwrap();
    cs.iter().find(|c| c.id == id).unwrap().annotations[keys::HASH].clone()
}

/// The hashes a shim started with `args` shows for `ids`; the shim is stopped after.
async fn shown(ctrd: &Containerd, args: &[&str], ids: &[String]) -> Vec<String> {
    let (shim, ep) = start_shim(&ctrd.dir, &ctrd.endpoint(), args);
    let mut out = Vec::new();
    for id in ids {
        out.push(listed_hash(&ep, id).await);
    }
    stop_shim(shim, &ctrd.dir);
    out
}

/// A container made by kubelet `made_by` from `then`, whose spec is now `now`.
async fn one_container(ctrd: &Containerd, made_by: &str, then: &Value, now: &Value) -> String {
    let (ids, _) = harness::shop_pod(ctrd, made_by, &[(now.clone(), hash(then, made_by))]).await;
    ids[0].clone()
}

/// 5. The shim's proof had the node agent's holes: without --from any version's hash counted,
///    and a downgrade across 1.31 translated changed containers. A state saved under the old
///    rule is proven again when loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shim_proves_like_apply_and_reproves_a_saved_state() {
    let ctrd = Containerd::start();
    let then = json!({"name":"app","image":harness::IMAGE,"env":[{"name":"MODE","value":"old"}]});
    let now = json!({"name":"app","image":harness::IMAGE,"env":[{"name":"MODE","value":"new"}]});
    let id = one_container(&ctrd, "1.31", &then, &now).await;
    let pods = ctrd.dir.join("pods.json").display().to_string();
    let stored = hash(&then, "1.31");

    // A downgrade 1.31 → 1.30 of a changed container: nothing translated.
    let (shim, ep) = start_shim(
        &ctrd.dir,
        &ctrd.endpoint(),
        &["--to", "1.30", "--from", "1.31", "-i", &pods],
    );
    assert_eq!(listed_hash(&ep, &id).await, stored);
    let state: Value =
        serde_json::from_slice(&std::fs::read(ctrd.dir.join("shim-state.json")).unwrap()).unwrap();
    assert_eq!(state["translations"], json!({}), "{state}");
    stop_shim(shim, &ctrd.dir);

    // A state saved by kubehash 0.1 that translates it anyway: proven again, dropped.
    let forged = json!({"to":"1.30","created_at_unix":1,"translations":{id.clone():{
        "pod":"shop/web-1","container":"app","stored_hash":stored,"new_hash":hash(&now,"1.30"),
        "new_hash_without_resources":null}}});
    std::fs::write(ctrd.dir.join("shim-state.json"), forged.to_string()).unwrap();
    let (shim, ep) = start_shim(&ctrd.dir, &ctrd.endpoint(), &["--to", "1.30"]);
    assert_eq!(listed_hash(&ep, &id).await, stored, "never masked");
    stop_shim(shim, &ctrd.dir);
    let log = std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
    assert!(
        log.contains(&format!("not translating container {id}")),
        "{log}"
    );

    // Without --from (and no Node to ask), nothing is provable.
    std::fs::remove_file(ctrd.dir.join("shim-state.json")).unwrap();
    let (shim, ep) = start_shim(&ctrd.dir, &ctrd.endpoint(), &["--to", "1.30", "-i", &pods]);
    assert_eq!(listed_hash(&ep, &id).await, stored);
    stop(shim);
}

/// 6. The socket was bound, then chmod-ed, in a directory made with the process umask: under
///    `umask 000` another user could connect in between. The state file was 0644.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_and_state_never_exist_with_a_wider_mode() {
    let ctrd = Containerd::start();
    let spec = json!({"name":"app","image":harness::IMAGE});
    one_container(&ctrd, "1.30", &spec, &spec).await;
    let dir = ctrd.dir.join("run/kubehash");
    let sock = dir.join("cri.sock");
    let state = ctrd.dir.join("shim-state.json");
    let script = format!(
        "umask 000; exec {} shim --listen unix://{} --runtime-endpoint {} --state {} --to 1.31 --from 1.30 -i {}",
        env!("CARGO_BIN_EXE_kubehash"),
        sock.display(),
        ctrd.endpoint(),
        state.display(),
        ctrd.dir.join("pods.json").display()
    );
    let shim = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Watch the path from the first moment it exists.
    let end = Instant::now() + Duration::from_secs(20);
    let first_mode = loop {
        if let Ok(m) = std::fs::symlink_metadata(&sock) {
            break m.permissions().mode() & 0o777;
        }
        assert!(Instant::now() < end, "the shim did not start");
        std::hint::spin_loop();
    };
    stop(shim);
    assert_eq!(
        first_mode, 0o600,
        "the socket's mode when it first appeared"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "the socket's directory");
    assert_eq!(mode(&state), 0o600, "the state file");
}

/// 7. At first start without a runtime, the shim exited and left the kubelet with no runtime at
///    all; it now serves pass-through (UNAVAILABLE while the runtime is down), and plans once the
///    runtime is there. 200 idle connections hung the kubelet's calls; they are now closed after
///    the handshake timeout and bounded in number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_until_a_plan_and_idle_connections_cannot_starve_the_kubelet() {
    let ctrd = Containerd::start();
    let spec = json!({"name":"app","image":harness::IMAGE});
    let id = one_container(&ctrd, "1.30", &spec, &spec).await;
    // The runtime endpoint the shim is given does not exist yet.
    let later = ctrd.dir.join("later.sock");
    let (shim, ep) = start_shim(
        &ctrd.dir,
        &format!("unix://{}", later.display()),
        &[
            "--to",
            "1.31",
            "--from",
            "1.30",
            "-i",
            &ctrd.dir.join("pods.json").display().to_string(),
            "--plan-retry-seconds",
            "1",
            "--handshake-timeout-seconds",
            "1",
            "--max-connections",
            "16",
        ],
    );
    // The shim answers (it did not exit); the runtime is unavailable.
    let err = match Cri::connect(&ep).await {
        Ok(mut cri) => cri.list_containers().await.unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("Unavailable"), "{err}");
    assert!(err.contains("later.sock"), "{err}");
    // The runtime appears: the shim plans and translates.
    std::os::unix::fs::symlink(ctrd.socket(), &later).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(h) = async {
            let mut cri = Cri::connect(&ep).await?;
            let cs = cri.list_containers().await?;
            Ok::<_, kubehash::Error>(
                cs.iter()
                    .find(|c| c.id == id)
                    .map(|c| c.annotations[keys::HASH].clone()),
            )
        }
        .await
        {
            if h.as_deref() == Some(hash(&spec, "1.31").as_str()) {
                break;
            }
        }
        assert!(Instant::now() < end, "the shim never planned");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 200 connections that never speak HTTP/2.
    let sock = ctrd.dir.join("shim.sock");
    let idle: Vec<_> = (0..200)
        .filter_map(|_| std::os::unix::net::UnixStream::connect(&sock).ok())
        .collect();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let t = Instant::now();
    let mut cri = Cri::connect(&ep).await.unwrap();
    assert!(cri.list_containers().await.is_ok());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(idle);
    stop(shim);
}

/// The hash kubelet `binary` sees for container `id` through `endpoint`.
fn hash_seen_by(binary: &Path, endpoint: &str, id: &str) -> String {
    let out = Command::new(binary)
        .args(["list", endpoint])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{id} ")).map(str::to_string))
        .unwrap_or_else(|| panic!("{id} not listed"))
}

/// 8. The shim showed its translations to whoever connected. The old kubelet pointed at it (too
///    early, or started again after the binary was rolled back with the shim left in place)
///    then saw kubelet T's hashes and restarted every translated container. The shim now asks a
///    connecting kubelet its version (its own binary's `--version`): the old kubelet sees what is
///    stored; kubelet T, and a process named like a kubelet that will not say (no evidence of the
///    old one), see the translations. (The kubelet is a stand-in that answers `--version` as the
///    real one does and lists containers over real CRI; the runtime behind the shim is a real
///    containerd.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_target_kubelet_sees_translated_hashes() {
    let ctrd = Containerd::start();
    let spec = json!({"name":"app","image":harness::IMAGE,"args":["--v"]});
    let id = one_container(&ctrd, "1.30", &spec, &spec).await;
    let pods = ctrd.dir.join("pods.json").display().to_string();
    let (shim, ep) = start_shim(
        &ctrd.dir,
        &ctrd.endpoint(),
        &["--to", "1.31", "--from", "1.30", "-i", &pods],
    );
    let (stored, target) = (hash(&spec, "1.30"), hash(&spec, "1.31"));
    assert_ne!(stored, target);
    let new = fake_kubelet(&ctrd.dir, "v1.31.4");
    let old = fake_kubelet(&ctrd.dir, "v1.30.2");
    let mute = fake_kubelet(&ctrd.dir, "unknown");
    assert_eq!(hash_seen_by(&new, &ep, &id), target, "kubelet 1.31");
    assert_eq!(hash_seen_by(&old, &ep, &id), stored, "kubelet 1.30");
    assert_eq!(
        hash_seen_by(&mute, &ep, &id),
        target,
        "a kubelet of no known version"
    );
    // A client that is no kubelet is served the plan, as before.
    assert_eq!(listed_hash(&ep, &id).await, target);
    stop_shim(shim, &ctrd.dir);
    let log = std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
    assert!(log.contains("kubelet 1.30 connected"), "{log}");
    assert!(log.contains("does not say which kubelet it is"), "{log}");
}

/// 9. The shim's `--listen` path is replaced only when it is a socket nobody serves on. A regular
///    file there was removed to make room for the socket (someone's data, gone); a symbolic link,
///    a directory or a pipe are refused too, before the shim plans or records anything. On stop,
///    the shim removes its own socket only, not what has since replaced it; and a closed stderr
///    no longer makes it panic (tracing reported the failed log write with a panicking print)
///    and leave its socket behind.
#[test]
fn the_shim_never_removes_what_is_not_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cri.sock");
    let state = dir.path().join("shim-state.json");
    let runtime = format!("unix://{}", dir.path().join("runtime.sock").display());
    let shim = |listen: &Path, extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kubehash"));
        c.args(["shim", "--listen"])
            .arg(listen)
            .args(["--runtime-endpoint", &runtime, "--state"])
            .arg(&state)
            .args([
                "--to",
                "1.31",
                "--from",
                "1.30",
                "-i",
                "testdata/cluster/pods.json",
            ])
            .args(extra);
        c
    };
    let refused = |listen: &Path, extra: &[&str], says: &str| {
        // A shim that does not refuse serves until stopped: stopped after 20 s, it fails here.
        let mut child = shim(listen, extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > end {
                stop(child);
                panic!("{listen:?} {extra:?}: the shim served instead of refusing");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{listen:?} {extra:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("kubehash: ") && err.contains(says), "{err}");
        assert!(!state.exists(), "planned before refusing: {err}");
    };

    // Someone's file, a link to it, a directory, a pipe: each left as it was.
    let file = dir.path().join("notes.json");
    std::fs::write(&file, b"{\"keep\":\"me\"}").unwrap();
    refused(&file, &[], "a regular file is there, not a socket");
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    refused(&link, &[], "a symbolic link is there, not a socket");
    assert_eq!(std::fs::read_link(&link).unwrap(), file);
    refused(dir.path(), &[], "a directory is there, not a socket");
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    refused(&fifo, &[], "a named pipe is there, not a socket");
    assert_eq!(std::fs::read(&file).unwrap(), b"{\"keep\":\"me\"}");
    // Flags it could not serve with.
    let runtime_path = dir.path().join("runtime.sock");
    refused(
        &runtime_path,
        &[],
        "--listen and --runtime-endpoint are one socket",
    );
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--handshake-timeout-seconds", "0"),
        ("--idle-timeout-seconds", "0"),
        ("--plan-retry-seconds", "0"),
        ("--socket-mode", "1777"),
        ("--kubelet-healthz", "127.0.0.1:10248"),
    ] {
        refused(&sock, &[flag, value], flag);
    }
    assert!(!sock.exists());

    // A stale socket (a killed shim's) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let mut running = shim(&sock, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < end, "the shim did not serve");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its stderr closes (a log pipe gone), then someone puts a file where its socket was.
    drop(running.stderr.take());
    let replacement = dir.path().join("replacement");
    std::fs::write(&replacement, b"not the shim's").unwrap();
    std::fs::rename(&replacement, &sock).unwrap();
    let _ = Command::new("kill").arg(running.id().to_string()).status();
    let status = running.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(std::fs::read(&sock).unwrap(), b"not the shim's");
}

/// 10. A collision in the old kubelet's own hash where kubelet 1.31 does not look: the container
///     was created with `--v1`, and its stored hash is kubelet 1.30's of the spec that now says
///     `--v2`, so the hashes prove a translation, and kubelet 1.31, shown it, would never apply
///     `--v2`. The runtime says what the container was created with (containerd's verbose
///     ContainerStatus): nothing is translated, neither when the shim plans nor from a saved
///     state that translates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collision_the_runtime_contradicts_is_never_translated() {
    let ctrd = Containerd::start();
    let then = json!({"name":"app","image":harness::IMAGE,"args":["--v1"]});
    let now = json!({"name":"app","image":harness::IMAGE,"args":["--v2"]});
    let stored = hash(&now, "1.30");
    let (id, pods) = harness::collided_pod(&ctrd, "1.30", &then, &now).await;
    let pods = pods.display().to_string();
    let (shim, ep) = start_shim(
        &ctrd.dir,
        &ctrd.endpoint(),
        &["--to", "1.31", "--from", "1.30", "-i", &pods],
    );
    assert_eq!(listed_hash(&ep, &id).await, stored, "never masked");
    let state: Value =
        serde_json::from_slice(&std::fs::read(ctrd.dir.join("shim-state.json")).unwrap()).unwrap();
    assert_eq!(state["translations"], json!({}), "{state}");
    stop_shim(shim, &ctrd.dir);

    // A state that translates it (saved by an older kubehash, or forged): dropped when loaded.
    let saved = json!({"to":"1.31","from":"1.30","created_at_unix":1,"translations":{id.clone():{
        "pod":"shop/web-1","container":"app","stored_hash":stored,"new_hash":hash(&now,"1.31"),
        "new_hash_without_resources":null,"spec":now}}});
    std::fs::write(ctrd.dir.join("shim-state.json"), saved.to_string()).unwrap();
    let (shim, ep) = start_shim(&ctrd.dir, &ctrd.endpoint(), &["--to", "1.31"]);
    assert_eq!(listed_hash(&ep, &id).await, stored, "never masked");
    stop_shim(shim, &ctrd.dir);
    let log = std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
    assert!(
        log.contains(&format!(
            "not translating container {id}: the runtime's record shows the container was created with args [\"--v1\"]"
        )),
        "{log}"
    );
}

/// 11. A pinned static pod's manifest edited while the old kubelet was down for the swap (its
///     command changed, its UID kept): the API server's mirror pod still holds the old spec (its
///     `kubernetes.io/config.hash` is that UID, so no kubelet replaces it). Proved against the
///     mirror alone, the container's hash was translated, and kubelet 1.31, which keeps the
///     pinned pod and hashes only name and image, never applied the edit; without kubehash it
///     would have restarted the container with it. The manifest is what runs: a static pod's
///     container is translated only where its manifest and mirror pod agree and the runtime's
///     record does not contradict either (nor what the manifest sets for the whole pod, such as
///     its `runAsUser`). A pinned pod whose manifest is unchanged is translated. A saved state
///     loaded while the runtime is down is checked so once it answers, before the shim serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_manifest_edited_behind_its_mirror_pod_is_never_translated() {
    let ctrd = Containerd::start();
    let manifests = ctrd.dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let mut ran = json!({"name": "c", "image": harness::IMAGE, "command": ["app", "--v1"]});
    default_container(&mut ran);
    let mut cri = Cri::connect(&ctrd.endpoint()).await.unwrap();
    let (mut ids, mut mirrors) = (Vec::new(), Vec::new());
    for (name, uid, now, pod_wide) in [
        ("edited", "a1111111111111111111111111111111", "--v2", ""),
        ("kept", "b2222222222222222222222222222222", "--v1", ""),
        // Edited in what the pod sets for all its containers: the container's spec, and so
        // every hash, is the same.
        (
            "hardened",
            "c3333333333333333333333333333333",
            "--v1",
            "  securityContext:\n    runAsUser: 1000\n",
        ),
    ] {
        let pod = harness::create_static_pod(
            &mut cri,
            &ctrd.dir.join("pods"),
            "kube-system",
            &format!("{name}-node-1"),
            uid,
            &[harness::TestContainer {
                spec: ran.clone(),
                stored_hash: Some(hash(&ran, "1.30")),
            }],
            "1.30".parse().unwrap(),
        )
        .await;
        ids.push(pod.container_ids[0].clone());
        std::fs::write(
            manifests.join(format!("{name}.yaml")),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\n  uid: \"{uid}\"\nspec:\n{pod_wide}  containers:\n  - name: c\n    image: {}\n    command: [app, {now}]\n",
                harness::IMAGE
            ),
        )
        .unwrap();
        mirrors.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "kube-system", "name": format!("{name}-node-1"),
                "uid": format!("mirror-{name}"),
                "annotations": {"kubernetes.io/config.mirror": uid,
                    "kubernetes.io/config.hash": uid, "kubernetes.io/config.source": "file"}},
            "spec": {"nodeName": "node-1", "containers": [ran.clone()]}}));
    }
    let pods = ctrd.dir.join("mirrors.json");
    std::fs::write(&pods, json!({"kind": "List", "items": mirrors}).to_string()).unwrap();
    let (pods, manifests) = (pods.display().to_string(), manifests.display().to_string());
    let node = ["--manifests", &manifests, "--node-name", "node-1"];
    // What the edited pods and the unedited one show: the stored hash, and the translated one.
    let expected = [hash(&ran, "1.30"), hash(&ran, "1.31"), hash(&ran, "1.30")];
    let planning = [&["--to", "1.31", "--from", "1.30", "-i", &pods][..], &node].concat();
    assert_eq!(
        shown(&ctrd, &planning, &ids).await,
        expected,
        "never masked"
    );

    // A saved state that translates it, proved against the mirror pod's spec (saved by an older
    // kubehash, or forged): dropped when loaded, against the manifest; the other stays.
    let translation = |pod: &str| {
        json!({"pod": format!("kube-system/{pod}-node-1"), "container": "c",
               "stored_hash": hash(&ran, "1.30"), "new_hash": hash(&ran, "1.31"),
               "new_hash_without_resources": null, "spec": ran})
    };
    let saved = json!({"to": "1.31", "from": "1.30", "created_at_unix": 1, "translations": {
        ids[0].clone(): translation("edited"), ids[1].clone(): translation("kept"),
        ids[2].clone(): translation("hardened")}});
    std::fs::write(ctrd.dir.join("shim-state.json"), saved.to_string()).unwrap();
    let loading = [&["--to", "1.31"][..], &node].concat();
    assert_eq!(shown(&ctrd, &loading, &ids).await, expected, "never masked");
    let log = std::fs::read_to_string(ctrd.dir.join("shim.log")).unwrap();
    assert!(
        log.contains(&format!(
            "not translating container {}: its static pod's manifest does not prove it",
            ids[0]
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "not translating container {}: the runtime's record shows the container was created with the pod's securityContext.runAsUser none, and the pod now says 1000",
            ids[2]
        )),
        "{log}"
    );

    // The same state loaded while the runtime is down (the node starting, containerd
    // restarting): the shim does not serve until the runtime answers, then checks the saved
    // translations against the records and the manifests before showing any.
    let mut ctrd = ctrd;
    ctrd.stop();
    let dir = ctrd.dir.clone();
    let (sock, endpoint) = (dir.join("shim.sock"), ctrd.endpoint());
    let listen = format!("unix://{}", sock.display());
    let state = dir.join("shim-state.json").display().to_string();
    let shim_args = [
        &["shim", "--listen", &listen, "--runtime-endpoint", &endpoint][..],
        &["--state", &state],
        &loading,
    ]
    .concat();
    let shim = std::process::Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(&shim_args)
        .stderr(std::fs::File::create(dir.join("shim.log")).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let log = || std::fs::read_to_string(dir.join("shim.log")).unwrap();
    assert!(!sock.exists(), "{}", log());
    assert!(log().contains("the runtime does not answer"), "{}", log());
    ctrd.start_again();
    harness::wait_for_socket(&sock, log);
    let mut now = Vec::new();
    for id in &ids {
        now.push(listed_hash(&listen, id).await);
    }
    stop_shim(shim, &dir);
    assert_eq!(now, expected, "never masked: {}", log());
    assert!(
        log().contains(&format!(
            "not translating container {}: its static pod's manifest does not prove it",
            ids[0]
        )),
        "{}",
        log()
    );
}
