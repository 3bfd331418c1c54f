//! `kubehash scan --cluster` against an API server over real HTTP.
//!
//! There is no kube-apiserver on these machines, so a small HTTP server in this test serves
//! responses in the exact shape a kube-apiserver sends: list pages with `metadata.continue`
//! tokens built from `testdata/cluster/`, and the Status objects recorded in
//! `testdata/apiserver/` (401, 403, 410 Expired, 500). kubehash reaches it through a real
//! kubeconfig file and the kube crate, exactly as it would reach a cluster.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// What the fake API server answers: (status code, JSON body) for a path-and-query and the
/// number of times that exact request was seen before.
type Handler = dyn Fn(&str, usize) -> (u16, String) + Send + Sync;

struct ApiServer {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

fn serve(handler: Box<Handler>) -> ApiServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = requests.clone();
    let handler: Arc<Handler> = Arc::from(handler);
    std::thread::spawn(move || {
        let mut seen: HashMap<String, usize> = HashMap::new();
        // Bounded: a test makes a handful of requests.
        for stream in listener.incoming().take(200) {
            let Ok(mut stream) = stream else { continue };
            let Some(target) = read_request(&mut stream) else {
                continue;
            };
            let n = seen.entry(target.clone()).or_insert(0);
            let (code, body) = handler(&target, *n);
            *n += 1;
            log.lock().unwrap().push(target);
            let reason = match code {
                200 => "OK",
                401 => "Unauthorized",
                403 => "Forbidden",
                410 => "Gone",
                _ => "Internal Server Error",
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    ApiServer { url, requests }
}

/// The request target of one HTTP/1.1 request (headers read and dropped).
fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    head.lines()
        .next()?
        .split_whitespace()
        .nth(1)
        .map(str::to_string)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/testdata/apiserver/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn example(name: &str) -> Vec<Value> {
    let path = format!("{}/testdata/cluster/{name}", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["items"].as_array().unwrap().clone()
}

/// Page `n` (from 0) of the example pods, 5 per page, as a PodList with a continue token.
fn pod_page(n: usize) -> String {
    let pods = example("pods.json");
    let items: Vec<Value> = pods.iter().skip(n * 5).take(5).cloned().collect();
    let cont = if (n + 1) * 5 < pods.len() {
        format!("page-{}", n + 1)
    } else {
        String::new()
    };
    json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"48213","continue":cont},"items":items}).to_string()
}

fn node_list() -> String {
    json!({"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"48213"},"items":example("nodes.json")}).to_string()
}

/// An empty list of `kind` (PersistentVolumeList, …), as the API server sends one.
fn empty_list(kind: &str) -> String {
    json!({"kind":kind,"apiVersion":"v1","metadata":{"resourceVersion":"48213"},"items":[]})
        .to_string()
}

/// The normal answers: paged pods, all nodes, no claims or persistent volumes.
fn normal(target: &str) -> (u16, String) {
    if target.starts_with("/api/v1/nodes") {
        return (200, node_list());
    }
    if target.starts_with("/api/v1/persistentvolumes") {
        return (200, empty_list("PersistentVolumeList"));
    }
    if target.starts_with("/api/v1/persistentvolumeclaims") {
        return (200, empty_list("PersistentVolumeClaimList"));
    }
    if target.starts_with("/api/v1/pods") {
        let page = target
            .split(['?', '&'])
            .find_map(|kv| kv.strip_prefix("continue=page-"))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        return (200, pod_page(page));
    }
    (
        404,
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#
            .into(),
    )
}

fn kubeconfig(url: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kubehash-kc-{}-{}",
        std::process::id(),
        url.rsplit(':').next().unwrap_or("0")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\nusers:\n- name: test\n  user:\n    token: test-token\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\n"
        ),
    )
    .unwrap();
    path
}

fn scan(url: &str, extra: &[&str]) -> Output {
    let kc = kubeconfig(url);
    Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(["scan", "--cluster", "--kubeconfig"])
        .arg(&kc)
        .args(["--to", "1.31", "-o", "json"])
        .args(extra)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn lists_pods_page_by_page_and_nodes_for_their_versions() {
    let server = serve(Box::new(|t, _| normal(t)));
    let out = scan(&server.url, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["containers"], 24);
    assert_eq!(v["nodes"]["node-c"]["from"], "1.27");
    let reqs = server.requests.lock().unwrap().clone();
    let pages: Vec<&String> = reqs
        .iter()
        .filter(|r| r.starts_with("/api/v1/pods"))
        .collect();
    assert_eq!(pages.len(), 3, "{reqs:?}");
    assert!(pages[0].contains("limit=500"), "{reqs:?}");
    assert!(pages[1].contains("continue=page-1"), "{reqs:?}");
}

#[test]
fn an_expired_continue_token_restarts_the_list_without_double_counting() {
    let server = serve(Box::new(|t, n| {
        if t.contains("continue=page-2") && n == 0 {
            (410, fixture("status-410-expired.json"))
        } else {
            normal(t)
        }
    }));
    let out = scan(&server.url, &["--from", "1.30"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["containers"], 24, "no pod counted twice");
    let reqs = server.requests.lock().unwrap().clone();
    let firsts = reqs
        .iter()
        .filter(|r| r.starts_with("/api/v1/pods") && !r.contains("continue="))
        .count();
    assert_eq!(firsts, 2, "the list started again: {reqs:?}");
}

#[test]
fn unauthorized_and_forbidden_say_what_to_check() {
    let server = serve(Box::new(|_, _| (401, fixture("status-401.json"))));
    let out = scan(&server.url, &["--from", "1.30"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("kubehash: API server http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("listing pods: 401 Unauthorized (Unauthorized): the credentials in the kubeconfig were refused"), "{err}");
    assert!(out.stdout.is_empty());

    let server = serve(Box::new(|t, _| {
        if t.starts_with("/api/v1/nodes") {
            normal(t)
        } else {
            (403, fixture("status-403-pods.json"))
        }
    }));
    let out = scan(&server.url, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("listing pods: 403 Forbidden (pods is forbidden: User \"system:serviceaccount:kube-system:kubehash\" cannot list resource \"pods\""), "{err}");
    assert!(
        err.contains("kubehash needs get/list on pods and nodes"),
        "{err}"
    );
}

/// Claims and their persistent volumes are read for each node's volumes check, as the kubelet
/// finds them (bound claim → `spec.volumeName` → the volume whose `claimRef.uid` is the claim's):
/// a pod on the 1.27 node whose claim is bound to an in-tree rbd volume fails it going to 1.31,
/// where the rbd plugin is gone. When the credentials may not list persistent volumes (403, with
/// the Status RBAC answers), the scan goes on, says so on stderr, and the check says it read
/// inline volumes only.
#[test]
fn claims_persistent_volumes_are_checked_when_they_can_be_read() {
    let uid = "6f1c2b7e-4c1d-4f0a-9b1e-2d8c5a7e3f10";
    let pv = format!("pvc-{uid}");
    let mut pods = example("pods.json");
    let postgres = pods
        .iter_mut()
        .find(|p| p["metadata"]["name"] == "postgres-0")
        .unwrap();
    postgres["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-postgres-0"}}));
    let pod_list = json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"48213"},"items":pods}).to_string();
    let claims = json!({"kind":"PersistentVolumeClaimList","apiVersion":"v1","metadata":{"resourceVersion":"48213"},"items":[
        {"metadata":{"name":"data-postgres-0","namespace":"data","uid":uid},
         "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"10Gi"}},"storageClassName":"","volumeMode":"Filesystem","volumeName":pv},
         "status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"10Gi"}}}]}).to_string();
    let volumes = json!({"kind":"PersistentVolumeList","apiVersion":"v1","metadata":{"resourceVersion":"48213"},"items":[
        {"metadata":{"name":pv},
         "spec":{"capacity":{"storage":"10Gi"},"accessModes":["ReadWriteOnce"],"persistentVolumeReclaimPolicy":"Retain","volumeMode":"Filesystem",
                 "rbd":{"monitors":["10.0.0.1:6789"],"image":"pg","pool":"rbd","user":"admin","secretRef":{"name":"ceph-secret"},"fsType":"ext4"},
                 "claimRef":{"kind":"PersistentVolumeClaim","namespace":"data","name":"data-postgres-0","uid":uid,"apiVersion":"v1"}},
         "status":{"phase":"Bound"}}]}).to_string();
    let answers = move |forbid: bool| {
        let (pod_list, claims, volumes) = (pod_list.clone(), claims.clone(), volumes.clone());
        move |t: &str, _| {
            if t.starts_with("/api/v1/persistentvolumes") {
                if forbid {
                    return (403, fixture("status-403-persistentvolumes.json"));
                }
                return (200, volumes.clone());
            }
            // All namespaces, or one (`-n`).
            let path = t.split('?').next().unwrap_or("");
            if path.ends_with("/persistentvolumeclaims") {
                return (200, claims.clone());
            }
            if path.ends_with("/pods") {
                return (200, pod_list.clone());
            }
            normal(t)
        }
    };
    let volumes_check = |out: &Output, node: &str| -> Value {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let checks = v["nodes"][node]["checks"].as_array().unwrap().clone();
        checks.into_iter().find(|c| c["name"] == "volumes").unwrap()
    };

    let server = serve(Box::new(answers(false)));
    let out = scan(&server.url, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let c = volumes_check(&out, "node-c");
    assert_eq!(c["status"], "fail", "{c}");
    assert_eq!(
        c["evidence"],
        format!("data/postgres-0: volume \"data\" is claim \"data-postgres-0\", bound to persistent volume \"{pv}\" (rbd), whose plugin no kubelet has from 1.31 (\"no volume plugin matched\")")
    );
    let c = volumes_check(&out, "node-a");
    assert_eq!(c["status"], "pass", "{c}");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .contains("(inline volumes and the persistent volumes of bound claims)"),
        "{c}"
    );
    assert!(
        !text(&out.stderr).contains("volumes"),
        "{}",
        text(&out.stderr)
    );
    let reqs = server.requests.lock().unwrap().clone();
    assert!(
        reqs.iter()
            .any(|r| r.starts_with("/api/v1/persistentvolumeclaims?")),
        "{reqs:?}"
    );

    // Forbidden: the scan goes on without them, and says so.
    let server = serve(Box::new(answers(true)));
    let out = scan(&server.url, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let c = volumes_check(&out, "node-c");
    assert_eq!(c["status"], "pass", "{c}");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .contains("(inline volumes; persistent volumes behind claims are not)"),
        "{c}"
    );
    let err = text(&out.stderr);
    assert!(
        err.starts_with("kubehash: volumes: persistent volumes not read (listing persistentvolumes: 403 Forbidden (persistentvolumes is forbidden: User \"system:serviceaccount:kube-system:kubehash\" cannot list resource \"persistentvolumes\" in API group \"\" at the cluster scope)); only inline volumes are checked\n"),
        "{err}"
    );

    // With -n, only that namespace's claims are listed.
    let server = serve(Box::new(answers(false)));
    let out = scan(&server.url, &["-n", "data"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let reqs = server.requests.lock().unwrap().clone();
    assert!(
        reqs.iter()
            .any(|r| r.starts_with("/api/v1/namespaces/data/persistentvolumeclaims?")),
        "{reqs:?}"
    );
}

#[test]
fn server_errors_are_retried_then_reported() {
    // One 500, then normal answers: the scan completes.
    let server = serve(Box::new(|t, n| {
        if t.starts_with("/api/v1/pods") && n == 0 {
            (500, fixture("status-500.json"))
        } else {
            normal(t)
        }
    }));
    let out = scan(&server.url, &["--from", "1.30"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Always 500: a clear error after a few tries.
    let server = serve(Box::new(|_, _| (500, fixture("status-500.json"))));
    let out = scan(&server.url, &["--from", "1.30"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("listing pods: 500 InternalError (Internal error occurred: etcdserver: request timed out)"), "{err}");
    assert_eq!(
        server.requests.lock().unwrap().len(),
        4,
        "one try and three retries"
    );
}

#[test]
fn an_unreachable_cluster_is_one_clear_line() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = scan(&format!("http://127.0.0.1:{port}"), &["--from", "1.30"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("listing pods: cannot reach the API server"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A kubeconfig that is not YAML, or is cut short: one line naming the file, the line and the
/// column (the YAML parser also draws the line with a caret, which is left out), exit 1.
#[test]
fn a_broken_kubeconfig_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (name, body, says) in [
        ("words", "not a kubeconfig\n", "line 1 column 1"),
        (
            "cut",
            "apiVersion: v1\nkind: Config\nclusters: [\n",
            "line 3 column 11",
        ),
    ] {
        let kc = dir.path().join(name);
        std::fs::write(&kc, body).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(["scan", "--to", "1.31", "--kubeconfig"])
            .arg(&kc)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("kubehash: kubeconfig {}: ", kc.display()))
                && err.contains(says),
            "{err}"
        );
    }
}

/// `KUBECONFIG` as a list: files that do not exist are skipped, as kubectl skips them, and the
/// rest are merged.
#[test]
fn a_kubeconfig_list_skips_missing_files() {
    let server = serve(Box::new(|t, _| normal(t)));
    let kc = kubeconfig(&server.url);
    let list = format!("/nonexistent/kubeconfig:{}", kc.display());
    let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(["scan", "--cluster", "--to", "1.31", "-o", "json"])
        .env("KUBECONFIG", &list)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["containers"], 24);
}

/// `-n` and `-l` are sent to the API server (namespaced list, labelSelector), `--context` alone
/// means the cluster, and the report names the server and context it read.
#[test]
fn namespace_and_selector_are_applied_by_the_api_server() {
    let server = serve(Box::new(|t, _| {
        if let Some(rest) = t.strip_prefix("/api/v1/namespaces/shop/pods") {
            // As the API server would: only the namespace's pods (the selector is checked below).
            let pods: Vec<Value> = example("pods.json")
                .into_iter()
                .filter(|p| p["metadata"]["namespace"] == "shop")
                .collect();
            let _ = rest;
            return (200, json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":pods}).to_string());
        }
        normal(t)
    }));
    let kc = kubeconfig(&server.url);
    let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(["scan", "--kubeconfig"])
        .arg(&kc)
        .args([
            "--context",
            "test",
            "--to",
            "1.31",
            "--from",
            "1.30",
            "-n",
            "shop",
            "-l",
            "app=web",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(v["total"]["containers"], 12, "{requests:?}");
    assert_eq!(
        v["source"],
        format!("API server {}/ (context test)", server.url)
    );
    let requests = server.requests.lock().unwrap().clone();
    let list = requests
        .iter()
        .find(|r| r.starts_with("/api/v1/namespaces/shop/pods"))
        .unwrap_or_else(|| panic!("{requests:?}"));
    assert!(list.contains("labelSelector=app%3Dweb"), "{list}");
}

/// `matrix --kubeconfig` counts the API server's pods (listed in pages) exactly as `matrix -i`
/// counts the same pods from a file; `-n` is asked of the API server, which answers with that
/// namespace's pods only, and a namespace without pods is said to be one.
#[test]
fn matrix_reads_a_live_cluster_as_it_reads_a_file() {
    let server = serve(Box::new(|t, _| {
        if t.starts_with("/api/v1/namespaces/shop/pods") {
            let pods: Vec<Value> = example("pods.json")
                .into_iter()
                .filter(|p| p["metadata"]["namespace"] == "shop")
                .collect();
            return (200, json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":pods}).to_string());
        }
        if t.starts_with("/api/v1/namespaces/empty/pods") {
            return (200, empty_list("PodList"));
        }
        normal(t)
    }));
    let kc = kubeconfig(&server.url);
    let pods = format!("{}/testdata/cluster/pods.json", env!("CARGO_MANIFEST_DIR"));
    let matrix = |source: &[&str], extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(["matrix", "--versions", "1.29..1.31"])
            .args(source)
            .args(extra)
            .output()
            .unwrap()
    };
    let live = ["--kubeconfig", kc.to_str().unwrap()];
    for extra in [&[][..], &["-n", "shop"], &["-o", "json"]] {
        let (from_server, from_file) = (matrix(&live, extra), matrix(&["-i", &pods], extra));
        assert!(
            from_server.status.success(),
            "{}",
            text(&from_server.stderr)
        );
        assert_eq!(
            text(&from_server.stdout),
            text(&from_file.stdout),
            "{extra:?}"
        );
    }
    let requests = server.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| r.contains("continue=page-1")),
        "paged: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("/api/v1/namespaces/shop/pods")),
        "{requests:?}"
    );
    let none = matrix(&live, &["-n", "empty"]);
    assert_eq!(none.status.code(), Some(1));
    assert_eq!(
        text(&none.stderr),
        "kubehash: no pods found in the cluster in namespace \"empty\"\n"
    );
}
