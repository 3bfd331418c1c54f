//! `kubehash scan --cri` against a real containerd (tests/harness): pods are created over CRI as
//! a kubelet 1.30 would, then scanned for an upgrade to 1.31.

mod harness;

use std::process::Command;

use harness::{create_pod, pod_json, Containerd, KubeletCalls, TestContainer};
use kubehash::runtime::cri::Cri;
use serde_json::{json, Value};

/// `kubehash scan --cri` of the test node for 1.30 → 1.31, as JSON.
fn scan_json(ctrd: &Containerd, pods_file: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args([
            "scan",
            "--cri",
            &ctrd.endpoint(),
            "--to",
            "1.31",
            "--from",
            "1.30",
        ])
        .args(["-o", "json", "--pods"])
        .arg(pods_file)
        .output()
        .unwrap()
}

/// `kubehash node plan -o json` of the test node (`--node-name test-node`) for `from` → `to`,
/// with the pods in `pods_file`, the manifests in `manifests` and `extra` arguments: the
/// document and the exit code.
fn node_plan(
    ctrd: &Containerd,
    (from, to): (&str, &str),
    pods_file: &std::path::Path,
    manifests: &std::path::Path,
    extra: &[&std::ffi::OsStr],
) -> (Value, Option<i32>) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(["node", "plan", "--cri", &ctrd.endpoint(), "--to", to])
        .args(["--from", from, "-o", "json", "--node-name", "test-node"])
        .arg("--pods")
        .arg(pods_file)
        .arg("--manifests")
        .arg(manifests)
        .args(extra)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (doc, out.status.code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_scan_gives_every_verdict() {
    let ctrd = Containerd::start();
    let mut cri = Cri::connect(&ctrd.endpoint()).await.expect("CRI connect");
    assert_eq!(cri.api(), kubehash::runtime::cri::ApiVersion::V1);
    let v130 = "1.30".parse().unwrap();
    let v131 = "1.31".parse().unwrap();
    let logs = ctrd.dir.join("pods");

    let web = json!({"name":"web","image":harness::IMAGE,"args":["--port=8080"],
        "resources":{"requests":{"cpu":"100m"}},"terminationMessagePath":"/dev/termination-log",
        "terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"});
    let changed_now = json!({"name":"changed","image":harness::IMAGE,"args":["--new-flag"]});
    let changed_then = json!({"name":"changed","image":harness::IMAGE,"args":["--old-flag"]});
    let current = json!({"name":"current","image":harness::IMAGE});

    // A pod made by kubelet 1.30: one container current, one whose spec changed since.
    let web_pod = create_pod(
        &mut cri,
        &logs,
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
                stored_hash: Some(harness::hash(&changed_then, "1.30")),
            },
        ],
        v130,
    )
    .await;
    // A pod already made by kubelet 1.31, and one the API server no longer has.
    create_pod(
        &mut cri,
        &logs,
        "shop",
        "new-1",
        "uid-new-1",
        &[TestContainer {
            spec: current.clone(),
            stored_hash: None,
        }],
        v131,
    )
    .await;
    create_pod(
        &mut cri,
        &logs,
        "gone",
        "old-1",
        "uid-old-1",
        &[TestContainer {
            spec: current.clone(),
            stored_hash: None,
        }],
        v130,
    )
    .await;

    let (web_spec, current_spec) = (web.clone(), current.clone());
    let pods = json!({"kind":"List","items":[
        pod_json("shop", "web-1", "uid-web-1", &[web, changed_now]),
        pod_json("shop", "new-1", "uid-new-1", &[current]),
    ]});
    let pods_file = ctrd.dir.join("pods.json");
    std::fs::write(&pods_file, serde_json::to_vec(&pods).unwrap()).unwrap();

    let out = scan_json(&ctrd, &pods_file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["runtime"]["name"], "containerd");
    assert_eq!(
        doc["counts"],
        json!({"rewrite":1,"unchanged":1,"will-restart":1,"unprovable":0,"not-running":0,"recreated":0,"killed":0,"no-pod":1,"error":0})
    );
    let by_name = |pod: &str, c: &str| -> Value {
        doc["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["pod"] == pod && x["container"] == c)
            .cloned()
            .unwrap_or_else(|| panic!("no {pod}/{c} in {doc}"))
    };
    let web = by_name("web-1", "web");
    assert_eq!(web["verdict"], "rewrite");
    assert_eq!(web["provenance"], json!(["1.16–1.30"]));
    assert_eq!(web["state"], "running");
    assert_eq!(by_name("web-1", "changed")["verdict"], "will-restart");
    let new = by_name("new-1", "current");
    assert_eq!(new["verdict"], "unchanged");
    // Made by kubelet 1.31: the reason says the upgrade has begun.
    assert!(
        new["reason"].as_str().unwrap().contains(
            "and kubelet 1.30 another: a kubelet that hashes as 1.31 does made the container"
        ),
        "{new}"
    );
    assert_eq!(by_name("old-1", "current")["verdict"], "no-pod");

    // The table names the runtime and counts verdicts first.
    let table = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args([
            "scan",
            "--cri",
            &ctrd.endpoint(),
            "--to",
            "1.31",
            "--from",
            "1.30",
            "--pods",
        ])
        .arg(&pods_file)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&table.stdout);
    assert!(
        t.starts_with("Plan for kubelet 1.31 on this node (containerd "),
        "{t}"
    );
    assert!(
        t.contains("1 rewrite, 1 unchanged, 1 will-restart, 0 unprovable, 0 not-running, 0 recreated, 0 killed, 1 no-pod, 0 error"),
        "{t}"
    );

    // --fail-on-restart: 3 for what restarts even after `node apply`, never for a rewrite.
    let fail_on_restart = |pods: &std::path::Path, from: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(["scan", "--cri", &ctrd.endpoint(), "--to", "1.31"])
            .args(from)
            .args(["--fail-on-restart", "-o", "json", "--pods"])
            .arg(pods)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), doc["counts"].clone())
    };
    assert_eq!(fail_on_restart(&pods_file, &["--from", "1.30"]).0, Some(3));
    let without_change = ctrd.dir.join("pods-without-change.json");
    std::fs::write(
        &without_change,
        json!({"kind":"List","items":[
            pod_json("shop", "web-1", "uid-web-1", std::slice::from_ref(&web_spec)),
            pod_json("shop", "new-1", "uid-new-1", std::slice::from_ref(&current_spec)),
        ]})
        .to_string(),
    )
    .unwrap();
    let (code, counts) = fail_on_restart(&without_change, &["--from", "1.30"]);
    assert_eq!(
        (counts["rewrite"].clone(), counts["will-restart"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(code, Some(0), "a rewrite is what apply avoids: {counts}");
    // Without the old kubelet's version, the same container cannot be proved: it restarts.
    let (code, counts) = fail_on_restart(&without_change, &[]);
    assert_eq!(
        (counts["unprovable"].clone(), counts["will-restart"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(code, Some(3), "an unprovable container restarts: {counts}");

    // A directory of pod files: an object that is not a pod is named by its file and its place
    // there, and the verdicts are those of the pods alone.
    let dir = ctrd.dir.join("pods-dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&pods_file, dir.join("a.json")).unwrap();
    std::fs::write(
        dir.join("b.yaml"),
        "kind: Service\nmetadata: {name: s, namespace: shop}\n",
    )
    .unwrap();
    let from_dir = scan_json(&ctrd, &dir);
    assert_eq!(
        String::from_utf8_lossy(&from_dir.stderr),
        format!(
            "kubehash: not a usable pod: {}: object 1: Service shop/s is not a Pod\n",
            dir.join("b.yaml").display()
        )
    );
    let from_dir: Value = serde_json::from_slice(&from_dir.stdout).unwrap();
    assert_eq!(from_dir["counts"], doc["counts"]);

    // The kubelet restarts a container for a hash change only while it runs
    // (computePodActions): once `web` has exited, it is not-running, and nothing is to be done.
    cri.stop_container(&web_pod.container_ids[0], 0)
        .await
        .unwrap();
    let again = scan_json(&ctrd, &pods_file);
    let doc: Value = serde_json::from_slice(&again.stdout).unwrap();
    let web = doc["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["container"] == "web")
        .unwrap()
        .clone();
    assert_eq!(web["state"], "exited");
    assert_eq!(web["verdict"], "not-running", "{web}");
}

/// No socket, a path that is no socket, and a socket nobody listens on: one line each, saying
/// which, with every cause said once.
#[test]
fn an_unreachable_runtime_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("containerd.sock");
    std::fs::write(&file, b"").unwrap();
    let dead = dir.path().join("dead.sock");
    // Bound and closed: the socket file stays, and nothing accepts on it.
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let (file, dead) = (file.display(), dead.display());
    let dir = dir.path().display();
    for (endpoint, says) in [
        (
            "unix:///nonexistent/containerd.sock".to_string(),
            "no socket at /nonexistent/containerd.sock (is the runtime running?)".to_string(),
        ),
        (
            format!("unix://{dir}"),
            format!("{dir} is a directory, not a socket"),
        ),
        (
            format!("unix://{file}"),
            format!("{file} is a file, not a socket"),
        ),
        (
            format!("unix://{dead}"),
            format!("cannot connect to {dead}: transport error: Connection refused (os error 111)"),
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args([
                "scan",
                "--cri",
                &endpoint,
                "--to",
                "1.31",
                "--pods",
                "testdata/cluster/pods.json",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("kubehash: CRI endpoint {endpoint}: {says}\n")
        );
    }
}

/// A static pod (pkg/kubelet/config/common.go applyDefaults): the kubelet runs it under a UID
/// derived from its internal Pod type unless the manifest sets metadata.uid, so a new kubelet
/// recreates it whatever its hashes say. The node plan reads the manifests: unpinned →
/// `recreated` (and `node apply` leaves it alone); pinned to the running UID → the usual verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_are_recreated_unless_their_manifest_pins_the_uid() {
    let ctrd = Containerd::start();
    let mut cri = Cri::connect(&ctrd.endpoint()).await.unwrap();
    let etcd = json!({"name":"etcd","image":harness::IMAGE,"command":["etcd"]});
    // As the kubelet runs a static pod: pod name <name>-<node>, its own UID (the config hash).
    let uid = "3b1a9c2d8e7f6a5b4c3d2e1f0a9b8c7d";
    create_pod(
        &mut cri,
        &ctrd.dir.join("pods"),
        "kube-system",
        "etcd-test-node",
        uid,
        &[TestContainer {
            spec: etcd.clone(),
            stored_hash: None,
        }],
        "1.30".parse().unwrap(),
    )
    .await;
    // The mirror pod the API server holds: another UID, the kubelet's in config.hash.
    let mut mirror = pod_json(
        "kube-system",
        "etcd-test-node",
        "mirror-uid-1",
        std::slice::from_ref(&etcd),
    );
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": uid,
        "kubernetes.io/config.hash": uid, "kubernetes.io/config.source": "file"});
    let pods_file = ctrd.dir.join("pods.json");
    std::fs::write(
        &pods_file,
        json!({"kind":"List","items":[mirror]}).to_string(),
    )
    .unwrap();
    let manifests = ctrd.dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let verdict = |dir: &std::path::Path| -> Value {
        node_plan(&ctrd, ("1.30", "1.31"), &pods_file, dir, &[]).0["containers"][0].clone()
    };
    // `scan --cri --fail-on-restart`'s exit code for the same node.
    let fail_on_restart = |dir: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(["scan", "--cri", &ctrd.endpoint(), "--to", "1.31"])
            .args(["--from", "1.30", "--fail-on-restart", "--pods"])
            .arg(&pods_file)
            .arg("--manifests")
            .arg(dir)
            .output()
            .unwrap()
            .status
            .code()
    };
    // No manifest, and a manifest without metadata.uid: recreated.
    let p = verdict(&manifests);
    assert_eq!(p["verdict"], "recreated", "{p}");
    assert_eq!(
        fail_on_restart(&manifests),
        Some(3),
        "a recreated pod restarts"
    );
    std::fs::write(
        manifests.join("etcd.yaml"),
        "# kubeadm\napiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers: []\n",
    )
    .unwrap();
    let p = verdict(&manifests);
    assert_eq!(p["verdict"], "recreated", "{p}");
    assert!(
        p["reason"]
            .as_str()
            .unwrap()
            .contains("does not set metadata.uid"),
        "{p}"
    );
    // Pinned to the UID it runs under: the container is judged by its hash like any other.
    std::fs::write(
        manifests.join("etcd.yaml"),
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n  uid: {uid}\nspec:\n  containers: []\n"),
    )
    .unwrap();
    let p = verdict(&manifests);
    assert_eq!(p["verdict"], "rewrite", "{p}");
    assert_eq!(fail_on_restart(&manifests), Some(0));
}

/// pkg/kubelet/config/common.go (PreventStaticPodAPIReferences, 1.34 +): a static pod whose
/// manifest references an API object is killed by the new kubelet and never started again. It is
/// said as such, never pinned, and never counted as kept; a kubelet told to allow the reference,
/// or one before 1.34, keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_the_new_kubelet_refuses_is_killed_not_kept() {
    let ctrd = Containerd::start();
    let mut cri = Cri::connect(&ctrd.endpoint()).await.unwrap();
    let agent = json!({"name":"agent","image":harness::IMAGE,"command":["app"]});
    let uid = "5c1a9c2d8e7f6a5b4c3d2e1f0a9b8c7e";
    harness::create_static_pod(
        &mut cri,
        &ctrd.dir.join("pods"),
        "kube-system",
        "agent-test-node",
        uid,
        &[TestContainer {
            spec: agent.clone(),
            stored_hash: None,
        }],
        "1.33".parse().unwrap(),
    )
    .await;
    // No mirror pod: the API server refuses one that references a service account.
    let pods_file = ctrd.dir.join("pods.json");
    std::fs::write(&pods_file, json!({"kind":"List","items":[]}).to_string()).unwrap();
    let manifests = ctrd.dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let manifest = manifests.join("agent.yaml");
    let body = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: agent\n  namespace: kube-system\n  uid: {uid}\nspec:\n  serviceAccountName: agent\n  containers:\n  - name: agent\n    image: {}\n    command: [app]\n",
        harness::IMAGE
    );
    std::fs::write(&manifest, &body).unwrap();
    let config = ctrd.dir.join("kubelet-config.yaml");
    std::fs::write(&config, "kind: KubeletConfiguration\n").unwrap();
    let no_flags = ctrd.dir.join("no-flags.env");
    let host = [
        "--kubelet-config".as_ref(),
        config.as_os_str(),
        "--kubelet-flags".as_ref(),
        no_flags.as_os_str(),
    ];
    let plan = |from: &str, to: &str| node_plan(&ctrd, (from, to), &pods_file, &manifests, &host);
    let (doc, _) = plan("1.33", "1.34");
    let p = &doc["containers"][0];
    assert_eq!(p["verdict"], "killed", "{doc}");
    let reason = p["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "kubelet 1.34 refuses the manifest (static pods may not reference serviceaccounts"
        ) && reason.contains("does not start it again"),
        "{reason}"
    );
    assert_eq!(doc["static_pods"][0]["action"], "not-admitted", "{doc}");
    // Before 1.34 the kubelet reads the manifest; its pinned pod is kept.
    let (doc, _) = plan("1.32", "1.33");
    assert_eq!(doc["containers"][0]["verdict"], "unchanged", "{doc}");
    assert_eq!(doc["static_pods"][0]["action"], "already-pinned", "{doc}");
    // Told to allow the reference, 1.34 keeps it too.
    std::fs::write(
        &config,
        "kind: KubeletConfiguration\nfeatureGates:\n  PreventStaticPodAPIReferences: false\n",
    )
    .unwrap();
    let (doc, _) = plan("1.33", "1.34");
    assert_eq!(doc["containers"][0]["verdict"], "unchanged", "{doc}");
    // 1.37 removed the gate (kubernetes#140226): told so, it refuses the manifest all the same.
    let (doc, _) = plan("1.36", "1.37");
    let p = &doc["containers"][0];
    assert_eq!(p["verdict"], "killed", "{doc}");
    let reason = p["reason"].as_str().unwrap();
    assert!(
        reason.contains("kubelet 1.37 removed the gate PreventStaticPodAPIReferences")
            && !reason.contains("=false"),
        "{reason}"
    );
    // A manifest kubehash would pin is not pinned when the new kubelet refuses it.
    std::fs::write(&config, "kind: KubeletConfiguration\n").unwrap();
    std::fs::write(&manifest, body.replace(&format!("  uid: {uid}\n"), "")).unwrap();
    let (doc, _) = plan("1.33", "1.34");
    assert_eq!(doc["static_pods"][0]["action"], "not-admitted", "{doc}");
    assert_eq!(doc["containers"][0]["verdict"], "killed", "{doc}");
    // `scan --cri --fail-on-restart` counts it with the restarts.
    let code = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(["scan", "--cri", &ctrd.endpoint(), "--to", "1.34"])
        .args([
            "--from",
            "1.33",
            "--fail-on-restart",
            "--node-name",
            "test-node",
        ])
        .arg("--pods")
        .arg(&pods_file)
        .arg("--manifests")
        .arg(&manifests)
        .output()
        .unwrap();
    assert_eq!(code.status.code(), Some(3), "{code:?}");
}

/// computePodActions compares hashes only for running regular containers, and
/// computeInitContainerActions only for running sidecars: a running regular init container (its
/// pod still initializing) and an ephemeral container (`kubectl debug`) are never restarted for a
/// hash change, whatever their hash says, and no container of a pod being deleted or finished is
/// (the kubelet tears it down). Nothing is to be written for them, and nothing restarts.
/// A static pod with a running init container shows nothing of whether its manifest is what runs,
/// so it is not pinned until the container has finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_init_and_ephemeral_containers_are_never_compared() {
    let ctrd = Containerd::start();
    let mut cri = Cri::connect(&ctrd.endpoint()).await.unwrap();
    let v130 = "1.30".parse().unwrap();
    let logs = ctrd.dir.join("pods");
    let setup_now = json!({"name":"setup","image":harness::IMAGE,"args":["--wait=db"]});
    let setup_then = json!({"name":"setup","image":harness::IMAGE,"args":["--wait=cache"]});
    let proxy = json!({"name":"proxy","image":harness::IMAGE,"restartPolicy":"Always"});
    let app = json!({"name":"app","image":harness::IMAGE});
    let debug = json!({"name":"debug","image":harness::IMAGE,"stdin":true,"tty":true});
    let contained = |spec: &Value, stored: Option<String>| TestContainer {
        spec: spec.clone(),
        stored_hash: stored,
    };
    create_pod(
        &mut cri,
        &logs,
        "shop",
        "job-1",
        "uid-job-1",
        &[
            contained(&setup_now, Some(harness::hash(&setup_then, "1.30"))),
            contained(&proxy, None),
            contained(&app, None),
            contained(&debug, Some(harness::hash(&setup_then, "1.30"))),
        ],
        v130,
    )
    .await;
    let mut pod = pod_json("shop", "job-1", "uid-job-1", std::slice::from_ref(&app));
    pod["spec"]["initContainers"] = json!([setup_now, proxy]);
    pod["spec"]["ephemeralContainers"] = json!([debug]);
    let pods_file = ctrd.dir.join("pods.json");
    std::fs::write(&pods_file, json!({"kind":"List","items":[pod]}).to_string()).unwrap();
    let manifests = ctrd.dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let plan = || node_plan(&ctrd, ("1.30", "1.31"), &pods_file, &manifests, &[]).0;
    let find = |doc: &Value, c: &str| -> Value {
        doc["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["container"] == c)
            .cloned()
            .unwrap_or_else(|| panic!("no {c} in {doc}"))
    };
    let doc = plan();
    for (c, verdict, why) in [
        ("setup", "not-running", "a regular init container"),
        ("debug", "not-running", "an ephemeral container"),
        ("proxy", "rewrite", ""),
        ("app", "rewrite", ""),
    ] {
        let p = find(&doc, c);
        assert_eq!(
            (p["verdict"].as_str(), p["state"].as_str()),
            (Some(verdict), Some("running")),
            "{p}"
        );
        assert!(p["reason"].as_str().unwrap().starts_with(why), "{p}");
    }
    // The same container as a regular one is compared: its spec changed, so it restarts.
    let mut regular = pod_json(
        "shop",
        "job-1",
        "uid-job-1",
        &[app.clone(), setup_now.clone(), debug.clone()],
    );
    regular["spec"]["initContainers"] = json!([proxy]);
    std::fs::write(
        &pods_file,
        json!({"kind":"List","items":[regular]}).to_string(),
    )
    .unwrap();
    let doc = plan();
    assert_eq!(find(&doc, "setup")["verdict"], "will-restart", "{doc}");
    assert_eq!(find(&doc, "debug")["verdict"], "will-restart", "{doc}");
    // Two listings of the pod that disagree on what kind a container is: it is compared.
    let mut init = pod_json("shop", "job-1", "uid-job-1", std::slice::from_ref(&app));
    init["spec"]["initContainers"] = json!([setup_now, proxy]);
    init["spec"]["ephemeralContainers"] = json!([debug]);
    let listed_twice = init.clone();
    let regular: Value =
        serde_json::from_str(&std::fs::read_to_string(&pods_file).unwrap()).unwrap();
    std::fs::write(
        &pods_file,
        json!({"kind":"List","items":[listed_twice, regular["items"][0]]}).to_string(),
    )
    .unwrap();
    let doc = plan();
    assert_eq!(find(&doc, "setup")["verdict"], "will-restart", "{doc}");
    // A pod being deleted, or one the API server says has finished, is torn down
    // (pod_workers.go UpdatePod): nothing of it is compared.
    let mut deleting = init.clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-07T10:00:00Z");
    let mut failed = init.clone();
    failed["status"] = json!({"phase": "Failed"});
    for (torn_down, why) in [
        (deleting, "the pod is being deleted"),
        (failed, "the pod has finished (Failed)"),
    ] {
        let list = json!({"kind":"List","items":[torn_down]});
        std::fs::write(&pods_file, list.to_string()).unwrap();
        let doc = plan();
        for c in ["setup", "proxy", "app", "debug"] {
            let p = find(&doc, c);
            assert_eq!(p["verdict"], "not-running", "{p}");
            assert!(p["reason"].as_str().unwrap().starts_with(why), "{p}");
        }
    }

    // A static pod still initializing: the running init container verifies nothing of the
    // manifest, so the pod is not pinned (recreated) until it has finished.
    let uid = "7d1a9c2d8e7f6a5b4c3d2e1f0a9b8c7f";
    // As the kubelet defaults them from the file (hashed by 1.30 with its defaults).
    let wait = json!({"name":"wait","image":harness::IMAGE,"command":["app"],"args":["wait"],"imagePullPolicy":"IfNotPresent","terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"});
    let web = json!({"name":"web","image":harness::IMAGE,"command":["app"],"args":["web"],"imagePullPolicy":"IfNotPresent","terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"});
    let static_pod = harness::create_static_pod(
        &mut cri,
        &logs,
        "kube-system",
        "web-test-node",
        uid,
        &[contained(&wait, None), contained(&web, None)],
        v130,
    )
    .await;
    std::fs::write(&pods_file, json!({"kind":"List","items":[]}).to_string()).unwrap();
    std::fs::write(
        manifests.join("web.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: kube-system\nspec:\n  initContainers:\n  - name: wait\n    image: {0}\n    command: [app]\n    args: [wait]\n  containers:\n  - name: web\n    image: {0}\n    command: [app]\n    args: [web]\n",
            harness::IMAGE
        ),
    )
    .unwrap();
    let doc = plan();
    let action = &doc["static_pods"][0];
    assert_eq!(action["action"], "refused", "{doc}");
    assert!(
        action["reason"]
            .as_str()
            .unwrap()
            .starts_with("container wait runs, and the kubelet never compares its hash"),
        "{doc}"
    );
    assert_eq!(find(&doc, "web")["verdict"], "recreated", "{doc}");
    cri.stop_container(&static_pod.container_ids[0], 0)
        .await
        .unwrap();
    let doc = plan();
    assert_eq!(doc["static_pods"][0]["action"], "pin", "{doc}");
    assert_eq!(find(&doc, "wait")["verdict"], "not-running", "{doc}");
    assert_eq!(find(&doc, "web")["verdict"], "rewrite", "{doc}");
}
