//! `kubehash node preflight` on a real containerd (tests/harness): sandboxes created over CRI as a
//! kubelet creates them, then made to look changed the way the kubelet's PodSandboxChanged sees
//! it; the node's files are laid out in a temporary directory.

mod harness;

use harness::{create_pod, text, Containerd, KubeletCalls};
use kubehash::runtime::cri::Cri;
use serde_json::Value;

fn preflight(ctrd: &Containerd, files: &std::path::Path) -> (Option<i32>, Value) {
    let f = |rel: &str| files.join(rel).display().to_string();
    run_preflight(
        ctrd,
        "1.31",
        &[
            "--from",
            "1.30",
            "--cgroup-root",
            &f("cgroup"),
            "--kubelet-root",
            &f("kubelet"),
            "--kubelet-config",
            &f("kubelet/config.yaml"),
            "--kubelet-flags",
            &f("kubelet/kubeadm-flags.env"),
        ],
    )
}

/// `kubehash node preflight --to TO --cri <ctrd> -o json`, then `args`: its exit status and its
/// report.
fn run_preflight(ctrd: &Containerd, to: &str, args: &[&str]) -> (Option<i32>, Value) {
    let ep = ctrd.endpoint();
    let mut all = vec!["node", "preflight", "--to", to, "--cri", &ep, "-o", "json"];
    all.extend_from_slice(args);
    let out = harness::kubehash(&all);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    (out.status.code(), v)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
}

/// Two ready sandboxes for one pod, then the newest not ready: each fails `sandboxes` (and the
/// exit status says so); with the extra sandbox gone it passes. Nothing is changed by preflight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_sandboxes_fail_and_settled_ones_pass() {
    let ctrd = Containerd::start();
    let files = ctrd.dir.join("node-files");
    std::fs::create_dir_all(files.join("cgroup")).unwrap();
    std::fs::write(
        files.join("cgroup/cgroup.controllers"),
        "cpuset cpu memory pids\n",
    )
    .unwrap();
    let mut cri = Cri::connect(&ctrd.endpoint()).await.unwrap();
    let logs = ctrd.dir.join("pods");
    let v130 = "1.30".parse().unwrap();
    create_pod(&mut cri, &logs, "shop", "web-1", "uid-web", &[], v130).await;
    let (code, report) = preflight(&ctrd, &files);
    assert_eq!(check(&report, "sandboxes")["status"], "pass", "{report}");
    assert_eq!(code, Some(0), "{report}");

    // A second ready sandbox for the same pod, as after a half-finished restart.
    let second = create_pod(&mut cri, &logs, "shop", "web-1-again", "uid-web", &[], v130).await;
    let (code, report) = preflight(&ctrd, &files);
    let c = check(&report, "sandboxes");
    assert_eq!(c["status"], "fail", "{report}");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .contains("2 ready sandboxes"),
        "{c}"
    );
    assert_eq!(code, Some(3));
    assert_eq!(report["in_place"], false);

    // The newest stops: still changed.
    cri.stop_pod_sandbox(&second.sandbox_id).await.unwrap();
    let (_, report) = preflight(&ctrd, &files);
    let c = check(&report, "sandboxes");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .contains("newest sandbox is not ready"),
        "{c}"
    );

    // Gone: settled.
    cri.remove_pod_sandbox(&second.sandbox_id).await.unwrap();
    let (code, report) = preflight(&ctrd, &files);
    assert_eq!(check(&report, "sandboxes")["status"], "pass", "{report}");
    assert_eq!(code, Some(0));
    // Without pods or a Node, the checks that need them say so.
    assert_eq!(check(&report, "admission")["status"], "unknown");
    assert_eq!(
        cri.list_pod_sandboxes().await.unwrap().len(),
        1,
        "preflight changes nothing"
    );
}

/// Admission against the test API server's Node (labels `disk: ssd`, 2 CPUs allocatable): a pod
/// whose nodeSelector the Node no longer satisfies fails; one it satisfies passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_reads_the_node_from_the_api_server() {
    let ctrd = Containerd::start();
    let files = ctrd.dir.join("node-files");
    std::fs::create_dir_all(&files).unwrap();
    let pod = |name: &str, disk: &str| {
        serde_json::json!({"kind": "Pod", "metadata": {"namespace": "shop", "name": name, "uid": name},
            "spec": {"nodeName": "test-node", "nodeSelector": {"disk": disk},
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}})
    };
    for (disk, status) in [("ssd", "pass"), ("hdd", "fail")] {
        let api = harness::apiserver::TestApi::start(
            "v1.30.2",
            serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                               "items": [pod("web", disk)]}),
        );
        let kubeconfig = api.kubeconfig(&ctrd.dir);
        let (_, report) = run_preflight(
            &ctrd,
            "1.31",
            &[
                "--cluster",
                "--kubeconfig",
                &kubeconfig.display().to_string(),
                "--node-name",
                "test-node",
                "--cgroup-root",
                &files.display().to_string(),
            ],
        );
        let c = check(&report, "admission");
        assert_eq!(c["status"], status, "{c}");
        assert_eq!(check(&report, "eviction")["status"], "pass", "{report}");
    }
}

/// A pod with a `gitRepo` volume, listed by the test API server on a node whose kubelet is 1.32:
/// kubelet 1.33 has the plugin off, so `volumes` fails (exit 3 with `--fail-on fail`) and names
/// the pod; with the kubelet's config turning `GitRepoVolumeDriver` on it passes, and at 1.36,
/// where the gate is locked off, it fails again. The pod's claim is bound to an in-tree rbd
/// volume, got from the API server (which enforces the agent's RBAC) as the kubelet gets it: it
/// fails the check going from 1.30 to 1.31, not from 1.32 on (a claim that does not exist, 404,
/// is one no kubelet mounts, and is left out; a server error is tried again). With pods from a file and
/// `--claims`, a claim's in-tree cephfs volume fails it going to 1.31.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_the_new_kubelet_cannot_mount_fails_volumes() {
    let ctrd = Containerd::start();
    let files = ctrd.dir.join("node-files");
    std::fs::create_dir_all(&files).unwrap();
    let config = files.join("config.yaml");
    let api = harness::apiserver::TestApi::start(
        "v1.32.4",
        serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
            "items": [{"kind": "Pod", "metadata": {"namespace": "docs", "name": "site", "uid": "site"},
                "spec": {"nodeName": "test-node", "containers": [{"name": "c", "image": "i"}],
                         "volumes": [{"name": "src", "gitRepo": {"repository": "https://example.com/r.git"}},
                                     {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                                     {"name": "gone", "persistentVolumeClaim": {"claimName": "gone"}}]},
                "status": {"phase": "Running"}}]}),
    );
    api.objects.lock().unwrap().extend([
        serde_json::json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
            "metadata": {"namespace": "docs", "name": "data", "uid": "claim-uid"},
            "spec": {"volumeName": "pv-data"}, "status": {"phase": "Bound"}}),
        serde_json::json!({"kind": "PersistentVolume", "apiVersion": "v1", "metadata": {"name": "pv-data"},
            "spec": {"rbd": {"monitors": ["m"], "image": "site"},
                     "claimRef": {"namespace": "docs", "name": "data", "uid": "claim-uid"}}}),
    ]);
    let kubeconfig = api.kubeconfig(&ctrd.dir);
    // The kubelet's config holds `config`; `extra` flags besides.
    let run = |to: &str, config_text: &str, extra: &[&str]| {
        std::fs::write(&config, config_text).unwrap();
        let (kc, cg, cf) = (
            kubeconfig.display().to_string(),
            files.display().to_string(),
            config.display().to_string(),
        );
        let mut args = vec![
            "--cluster",
            "--kubeconfig",
            &kc,
            "--node-name",
            "test-node",
            "--cgroup-root",
            &cg,
            "--kubelet-config",
            &cf,
        ];
        args.extend_from_slice(extra);
        let (code, report) = run_preflight(&ctrd, to, &args);
        (code, check(&report, "volumes").clone())
    };
    let gate = |on: bool| format!("featureGates:\n  GitRepoVolumeDriver: {on}\n");
    let (code, c) = run("1.33", &gate(false), &[]);
    assert_eq!(c["status"], "fail", "{c}");
    assert_eq!(code, Some(3), "{c}");
    let evidence = c["evidence"].as_str().unwrap();
    assert!(
        evidence
            .starts_with("docs/site: volume \"src\" is gitRepo, whose plugin kubelet 1.33 has off"),
        "{c}"
    );
    let (_, c) = run("1.33", &gate(true), &[]);
    assert_eq!(c["status"], "pass", "{c}");
    let (_, c) = run("1.36", &gate(true), &[]);
    assert_eq!(c["status"], "fail", "{c}");
    // The claim and its volume, got as the kubelet gets them (the agent's RBAC allows exactly
    // that): the rbd volume the old kubelet mounted is one kubelet 1.31 cannot. Each answers a
    // server error first, and is got again.
    api.flaky.lock().unwrap().extend([
        "/api/v1/namespaces/docs/persistentvolumeclaims/data".to_string(),
        "/api/v1/persistentvolumes/pv-data".to_string(),
    ]);
    let (code, c) = run("1.31", "", &["--from", "1.30"]);
    assert_eq!(code, Some(3), "{c}");
    assert_eq!(c["evidence"], "docs/site: volume \"data\" is claim \"data\", bound to persistent volume \"pv-data\" (rbd), whose plugin no kubelet has from 1.31 (\"no volume plugin matched\")");
    assert_eq!(*api.refused.lock().unwrap(), Vec::<String>::new());
    assert_eq!(*api.flaky.lock().unwrap(), Vec::<String>::new(), "both got");

    // Pods from a file, and `--claims` beside them: the claim's in-tree cephfs volume is judged.
    let pods = ctrd.dir.join("pods.json");
    std::fs::write(
        &pods,
        serde_json::json!({"kind": "Pod", "metadata": {"namespace": "docs", "name": "site", "uid": "site"},
            "spec": {"nodeName": "test-node", "containers": [{"name": "c", "image": "i"}],
                     "volumes": [{"name": "www", "persistentVolumeClaim": {"claimName": "www"}}]},
            "status": {"phase": "Running"}})
        .to_string(),
    )
    .unwrap();
    let claims = ctrd.dir.join("claims.json");
    std::fs::write(
        &claims,
        serde_json::json!({"kind": "List", "items": [
            {"kind": "PersistentVolumeClaim", "metadata": {"namespace": "docs", "name": "www", "uid": "w"},
             "spec": {"volumeName": "pv-www"}, "status": {"phase": "Bound"}},
            {"kind": "PersistentVolume", "metadata": {"name": "pv-www"},
             "spec": {"cephfs": {"monitors": ["m"]}, "claimRef": {"uid": "w"}}}]})
        .to_string(),
    )
    .unwrap();
    let (code, report) = run_preflight(
        &ctrd,
        "1.31",
        &[
            "--from",
            "1.30",
            "-i",
            &pods.display().to_string(),
            "--claims",
            &claims.display().to_string(),
            "--node-name",
            "test-node",
            "--cgroup-root",
            &files.display().to_string(),
        ],
    );
    let c = check(&report, "volumes");
    assert_eq!(code, Some(3), "{c}");
    assert_eq!(c["evidence"], "docs/site: volume \"www\" is claim \"www\", bound to persistent volume \"pv-www\" (cephfs), whose plugin no kubelet has from 1.31 (\"no volume plugin matched\")");
}

/// A CPU manager checkpoint in the format before 1.18 (entries by container ID), for a container
/// created over CRI: kubelet 1.18 migrates it (the runtime has that container) and
/// `checkpoints` passes; an entry for a container the runtime does not have stops the new
/// kubelet, and `checkpoints` fails naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_manager_checkpoint_by_container_id_needs_each_container() {
    let ctrd = Containerd::start();
    let files = ctrd.dir.join("node-files");
    std::fs::create_dir_all(files.join("kubelet")).unwrap();
    let mut cri = Cri::connect(&ctrd.endpoint()).await.unwrap();
    let logs = ctrd.dir.join("pods");
    let web = harness::TestContainer {
        spec: serde_json::json!({"name": "web", "image": "busybox"}),
        stored_hash: None,
    };
    let v117 = "1.17".parse().unwrap();
    let pod = create_pod(&mut cri, &logs, "shop", "web-1", "uid-web", &[web], v117).await;
    let id = &pod.container_ids[0];
    let checkpoint = files.join("kubelet/cpu_manager_state");
    let run = || {
        let f = |rel: &str| files.join(rel).display().to_string();
        let (_, report) = run_preflight(
            &ctrd,
            "1.18",
            &[
                "--from",
                "1.17",
                "--cgroup-root",
                &f("cgroup"),
                "--kubelet-root",
                &f("kubelet"),
            ],
        );
        check(&report, "checkpoints").clone()
    };
    let write = |entries: Value| {
        let cp = serde_json::json!({"policyName": "static", "defaultCpuSet": "0-3",
                                    "entries": entries, "checksum": 1});
        std::fs::write(&checkpoint, cp.to_string()).unwrap();
    };
    write(serde_json::json!({id.as_str(): "1"}));
    let c = run();
    assert_eq!(c["status"], "pass", "{c}");
    write(serde_json::json!({id.as_str(): "1", "0123456789abcdef": "2"}));
    let c = run();
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .ends_with("stops at an ID the runtime has no container of: 0123456789abcdef"),
        "{c}"
    );
}
