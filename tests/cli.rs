//! The `kubehash` binary as a user runs it: exit codes, one-line errors, output formats.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn kubehash(args: &[&str], stdin: &[u8]) -> Output {
    kubehash_env(args, stdin, &[])
}

fn kubehash_env(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // kubehash may exit (bad flags) before reading stdin; a closed pipe is then expected.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn golden_file_as_jsonl() {
    let out = kubehash(
        &[
            "hash",
            "-o",
            "jsonl",
            "--versions",
            "all",
            "--input",
            "testdata/golden/public.jsonl",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first: serde_json::Value =
        serde_json::from_str(text(&out.stdout).split('\n').next().unwrap()).unwrap();
    assert_eq!(first["id"], "pub-syn-0000");
    assert_eq!(first["hash"]["1.8"], "879f805d");
    assert_eq!(first["hash"].as_object().unwrap().len(), 30, "1.8 … 1.37");
    assert_eq!(first["hash_without_resources"]["1.30"], "3162d3c1");
    assert_eq!(
        text(&out.stdout)
            .split('\n')
            .filter(|l| !l.is_empty())
            .count(),
        600
    );
}

#[test]
fn a_container_on_stdin() {
    let c = br#"{"name":"test_container","image":"foo/image:v1","args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}]}"#;
    let out = kubehash(&["hash", "--versions", "1.16,1.31", "-o", "json"], c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["id"], "test_container");
    assert_eq!(v[0]["hash"]["1.16"], "3c42280f");
    assert_eq!(v[0]["hash"]["1.31"], "8e45cbd0");
}

#[test]
fn pods_from_the_example_cluster() {
    let out = kubehash(
        &[
            "hash",
            "-i",
            "testdata/cluster/pods.json",
            "--versions",
            "1.30,1.31",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("CONTAINER"), "{table}");
    assert!(table.contains("kube-system/"), "{table}");
}

#[test]
fn explain_prints_the_hashed_text() {
    let out = kubehash(
        &["hash", "--explain", "1.8"],
        br#"{"name":"a","image":"b"}"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.starts_with("# a: kubelet 1.8 io.kubernetes.container.hash = "),
        "{s}"
    );
    assert!(s.contains("\n(v1.Container){Name:(string)a Image:(string)b Command:([]string)<nil>"));
    let out = kubehash(
        &["hash", "--explain", "v1.28.3"],
        br#"{"name":"a","image":"b"}"#,
    );
    let s = text(&out.stdout);
    assert!(
        s.contains("# json.Marshal: {\"name\":\"a\",\"image\":\"b\",\"resources\":{}}"),
        "{s}"
    );
    assert!(
        s.contains("io.kubernetes.container.hashWithoutResources"),
        "{s}"
    );
}

/// Each kind of bad input: one clear line on stderr, non-zero exit, no panic, nothing half-written.
#[test]
fn bad_input_gets_one_clear_line() {
    let cases: &[(&[&str], &[u8], &str)] = &[
        (&["hash"], b"{\"name\":", "kubehash: stdin: not valid JSON: EOF while parsing"),
        (&["hash"], b"", "kubehash: stdin: no JSON input"),
        (&["hash", "--versions", "1.7"], b"{}", "kubehash: --versions: unsupported kubelet version \"1.7\""),
        (&["hash", "--versions", "1.30..1.20"], b"{}", "kubehash: --versions: bad version list"),
        (&["hash", "--versions", "1.28-1.30"], b"{}", "bad version list \"1.28-1.30\""),
        // An empty list: said so, not a table of zeros that reads as "nothing restarts".
        (&["matrix", "-i", "-", "--versions", "1.30,1.31"], br#"{"kind":"PodList","items":[]}"#, "kubehash: no pods found in stdin"),
        (&["hash"], br#"{"kind":"PodList","items":[]}"#, "kubehash: stdin: no container in it (no input, or an empty list)"),
        (&["scan", "--to", "1.31", "-i", PODS, "--from", "1.29", "-n", ""], b"", "kubehash: --namespace \"\" names no namespace: it is empty"),
        // --claims serves the volumes check alone: refused where it would do nothing, before
        // anything is read or written.
        (&["node", "apply", "--to", "1.31", "-i", PODS, "--claims", PODS, "--cri", "/nonexistent.sock"], b"", "kubehash: --claims is read by the volumes check (scan, node plan, node preflight); node apply does not run it"),
        (&["node", "rollback", "--journal", "/nonexistent.jsonl", "-i", PODS, "--claims", PODS], b"", "kubehash: --claims is read by the volumes check (scan, node plan, node preflight); node rollback does not run it"),
        (&["shim", "--runtime-endpoint", "/nonexistent.sock", "--listen", "/nonexistent/shim.sock", "-i", PODS, "--claims", PODS, "--to", "1.31"], b"", "kubehash: --claims is read by the volumes check (scan, node plan, node preflight); the shim does not run it"),
        // scan --cri reports the whole node: the cluster scan's filters are refused, not ignored.
        (&["scan", "--to", "1.31", "-i", PODS, "--from", "1.29", "--cri", "/nonexistent.sock", "-n", "shop"], b"", "kubehash: the argument '--cri <ENDPOINT>' cannot be used with '--namespace <NAMESPACE>'"),
        (&["scan", "--to", "1.31", "-i", PODS, "--from", "1.29", "--cri", "/nonexistent.sock", "--only", "restart"], b"", "kubehash: the argument '--cri <ENDPOINT>' cannot be used with '--only <VERDICT,…>'"),
        (&["scan", "--to", "1.31", "-i", PODS, "--from", "1.29", "-n", "Shop"], b"", "kubehash: --namespace \"Shop\" names no namespace: a namespace is named by a DNS label"),
        (&["scan", "--to", "1.31", "-i", PODS, "--from", "1.29", "--nodes", NODES], b"", "kubehash: the argument '--from <VERSION>' cannot be used with '--nodes <PATH>'"),
        (&["matrix", "-i", PODS, "--versions", "1.30"], b"", "kubehash: --versions \"1.30\" names one kubelet version"),
        (&["matrix", "-i", PODS, "--versions", "1.30,v1.30.2"], b"", "names one kubelet version"),
        (&["matrix", "--versions", "1.30,1.31"], b"", "kubehash: the following required arguments were not provided: <--pods <PATH>|--cluster|--kubeconfig <PATH>|--context <NAME>>"),
        // -n and -l are checked before anything is read, and a filter nothing passes is named.
        (&["matrix", "-i", PODS, "--versions", "1.30,1.31", "-l", "app in ("], b"", "kubehash: --selector: \"app in (\": found the end"),
        (&["matrix", "-i", PODS, "--versions", "1.30,1.31", "-n", "Shop"], b"", "kubehash: --namespace \"Shop\" names no namespace"),
        (&["matrix", "-i", PODS, "--versions", "1.30,1.31", "-n", "shop", "-l", "app=db"], b"", "kubehash: no pods found in testdata/cluster/pods.json in namespace \"shop\" matching \"app=db\""),
        // An agent that could never act, or would act without pause, does not start.
        (&["agent", "--node-name", "n", "--annotation", "kubehash.dev/target/version"], b"", "kubehash: --annotation \"kubehash.dev/target/version\" is not an annotation key"),
        (&["agent", "--node-name", "n", "--annotation", "Kubehash.dev/v"], b"", "is not a DNS subdomain"),
        (&["agent", "--node-name", "n", "--poll-ms", "0"], b"", "kubehash: --poll-ms 0 would ask the API server"),
        // A restart command sh cannot parse is found out before apply, not after it wrote.
        (&["agent", "--node-name", "n", "--restart-containerd", "systemctl restart 'containerd"], b"", "kubehash: --restart-containerd: restarting the runtime with `systemctl restart 'containerd`: sh cannot parse it"),
        (&["node", "apply", "--to", "1.31", "-i", PODS, "--cri", "/nonexistent.sock", "--restart-containerd=if true; then x"], b"", "kubehash: --restart-containerd=COMMAND: restarting the runtime with `if true; then x`: sh cannot parse it"),
        (&["agent", "--node-name", ""], b"", "kubehash: --node-name \"\" (NODE_NAME) names no Node: it is empty"),
        (&["agent", "--node-name", "Worker_1"], b"", "names no Node: a name must be a DNS subdomain"),
        (&["agent", "--node-name", "n", "--restart-timeout-seconds", "0"], b"", "kubehash: --restart-timeout-seconds 0"),
        (&["agent", "--node-name", "n", "--stuck-seconds", "0"], b"", "kubehash: --stuck-seconds 0"),
        (&["agent", "--node-name", "n", "--listen", "9808"], b"", "kubehash: --listen \"9808\": expected an address and port"),
        (&["agent", "--node-name", "n", "--kubelet-healthz", "127.0.0.1:10248/healthz"], b"", "kubehash: --kubelet-healthz \"127.0.0.1:10248/healthz\": expected an http:// or https:// URL"),
        // A healthz URL the running-kubelet check cannot read is refused, never taken for "no
        // kubelet answers there" (before the runtime is read).
        (&["node", "apply", "--to", "1.31", "--from", "1.30", "-i", PODS, "--cri", "/nonexistent.sock", "--kubelet-healthz", "localhost:10248"], b"", "kubehash: --kubelet-healthz \"localhost:10248\": expected an http:// or https:// URL"),
        (&["node", "rollback", "--journal", "/nonexistent", "--kubelet-healthz", "http:/127.0.0.1:10248/healthz"], b"", "expected an http:// or https:// URL"),
        (&["hash", "--explain", "2.0"], b"{}", "unsupported kubelet version \"2.0\""),
        (&["hash", "--explain", "1.30", "-o", "json"], b"{}", "kubehash: the argument '--explain <VERSION>' cannot be used with '--output <OUTPUT>'"),
        (&["hash", "--explain", "1.30", "--versions", "1.31"], b"{}", "kubehash: the argument '--explain <VERSION>' cannot be used with '--versions <SPEC>'"),
        (&["hash", "-i", "/nonexistent/pods.json"], b"", "kubehash: /nonexistent/pods.json: No such file or directory"),
        (
            &["hash"],
            br#"{"name":"a","ports":[{"containerPort":1},{"containerPort":"80"}]}"#,
            "kubehash: a.ports[1].containerPort: expected int32, got string",
        ),
        (
            &["hash"],
            br#"{"kind":"Pod","metadata":{"namespace":"ns","name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"1 core"}}}]}}"#,
            "kubehash: ns/p: spec.containers[0].resources.limits.cpu: invalid quantity \"1 core\"",
        ),
        (&["hash"], br#"{"kind":"Pod","metadata":{"name":"p"},"spec":{}}"#, "kubehash: p: pod has no containers"),
        (&["hash"], br#"{"kind":"Service"}"#, "a Service is not a Pod"),
        (&["hash"], b"[1]", "expected a JSON object, got a number"),
        (
            &["scan", "--to", "1.31", "--from", "1.30", "-i", "-"],
            b"NAME    READY   STATUS    RESTARTS   AGE\nweb-1   1/1     Running   0          3d\n",
            "expected a Pod object, got a string (kubectl's table: save `kubectl get pods -A -o json` instead)",
        ),
        (
            &["hash"],
            b"\x1F\x8B\x08\x00\x00\x00\x00\x00",
            "kubehash: stdin: gzip-compressed, not JSON or YAML: decompress it first (zcat)",
        ),
        (
            &["scan", "--to", "1.31", "--from", "1.30", "-i", "-"],
            b"\x28\xB5\x2F\xFD\x04\x00",
            "kubehash: stdin: zstd-compressed, not JSON or YAML: decompress it first (zstdcat)",
        ),
    ];
    for (args, stdin, want) in cases {
        let out = kubehash(args, stdin);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            err.contains(want),
            "{args:?}: stderr {err:?} lacks {want:?}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.lines().next().unwrap_or("").starts_with("kubehash: "),
            "{err}"
        );
    }
}

#[test]
fn one_bad_record_does_not_hide_the_others() {
    let input = b"{\"id\":\"ok\",\"container\":{\"name\":\"a\"}}\n{\"id\":\"bad\",\"container\":{\"name\":\"b\",\"tty\":\"yes\"}}\n";
    let out = kubehash(&["hash", "-o", "jsonl", "--versions", "1.31"], input);
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out.stdout);
    assert!(s.contains(r#"{"id":"ok","hash":{"1.31":"#), "{s}");
    assert!(
        s.contains(r#"{"id":"bad","error":"bad.tty: expected bool, got string"}"#),
        "{s}"
    );
}

const PODS: &str = "testdata/cluster/pods.json";
const NODES: &str = "testdata/cluster/nodes.json";

#[test]
fn scan_summarises_by_node_and_workload_then_details() {
    let out = kubehash(&["scan", "--to", "1.30", "-i", PODS, "--nodes", NODES], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.starts_with(
            "Upgrade to kubelet 1.30: 2 of 24 containers would be restarted, 1 recreated with their static pod, 13 kept, 8 not running."
        ),
        "{s}"
    );
    let node = s.find("\nNODE ").unwrap();
    let workload = s.find("\nWORKLOAD ").unwrap();
    let details = s.find("\nCONTAINER ").unwrap();
    assert!(node < workload && workload < details, "{s}");
    assert!(s.contains("shop/web-6c8f7b9d4-t8v3c/envoy"), "{s}");
    assert!(
        s.contains("sidecar  1.27  will-restart  restartPolicy: hashed by 1.30, not by 1.27"),
        "{s}"
    );
    // The static pod on the 1.29 node gets a new UID from kubelet 1.30: recreated, counted apart.
    let etcd = s
        .lines()
        .find(|l| l.starts_with("kube-system/etcd-node-a/etcd "))
        .unwrap_or_else(|| panic!("{s}"));
    assert!(etcd.contains("node-a  regular  1.29  recreated"), "{etcd}");
    // Only what restarts or fails is listed; -o wide lists every container, kept ones too.
    assert!(!s.contains("kept    "), "{s}");
    let wide = text(
        &kubehash(
            &[
                "scan", "--to", "1.30", "-i", PODS, "--nodes", NODES, "-o", "wide",
            ],
            b"",
        )
        .stdout,
    );
    assert!(wide.contains("  kept  "), "{wide}");
    // Per node: what the upgrade takes, and the next commands.
    assert!(
        s.contains("node-b         1.30     nothing restarts"),
        "{s}"
    );
    assert!(
        s.contains("in place with kubehash (0 restarts avoided, 1 static pod to pin)"),
        "{s}"
    );
    assert!(s.contains("\nNext:\n"), "{s}");
}

#[test]
fn scan_json_has_a_stable_shape() {
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "--from", "1.30", "-i", PODS, "-o", "json",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["to"], "1.31");
    assert_eq!(
        v["total"],
        serde_json::json!({"containers":24,"kept":0,"restart":15,"not_running":8,"recreated":1,"error":0})
    );
    assert_eq!(v["nodes"]["node-a"]["from"], "1.30");
    assert_eq!(
        v["workloads"]["kube-system/DaemonSet/kube-proxy"]["restart"],
        3
    );
    let c = &v["containers"][0];
    for key in [
        "node",
        "namespace",
        "pod",
        "container",
        "kind",
        "workload",
        "from",
        "to",
        "impact",
        "hash_from",
        "hash_to",
        "reasons",
    ] {
        assert!(c.get(key).is_some(), "container record lacks {key}: {c}");
    }
    assert_eq!(
        c["workload"],
        serde_json::json!({"kind":"DaemonSet","name":"kube-proxy"})
    );
}

#[test]
fn scan_exit_codes() {
    let restart = kubehash(
        &[
            "scan",
            "--to",
            "1.31",
            "--from",
            "1.30",
            "-i",
            PODS,
            "--fail-on-restart",
        ],
        b"",
    );
    assert_eq!(restart.status.code(), Some(3));
    // 1.31 → 1.36 keeps every hash, but the example's static pod etcd-node-a (no --manifests
    // pins it) is recreated, and so restarts its container: that is no all-clear.
    let scan_1_36 = |extra: &[&str]| {
        let base = ["scan", "--to", "1.36", "--from", "1.31", "-i", PODS];
        kubehash(&[&base[..], extra, &["--fail-on-restart"]].concat(), b"")
    };
    let recreated = scan_1_36(&[]);
    assert_eq!(
        recreated.status.code(),
        Some(3),
        "{}",
        text(&recreated.stdout)
    );
    assert!(text(&recreated.stdout).contains("0 of 24 containers would be restarted, 1 recreated"));
    let kept = scan_1_36(&["-n", "shop"]);
    assert_eq!(kept.status.code(), Some(0), "{}", text(&kept.stderr));
    assert!(text(&kept.stdout).contains("0 of 12 containers would be restarted, 0 recreated"));
    let none = kubehash(&["scan", "--to", "1.31", "-i", PODS], b"");
    assert_eq!(none.status.code(), Some(1));
    assert!(text(&none.stderr).contains("--from VERSION, or --nodes FILE"));
}

#[test]
fn scan_goes_on_past_bad_pods_and_unknown_node_versions() {
    let nodes = r#"{"kind":"List","items":[
        {"kind":"Node","metadata":{"name":"a"},"status":{"nodeInfo":{"kubeletVersion":"v1.29.1"}}},
        {"kind":"Node","metadata":{"name":"b"},"status":{"nodeInfo":{"kubeletVersion":"v2.0.0"}}}]}"#;
    let dir = std::env::temp_dir().join(format!("kubehash-scan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("nodes.json"), nodes).unwrap();
    let pods = br#"{"kind":"PodList","items":[
        {"kind":"Pod","metadata":{"namespace":"n","name":"ok"},"spec":{"nodeName":"a","containers":[{"name":"c","image":"i"}]}},
        {"kind":"Pod","metadata":{"namespace":"n","name":"empty"},"spec":{"nodeName":"a"}},
        {"kind":"Pod","metadata":{"namespace":"n","name":"on-b"},"spec":{"nodeName":"b","containers":[{"name":"c"}]}},
        {"kind":"Pod","metadata":{"namespace":"n","name":"bad"},"spec":{"nodeName":"a","containers":[{"name":"c","tty":1}]}},
        {"kind":"Pod","metadata":{"namespace":"n","name":"last"},"spec":{"nodeName":"a","containers":[{"name":"c"}]}}]}"#;
    let nodes_path = dir.join("nodes.json");
    let out = kubehash(
        &[
            "scan",
            "--to",
            "1.30",
            "-i",
            "-",
            "--nodes",
            nodes_path.to_str().unwrap(),
            "-o",
            "wide",
        ],
        pods,
    );
    assert_eq!(out.status.code(), Some(2));
    let s = text(&out.stdout);
    assert!(s.contains("n/ok/c"), "{s}");
    assert!(s.contains("n/last/c"), "{s}");
    assert!(s.contains("unsupported kubelet version \"v2.0.0\""), "{s}");
    assert!(
        s.contains("n/bad: c.tty: expected bool, got number 1"),
        "{s}"
    );
    // Named by where it is: the list's second item.
    assert!(
        text(&out.stderr)
            .contains("not scanned: stdin: object 2: n/empty: pod has no containers\n"),
        "{}",
        text(&out.stderr)
    );

    let truncated = kubehash(
        &["scan", "--to", "1.30", "--from", "1.29", "-i", "-"],
        &pods[..200],
    );
    assert_eq!(truncated.status.code(), Some(1));
    assert!(
        text(&truncated.stderr).starts_with("kubehash: stdin: not valid JSON: EOF while parsing"),
        "{}",
        text(&truncated.stderr)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn matrix_of_the_example_cluster() {
    let out = kubehash(&["matrix", "-i", PODS, "--versions", "1.29..1.31"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    // What `scan --from 1.30 --to 1.31` says of the same pods: 15 restart, the static pod's
    // container is recreated, 8 do not run.
    assert!(
        s.contains("1.30 → 1.31  24          15       1          0     8            24"),
        "{s}"
    );
}

/// Objects that are not pods: `scan` lists every one in its output and the first ten on
/// stderr with a count of the rest; `matrix`, whose output has no place for them, lists every
/// one on stderr. Each is named.
#[test]
fn objects_not_scanned_are_all_listed_once_on_stderr_or_in_the_output() {
    let mut input = String::from(
        r#"{"kind":"Pod","metadata":{"namespace":"n","name":"p"},"spec":{"nodeName":"a","containers":[{"name":"c","image":"i"}]}}"#,
    );
    for i in 0..12 {
        input.push_str(&format!(
            "\n{{\"kind\":\"ConfigMap\",\"metadata\":{{\"namespace\":\"n\",\"name\":\"cm{i}\"}}}}"
        ));
    }
    let scan = kubehash(
        &["scan", "--to", "1.31", "--from", "1.29", "-i", "-"],
        input.as_bytes(),
    );
    assert_eq!(scan.status.code(), Some(2), "{}", text(&scan.stderr));
    let (out, err) = (text(&scan.stdout), text(&scan.stderr));
    for i in 0..12 {
        let line = format!(
            "not scanned: stdin: object {}: ConfigMap n/cm{i} is not a Pod\n",
            i + 2
        );
        assert!(out.contains(&line), "{out}");
        assert_eq!(err.contains(&line), i < 10, "{err}");
    }
    assert!(
        err.contains("kubehash: … and 2 more not scanned (all are in the output)\n"),
        "{err}"
    );
    let json = kubehash(
        &[
            "scan", "--to", "1.31", "--from", "1.29", "-i", "-", "-o", "json",
        ],
        input.as_bytes(),
    );
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["problems"].as_array().map(Vec::len), Some(12));
    let matrix = kubehash(
        &["matrix", "-i", "-", "--versions", "1.29..1.31"],
        input.as_bytes(),
    );
    assert_eq!(matrix.status.code(), Some(2), "{}", text(&matrix.stderr));
    let err = text(&matrix.stderr);
    for i in 0..12 {
        assert!(
            err.contains(&format!(
                "not counted: stdin: object {}: ConfigMap n/cm{i} is not a Pod\n",
                i + 2
            )),
            "{err}"
        );
    }
}

/// `hash -i DIR`: an object that is not a container is named by its file and its place there,
/// not by the directory and a count across files; what hashes is as from the files one by one.
/// `scan` and `matrix` name an object that is not a pod the same way.
#[test]
fn hash_scan_and_matrix_name_a_directorys_objects_by_their_file() {
    let dir = tempfile::tempdir().unwrap();
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n";
    std::fs::write(dir.path().join("a.yaml"), deployment).unwrap();
    let b = "{\"name\":\"x\",\"image\":\"y\"}\n{\"image\":\"z\"}\n";
    std::fs::write(dir.path().join("b.json"), b).unwrap();
    let d = dir.path().display();
    let hash = |input: &str, explain: bool| {
        let mut args = vec!["hash", "-i", input, "--versions", "1.31"];
        if explain {
            args = vec!["hash", "-i", input, "--explain", "1.31"];
        }
        kubehash(&args, b"")
    };
    let out = hash(&d.to_string(), false);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "kubehash: {d}/a.yaml: object 1: a Deployment is not a Pod, PodList or container\n\
             kubehash: {d}/b.json: object 2: not a Pod, PodList, container (no \"name\") or \
             {{\"id\",\"container\"}} record\n\
             kubehash: 2 of 3 containers could not be hashed\n"
        )
    );
    let alone = hash(&format!("{d}/b.json"), false);
    let row = |out: &Output| {
        text(&out.stdout)
            .lines()
            .find(|l| l.starts_with("x "))
            .map(str::to_string)
    };
    assert_eq!(row(&out), row(&alone));
    assert!(row(&out).is_some());
    let explained = hash(&d.to_string(), true);
    assert!(
        text(&explained.stderr).contains(&format!("kubehash: {d}/b.json: object 2: not a Pod")),
        "{}",
        text(&explained.stderr)
    );

    let pod = r#"{"kind":"Pod","metadata":{"namespace":"n","name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
    std::fs::write(dir.path().join("b.json"), format!("{pod}\n\"x\"\n")).unwrap();
    let dir_arg = d.to_string();
    let scan = kubehash(
        &[
            "scan", "--to", "1.31", "--from", "1.30", "-i", &dir_arg, "-o", "json",
        ],
        b"",
    );
    assert_eq!(scan.status.code(), Some(2), "{}", text(&scan.stderr));
    let report: serde_json::Value = serde_json::from_slice(&scan.stdout).unwrap();
    assert_eq!(
        report["problems"],
        serde_json::json!([
            format!("{d}/a.yaml: object 1: Deployment web is not a Pod"),
            format!("{d}/b.json: object 2: expected a Pod object, got a string"),
        ])
    );
    assert_eq!(report["total"]["containers"], 1);
    let matrix = kubehash(&["matrix", "-i", &dir_arg, "--versions", "1.30..1.31"], b"");
    assert_eq!(matrix.status.code(), Some(2), "{}", text(&matrix.stderr));
    assert_eq!(
        text(&matrix.stderr),
        format!(
            "kubehash: not counted: {d}/a.yaml: object 1: Deployment web is not a Pod\n\
             kubehash: not counted: {d}/b.json: object 2: expected a Pod object, got a string\n"
        )
    );
}

#[test]
fn scan_a_directory_of_json_and_yaml_pods() {
    let dir = std::env::temp_dir().join(format!("kubehash-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  namespace: ns\nspec:\n  nodeName: n1\n  containers:\n  - name: app\n    image: nginx:1.27\n    args: [\"--port=80\"]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: ns}\nspec: {nodeName: n1, containers: [{name: app, image: 'nginx:1.27'}]}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("c.json"),
        r#"{"kind":"Pod","metadata":{"name":"c","namespace":"ns"},"spec":{"nodeName":"n1","containers":[{"name":"app","image":"nginx:1.27"}]}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
    let out = kubehash(
        &[
            "scan",
            "--to",
            "1.31",
            "--from",
            "1.30",
            "-i",
            dir.to_str().unwrap(),
            "-o",
            "json",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["containers"], 3);
    // The same container from YAML and from JSON hashes alike.
    let hashes: Vec<&serde_json::Value> = v["containers"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|c| &c["hash_from"])
        .collect();
    assert_eq!(hashes[0], hashes[1]);
    std::fs::remove_dir_all(dir).ok();
}

/// Usage errors exit 1 (unusable input or flags) with one line, never clap's exit 2, which
/// kubehash documents as "some containers could not be assessed".
#[test]
fn usage_errors_are_one_line_and_exit_1() {
    for args in [
        &[][..],
        &["scan", "--bogus"][..],
        &["scan"][..],
        &["node", "apply", "--to", "1.31"][..],
        &["hash", "--versions"][..],
        &["node"][..],
        // A restart command is given with `=`, and is not empty.
        &[
            "node",
            "apply",
            "--to",
            "1.31",
            "-i",
            "p.json",
            "--restart-containerd=",
        ][..],
        &[
            "node",
            "rollback",
            "--restart-containerd",
            "systemctl restart containerd",
        ][..],
    ] {
        let out = kubehash(args, b"");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("kubehash: "), "{args:?}: {err}");
    }
    let help = kubehash(&["scan", "--help"], b"");
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("--to"));
}

/// Every command a script runs for its result says in `--help` what its exit codes mean, and
/// the README's table has a row for it.
#[test]
fn every_command_documents_its_exit_codes() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = readme
        .split("## Exit codes")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("the README's exit code table");
    for (command, row) in [
        (&["hash"][..], "`hash`"),
        (&["scan"][..], "`scan`"),
        (&["matrix"][..], "`matrix`"),
        (&["node", "plan"][..], "`node plan`"),
        (&["node", "preflight"][..], "`node preflight`"),
        (&["node", "apply"][..], "`node apply`"),
        (&["node", "verify"][..], "`node verify`"),
        (&["node", "rollback"][..], "`node rollback`"),
        (&["audit"][..], "`audit compare`"),
        (&["completion"][..], "`completion`"),
    ] {
        let args = [command, &["--help"][..]].concat();
        let help = kubehash(&args, b"");
        assert_eq!(help.status.code(), Some(0), "{args:?}");
        assert!(
            text(&help.stdout).contains("Exit codes"),
            "{args:?} --help says nothing of exit codes"
        );
        assert!(
            table.contains(&format!("| {row}")),
            "no README row for {row}"
        );
    }
}

/// YAML nested 100,000 levels deep was rejected only after a minute (the YAML scanner's cost per
/// token grows with the flow depth); now one linear pass rejects it first, with one line.
#[test]
fn deeply_nested_yaml_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.yaml");
    std::fs::write(&path, "{a: ".repeat(100_000)).unwrap();
    let p = path.display().to_string();
    let out = kubehash(&["scan", "--to", "1.31", "--from", "1.30", "-i", &p], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("deeper than 256 levels"), "{err}");
}

/// Standard error closed (`kubehash … 2>&1 | head` once head has exited): what cannot be said
/// is dropped, and the exit code is the documented one, not a panic's 101.
#[test]
fn a_closed_standard_error_changes_no_exit_code() {
    for (args, stdin, code) in [
        (
            vec!["hash", "--versions", "1.30", "-i", "-"],
            &b"[1,2]"[..],
            1,
        ),
        (
            vec!["scan", "--to", "1.31", "--from", "1.22", "-i", PODS],
            &b""[..],
            0,
        ),
        (vec!["hash", "--versions", "1.99"], &b""[..], 1),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(writer)
            .spawn()
            .unwrap();
        let _ = child.stdin.take().unwrap().write_all(stdin);
        assert_eq!(child.wait().unwrap().code(), Some(code), "{args:?}");
    }
}

/// Standard output that cannot be written (a full disk, here `/dev/full`): one line saying it is
/// standard output, exit 1, for the streamed `hash` rows and a whole report alike.
#[test]
fn a_full_standard_output_is_one_line_naming_it() {
    for args in [
        vec!["hash", "-i", PODS, "-o", "json"],
        vec!["scan", "--to", "1.31", "-i", PODS, "--nodes", NODES],
        vec!["matrix", "-i", PODS, "--versions", "1.27..1.31"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            text(&out.stderr),
            "kubehash: standard output: No space left on device (os error 28)\n",
            "{args:?}"
        );
    }
}

/// A file where the agent's state directory should be: one line saying so (not the bare "File
/// exists"), exit 1, before any cluster is asked.
#[test]
fn a_file_in_place_of_the_agents_state_directory_is_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state");
    std::fs::write(&file, b"x").unwrap();
    let out = kubehash(
        &[
            "agent",
            "--node-name",
            "n",
            "--state-dir",
            &file.display().to_string(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "kubehash: {}: a file is there, not a directory\n",
            file.display()
        )
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

/// The two kinds of text serde_json stops on that Go's decoders read (README, "How exact it
/// is") are refused whole, exit 1, one line with the place, and named as kubehash's limits, not as
/// invalid JSON: from a file, stdin, a List's items and YAML alike.
#[test]
fn what_kubehash_does_not_read_is_named_as_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let deep = format!(
        r#"{{"name":"a","image":"b","x":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let big = r#"{"name":"a","image":"b","x":1e400}"#.to_string();
    let list = format!(r#"{{"kind":"List","items":[{deep}]}}"#);
    let yaml = format!(
        "name: a\nimage: b\nx: {}{}\n",
        "[".repeat(200),
        "]".repeat(200)
    );
    for (name, body, says) in [
        ("deep.json", &deep, "nesting deeper than 128 levels"),
        ("big.json", &big, "a number beyond float64's range"),
        ("list.json", &list, "nesting deeper than 128 levels"),
        ("deep.yaml", &yaml, "nesting deeper than 128 levels"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let p = path.display().to_string();
        for (args, stdin) in [
            (vec!["hash", "-i", p.as_str()], &b""[..]),
            (vec!["hash", "-i", "-"], body.as_bytes()),
        ] {
            let out = kubehash(&args, stdin);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name} {args:?}: {err}");
            assert!(out.stdout.is_empty(), "{name} {args:?}");
            assert_eq!(err.lines().count(), 1, "{name} {args:?}: {err}");
            assert!(
                err.contains(says)
                    && err.contains("which kubehash does not read")
                    && err.contains(" at line ")
                    && !err.contains("not valid JSON"),
                "{name} {args:?}: {err}"
            );
        }
    }
}

/// A downgrade, and a jump wider than the version-skew policy, are said on stderr; the scan still
/// runs.
#[test]
fn downgrades_and_skew_are_warned_about() {
    let skip = kubehash(&["scan", "--to", "1.33", "--from", "1.22", "-i", PODS], b"");
    assert!(skip.status.success());
    assert!(
        text(&skip.stderr).contains("warning: kubelet 1.22 → 1.33 is 11 minors apart"),
        "{}",
        text(&skip.stderr)
    );
    let down = kubehash(&["scan", "--to", "1.30", "--from", "1.31", "-i", PODS], b"");
    assert!(
        text(&down.stderr).contains("a downgrade"),
        "{}",
        text(&down.stderr)
    );
    let fine = kubehash(&["scan", "--to", "1.30", "-i", PODS, "--nodes", NODES], b"");
    assert!(
        !text(&fine.stderr).contains("warning"),
        "{}",
        text(&fine.stderr)
    );
    // kubelet 1.37 is known; 1.38 is not, and the error names the newest known version.
    let next = kubehash(&["scan", "--to", "1.38", "--from", "1.37", "-i", PODS], b"");
    assert_eq!(next.status.code(), Some(1));
    assert!(
        text(&next.stderr).contains("1.8 … 1.37"),
        "{}",
        text(&next.stderr)
    );
    assert!(
        kubehash(&["scan", "--to", "1.37", "--from", "1.36", "-i", PODS], b"")
            .status
            .success()
    );
}

/// A missing file's OS error is said once; input without pods is one line, exit 1.
#[test]
fn missing_files_and_empty_input_are_one_line() {
    let out = kubehash(
        &[
            "scan",
            "--to",
            "1.31",
            "--from",
            "1.30",
            "-i",
            "/nonexistent/pods.json",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    let out = kubehash(
        &["scan", "--to", "1.31", "--from", "1.30", "-i", "-"],
        br#"{"kind":"List","items":[{"kind":"Service","metadata":{"name":"s"}}]}"#,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("kubehash: no pods found in stdin"), "{err}");
}

/// With no journal (no directory, or none in it), the commands that read one say so in one
/// line naming the directory and what to pass, and exit 1; audit names its two other sources.
#[test]
fn no_journal_is_one_line_naming_what_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().display().to_string();
    let missing = dir.path().join("journal").display().to_string();
    for (at, why) in [
        (&empty, "no journal (*.jsonl) here"),
        (&missing, "no such directory"),
    ] {
        for command in [
            &["node", "verify"][..],
            &["node", "rollback"],
            &["audit", "compare"],
        ] {
            let args = [command, &["--journal-dir", at.as_str()]].concat();
            let out = kubehash(&args, b"");
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            let err = text(&out.stderr);
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(err.starts_with(&format!("kubehash: {at}: {why}")), "{err}");
            assert!(err.contains("pass --journal"), "{err}");
            assert_eq!(err.contains("--snapshot"), command[0] == "audit", "{err}");
        }
    }
    assert!(!dir.path().join("journal").exists(), "nothing made");
    // A journal there that does not validate is that journal's error, with no other advice.
    std::fs::write(dir.path().join("1.30-to-1.31.jsonl"), "{\"forged\":true}\n").unwrap();
    let out = kubehash(&["audit", "compare", "--journal-dir", &empty], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("1.30-to-1.31.jsonl") && !err.contains("--snapshot"),
        "{err}"
    );
}

/// The hash table has a HASH-WITHOUT-RESOURCES column only when some version shown has that
/// annotation (1.27 – 1.30).
#[test]
fn the_hash_table_shows_hash_without_resources_only_where_there_is_one() {
    let spec = br#"{"name":"app","image":"nginx","resources":{"limits":{"cpu":"1"}}}"#;
    let header = |versions: &str| {
        let out = kubehash(&["hash", "--versions", versions], spec);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let first = text(&out.stdout).lines().next().unwrap_or("").to_string();
        first.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    for versions in ["1.31", "1.8..1.26", "1.31..1.37"] {
        assert_eq!(header(versions), "CONTAINER KUBELET HASH", "{versions}");
    }
    for versions in ["1.30", "1.26..1.31", "all"] {
        let want = "CONTAINER KUBELET HASH HASH-WITHOUT-RESOURCES";
        assert_eq!(header(versions), want, "{versions}");
    }
}

/// `kubehash completion bash` is a script bash runs: sourced into a real bash, it completes a
/// node command and one of its flags; every shell clap_complete knows gets a script; an unknown
/// shell is one line, exit 1.
#[test]
fn completion_scripts_complete_commands_and_flags() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = kubehash(&["completion", shell], b"");
        assert_eq!(out.status.code(), Some(0), "{shell}");
        assert!(text(&out.stdout).contains("restart-containerd"), "{shell}");
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("kubehash.bash");
    std::fs::write(&script, kubehash(&["completion", "bash"], b"").stdout).unwrap();
    let complete = |words: &str| {
        let line = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _kubehash kubehash \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             echo \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let out = Command::new("bash").args(["-c", &line]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        text(&out.stdout).trim().to_string()
    };
    assert_eq!(complete("kubehash node ap"), "apply");
    assert_eq!(
        complete("kubehash node apply --restart-c"),
        "--restart-containerd"
    );
    let out = kubehash(&["completion", "tcsh"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr).lines().count(), 1);
}

/// A `--manifests` directory given that does not exist is said on stderr (a mistyped path would
/// otherwise read as a node without static pods); the default one, absent on most machines, is
/// not. Either way the scan goes on.
#[test]
fn a_manifests_directory_given_that_is_not_there_is_said() {
    let scan = |extra: &[&str]| {
        let args = [
            &["scan", "--to", "1.31", "--from", "1.30", "-i", PODS][..],
            extra,
        ]
        .concat();
        kubehash(&args, b"")
    };
    let out = scan(&["--manifests", "/nonexistent/manifests"]);
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("--manifests /nonexistent/manifests: no such directory"),
        "{err}"
    );
    let out = scan(&[]);
    assert!(!text(&out.stderr).contains("--manifests"), "{out:?}");
}

/// A node on a kubelet version kubehash does not know: its reason is `problem`, so the node's
/// object has one `error` key (the count), not two (`jq` kept only one of them).
#[test]
fn scan_json_has_no_duplicate_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(NODES).unwrap()).unwrap();
    nodes["items"][0]["status"]["nodeInfo"]["kubeletVersion"] = "v1.99.0".into();
    let path = dir.path().join("nodes.json");
    std::fs::write(&path, nodes.to_string()).unwrap();
    let p = path.display().to_string();
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "-i", PODS, "--nodes", &p, "-o", "json",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    let (name, node) = v["nodes"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, n)| n.get("problem").is_some())
        .expect("a node with a problem");
    assert!(node["problem"].as_str().unwrap().contains("1.99"), "{node}");
    // The node's object as printed: one "error" key.
    let start = s.find(&format!("\"{name}\": {{")).unwrap();
    let end = start + s[start..].find('}').unwrap();
    assert_eq!(
        s[start..end].matches("\"error\":").count(),
        1,
        "{}",
        &s[start..end]
    );
}

/// `hash` and `scan` read input through one reader: a lone surrogate escape and an invalid UTF-8
/// byte are read as Go reads them (U+FFFD), YAML is read by both, and both give the same hash.
#[test]
fn hash_and_scan_read_the_same_input_alike() {
    let pod = |name: &str, value: &[u8]| {
        let mut b = format!(
            r#"{{"kind":"Pod","metadata":{{"namespace":"ns","name":"{name}"}},"spec":{{"nodeName":"n","containers":[{{"name":"c","image":"i","env":[{{"name":"E","value":""#
        )
        .into_bytes();
        b.extend_from_slice(value);
        b.extend_from_slice(br#""}]}]}}"#);
        b
    };
    let replaced = pod("p", br"\ufffd");
    let cases: [(&str, Vec<u8>); 4] = [
        ("a lone surrogate", pod("p", br"\ud800")),
        ("an invalid UTF-8 byte", pod("p", b"\xff")),
        ("U+FFFD itself", replaced.clone()),
        (
            "YAML",
            // `"n"` quoted: plain, YAML 1.1 (Go's reader) makes it `false`.
            b"apiVersion: v1\nkind: Pod\nmetadata: {namespace: ns, name: p}\nspec:\n  nodeName: \"n\"\n  containers:\n  - name: c\n    image: i\n    env:\n    - {name: E, value: \"\\uFFFD\"}\n"
                .to_vec(),
        ),
    ];
    let hash_of = |input: &[u8]| -> String {
        let out = kubehash(&["hash", "--versions", "1.30", "-o", "jsonl"], input);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["hash"]["1.30"].as_str().unwrap().to_string()
    };
    let scan_of = |input: &[u8]| -> String {
        let out = kubehash(
            &[
                "scan", "--to", "1.31", "--from", "1.30", "-i", "-", "-o", "json",
            ],
            input,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["containers"][0]["hash_from"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let expected = hash_of(&replaced);
    for (what, input) in cases {
        assert_eq!(hash_of(&input), expected, "hash, {what}");
        assert_eq!(scan_of(&input), expected, "scan, {what}");
    }
}

/// Two pods with the same bad container: each error names its own pod (the scan's cache once
/// answered the second pod with the first pod's error).
#[test]
fn the_same_bad_container_in_two_pods_names_each_pod() {
    let pod = |name: &str| {
        format!(
            r#"{{"kind":"Pod","metadata":{{"namespace":"ns","name":"{name}"}},"spec":{{"nodeName":"n","containers":[{{"name":"c","image":"i","ports":[{{"containerPort":"80"}}]}}]}}}}"#
        )
    };
    let input = format!("{}\n{}\n", pod("first"), pod("second"));
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "--from", "1.30", "-i", "-", "-o", "json",
        ],
        input.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors: Vec<&str> = v["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["error"].as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 2);
    assert!(errors[0].starts_with("ns/first: c"), "{errors:?}");
    assert!(errors[1].starts_with("ns/second: c"), "{errors:?}");
}

/// A static pod whose manifest pins the UID it runs under is counted like any other pod by
/// `scan --manifests`; without the manifests it is recreated.
#[test]
fn scan_counts_a_pinned_static_pod_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let pods = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/pods.json");
    let nodes = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/nodes.json");
    let etcd = |out: &std::process::Output| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["pod"] == "etcd-node-a")
            .unwrap()
            .clone()
    };
    let scan = |manifests: &str| {
        kubehash(
            &[
                "scan",
                "--to",
                "1.31",
                "-i",
                pods,
                "--nodes",
                nodes,
                "-o",
                "json",
                "--manifests",
                manifests,
            ],
            b"",
        )
    };
    let unpinned = scan(&dir.path().display().to_string());
    assert_eq!(etcd(&unpinned)["impact"], "recreated");
    std::fs::write(
        dir.path().join("etcd.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n  uid: \"3b1a9c2d8e7f6a5b4c3d2e1f0a9b8c7d\"\nspec: {}\n",
    )
    .unwrap();
    let pinned = scan(&dir.path().display().to_string());
    assert_eq!(etcd(&pinned)["impact"], "restart", "{}", etcd(&pinned));
}

/// pod_workers.go UpdatePod: a pod with a deletionTimestamp is torn down, so none of its
/// containers restarts for a hash change, and `--fail-on-restart` does not count it; a mirror
/// pod being deleted is made again, and its static pod runs on (and is recreated as ever).
#[test]
fn a_pod_being_deleted_restarts_nothing_but_its_mirror_pod_exception_does() {
    let pod = |name: &str, meta: serde_json::Value| {
        let mut p = serde_json::json!({"kind": "Pod",
            "metadata": {"namespace": "ns", "name": name, "uid": name},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running",
                       "containerStatuses": [{"name": "c", "state": {"running": {}}}]}});
        for (k, v) in meta.as_object().unwrap() {
            p["metadata"][k] = v.clone();
        }
        p
    };
    let scan = |items: Vec<serde_json::Value>| {
        let list = serde_json::json!({"kind": "List", "items": items}).to_string();
        let out = kubehash(
            &[
                "scan", "--to", "1.31", "--from", "1.30", "-i", "-", "-o", "json",
            ],
            list.as_bytes(),
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let impact = doc["containers"][0]["impact"].as_str().unwrap().to_string();
        let fail = kubehash(
            &[
                "scan",
                "--to",
                "1.31",
                "--from",
                "1.30",
                "-i",
                "-",
                "--fail-on-restart",
            ],
            list.as_bytes(),
        );
        (
            impact,
            doc["containers"][0]["reasons"][0].clone(),
            fail.status.code(),
        )
    };
    let deleting = serde_json::json!({"deletionTimestamp": "2026-12-07T10:00:00Z"});
    let (impact, reason, code) = scan(vec![pod("web", deleting.clone())]);
    assert_eq!(
        (impact.as_str(), code),
        ("not-running", Some(0)),
        "{reason}"
    );
    assert!(
        reason
            .as_str()
            .unwrap()
            .starts_with("the pod is being deleted"),
        "{reason}"
    );
    let (impact, _, code) = scan(vec![pod("web", serde_json::json!({}))]);
    assert_eq!((impact.as_str(), code), ("restart", Some(3)));
    let mut mirror = deleting;
    mirror["annotations"] = serde_json::json!({"kubernetes.io/config.mirror": "h",
        "kubernetes.io/config.hash": "h", "kubernetes.io/config.source": "file"});
    let (impact, _, code) = scan(vec![pod("etcd-n1", mirror)]);
    assert_eq!((impact.as_str(), code), ("recreated", Some(3)));
}

/// A cluster-wide scan makes the preflight checks Node objects and pods decide, per node: a pod
/// whose nodeSelector its Node no longer satisfies fails admission on that node only; a pod with
/// a cephfs volume (its plugin gone in 1.31) fails volumes on its node, one with a glusterfs
/// volume (gone in 1.26, so not mounted by the 1.30 kubelet either) does not.
#[test]
fn scan_runs_admission_volumes_and_eviction_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = |name: &str, disk: &str| {
        serde_json::json!({"kind": "Node", "metadata": {"name": name, "labels": {"disk": disk}},
            "status": {"nodeInfo": {"kubeletVersion": "v1.30.4"}, "allocatable": {"cpu": "4"}}})
    };
    let pod = |name: &str, node: &str| {
        serde_json::json!({"kind": "Pod", "metadata": {"namespace": "ns", "name": name, "uid": name},
            "spec": {"nodeName": node, "nodeSelector": {"disk": "ssd"},
                     "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}})
    };
    let volume_pod = |name: &str, node: &str, volume: serde_json::Value| {
        let mut p = pod(name, node);
        p["spec"]["nodeSelector"] = serde_json::json!({});
        p["spec"]["volumes"] = serde_json::json!([volume]);
        p
    };
    let nodes = dir.path().join("nodes.json");
    let pods = dir.path().join("pods.json");
    std::fs::write(
        &nodes,
        serde_json::json!({"kind": "List", "items": [node("a", "ssd"), node("b", "hdd")]})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        &pods,
        serde_json::json!({"kind": "List", "items": [
            pod("p", "a"), pod("q", "b"),
            volume_pod("r", "a", serde_json::json!({"name": "fs", "cephfs": {"monitors": ["m"]}})),
            volume_pod("s", "b", serde_json::json!({"name": "fs", "glusterfs": {"endpoints": "e", "path": "p"}})),
        ]})
        .to_string(),
    )
    .unwrap();
    let (n, p) = (nodes.display().to_string(), pods.display().to_string());
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "-i", &p, "--nodes", &n, "-o", "json",
        ],
        b"",
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = |node: &str, check: &str| {
        v["nodes"][node]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == check)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status("a", "admission"), "pass", "{v}");
    assert_eq!(status("b", "admission"), "fail", "{v}");
    assert_eq!(status("a", "volumes"), "fail", "{v}");
    assert_eq!(status("b", "volumes"), "pass", "{v}");
    let table = kubehash(&["scan", "--to", "1.31", "-i", &p, "--nodes", &n], b"");
    assert!(
        text(&table.stdout).contains("Preflight on b: admission fail: ns/q: nodeSelector disk=ssd"),
        "{}",
        text(&table.stdout)
    );
    assert!(
        text(&table.stdout).contains(
            "Preflight on a: volumes fail: ns/r: volume \"fs\" is cephfs, whose plugin no kubelet has from 1.31"
        ),
        "{}",
        text(&table.stdout)
    );
}

/// `--claims` (`kubectl get pv,pvc -A -o json`) gives a file scan the volume behind each claim:
/// a pod on a 1.30 node whose bound claim's volume is in-tree rbd fails `volumes` going to 1.31;
/// the same pod passes when its claim is bound to a CSI volume, or when the claims are not given
/// (the check then says it read inline volumes only). A claims file holding anything else is
/// refused whole, exit 1, one line naming the object.
#[test]
fn claims_give_a_file_scan_the_volumes_behind_them() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = dir.path().join("nodes.json");
    std::fs::write(
        &nodes,
        serde_json::json!({"kind": "Node", "metadata": {"name": "a"},
            "status": {"nodeInfo": {"kubeletVersion": "v1.30.4"}}})
        .to_string(),
    )
    .unwrap();
    let pods = dir.path().join("pods.json");
    std::fs::write(
        &pods,
        serde_json::json!({"kind": "Pod", "metadata": {"namespace": "db", "name": "pg-0", "uid": "pg-0"},
            "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "i"}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-pg-0"}}]},
            "status": {"phase": "Running"}})
        .to_string(),
    )
    .unwrap();
    let claims_file = |source: serde_json::Value| {
        let path = dir.path().join("claims.yaml");
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
             "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "csi": null, "rbd": null,
                      "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "db", "name": "data-pg-0", "uid": "c-1"}},
             "status": {"phase": "Bound"}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"namespace": "db", "name": "data-pg-0", "uid": "c-1"},
             "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1"}, "status": {"phase": "Bound"}}]});
        let mut list = list;
        let spec = &mut list["items"][0]["spec"];
        for (k, v) in source.as_object().unwrap() {
            spec[k] = v.clone();
        }
        // YAML, as `kubectl get -o yaml` writes it, read by the same reader as pods.
        std::fs::write(&path, serde_yaml_ng::to_string(&list).unwrap()).unwrap();
        path.display().to_string()
    };
    let (n, p) = (nodes.display().to_string(), pods.display().to_string());
    let volumes = |extra: &[&str]| {
        let mut args = vec![
            "scan", "--to", "1.31", "-i", &p, "--nodes", &n, "-o", "json",
        ];
        args.extend_from_slice(extra);
        let out = kubehash(&args, b"");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["nodes"]["a"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "volumes")
            .unwrap()
            .clone()
    };
    let rbd = claims_file(serde_json::json!({"rbd": {"monitors": ["m"], "image": "pg"}}));
    let c = volumes(&["--claims", &rbd]);
    assert_eq!(c["status"], "fail", "{c}");
    assert_eq!(
        c["evidence"],
        "db/pg-0: volume \"data\" is claim \"data-pg-0\", bound to persistent volume \"pv-1\" (rbd), whose plugin no kubelet has from 1.31 (\"no volume plugin matched\")"
    );
    let csi = claims_file(
        serde_json::json!({"csi": {"driver": "rbd.csi.ceph.com", "volumeHandle": "h"}}),
    );
    // Passes, saying whether the claims were read.
    let passes = |extra: &[&str], read: &str| {
        let c = volumes(extra);
        assert_eq!(c["status"], "pass", "{c}");
        assert!(c["evidence"].as_str().unwrap().contains(read), "{c}");
    };
    let claims_read = "(inline volumes and the persistent volumes of bound claims)";
    passes(&["--claims", &csi], claims_read);
    passes(
        &[],
        "(inline volumes; persistent volumes behind claims are not)",
    );

    // A cluster without claims: kubectl writes an empty List, which is no error.
    let empty = dir.path().join("empty.json");
    std::fs::write(
        &empty,
        r#"{"apiVersion":"v1","kind":"List","items":[],"metadata":{"resourceVersion":""}}"#,
    )
    .unwrap();
    passes(&["--claims", &empty.display().to_string()], claims_read);
    // Both from stdin: refused before either is read.
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "-i", "-", "--nodes", &n, "--claims", "-",
        ],
        b"{}",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "kubehash: --claims - and --pods - cannot both read stdin: give one of them a file\n"
    );

    // The pods file given as the claims: refused, naming the object; nothing on stdout.
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "-i", &p, "--nodes", &n, "--claims", &p,
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        format!("kubehash: --claims {p}: object 1 of {p} is a Pod, not a PersistentVolume or PersistentVolumeClaim\n")
    );
    // Not JSON or YAML: one line, exit 1.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"kind\": \"PersistentVolume\",").unwrap();
    let b = bad.display().to_string();
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "-i", &p, "--nodes", &n, "--claims", &b,
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains(&b), "{}", text(&out.stderr));
    // Only with pods from a file (with --cluster they come from the API server).
    let out = kubehash(
        &["scan", "--to", "1.31", "--cluster", "--claims", &rbd],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("the argument '--cluster' cannot be used with '--claims <PATH>'"),
        "{}",
        text(&out.stderr)
    );
}

/// Machine output names what it is: `apiVersion` and `kind` first, in JSON and YAML alike.
#[test]
fn json_and_yaml_reports_carry_api_version_and_kind() {
    let json = kubehash(
        &[
            "scan", "--to", "1.31", "-i", PODS, "--nodes", NODES, "-o", "json",
        ],
        b"",
    );
    let yaml = kubehash(
        &[
            "scan", "--to", "1.31", "-i", PODS, "--nodes", NODES, "-o", "yaml",
        ],
        b"",
    );
    let j: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let y: serde_json::Value = serde_yaml_ng::from_slice(&yaml.stdout).unwrap();
    assert_eq!(j, y, "the same document");
    assert!(text(&json.stdout).starts_with(
        "{\n  \"apiVersion\": \"kubehash.dev/v1alpha1\",\n  \"kind\": \"ScanReport\","
    ));
    assert_eq!(j["nodes"]["node-b"]["upgrade"], "in-place");
    let m = kubehash(
        &[
            "matrix",
            "-i",
            PODS,
            "--versions",
            "1.30,1.31",
            "-o",
            "yaml",
        ],
        b"",
    );
    assert!(
        text(&m.stdout).starts_with("apiVersion: kubehash.dev/v1alpha1\nkind: RestartMatrix\n"),
        "{}",
        text(&m.stdout)
    );
}

/// kubectl habits: -n and -l narrow a scan (client-side for files), -A is accepted, and
/// --context or --kubeconfig alone mean --cluster.
#[test]
fn namespace_selector_and_context_as_kubectl_takes_them() {
    let containers = |args: &[&str]| -> serde_json::Value {
        let mut all = vec![
            "scan", "--to", "1.31", "-i", PODS, "--nodes", NODES, "-o", "json",
        ];
        all.extend_from_slice(args);
        let out = kubehash(&all, b"");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["total"]["containers"].clone()
    };
    assert_eq!(containers(&[]), 24);
    assert_eq!(containers(&["-A"]), 24);
    assert_eq!(containers(&["-n", "shop"]), 12);
    assert_eq!(containers(&["-n", "shop", "-l", "app=web"]), 12);
    assert_eq!(containers(&["-l", "k8s-app=kube-proxy"]), 3);
    // Set-based terms, matched as the API server matches them.
    assert_eq!(containers(&["-l", "app in (web,postgres)"]), 14);
    assert_eq!(containers(&["-l", "k8s-app notin (kube-proxy),!app"]), 7);
    // A selector the API server would refuse is refused, before any file is read, rather
    // than read as one that matches nothing.
    for (selector, says) in [
        ("app=web=shop", "found '=', expected ',' or the end"),
        ("app,", "expected a label key after ','"),
        ("app=web shop", "found \"shop\", expected ',' or the end"),
        ("app/x/y", "at most one '/'"),
    ] {
        let out = kubehash(
            &[
                "scan",
                "--to",
                "1.31",
                "-i",
                "/nonexistent/pods.json",
                "--from",
                "1.30",
                "-l",
                selector,
            ],
            b"",
        );
        assert_eq!(out.status.code(), Some(1), "{selector}");
        let err = text(&out.stderr);
        assert!(
            err.starts_with(&format!("kubehash: --selector: {selector:?}: ")) && err.contains(says),
            "{selector}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // --kubeconfig (or --context) alone means the cluster: it reads that kubeconfig.
    let out = kubehash(
        &[
            "scan",
            "--to",
            "1.31",
            "--from",
            "1.30",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("/nonexistent/kubeconfig"),
        "{}",
        text(&out.stderr)
    );
}

/// The first screen of `scan` on the bundled example, exactly: the totals, what was scanned, and
/// per node what the upgrade takes.
#[test]
fn scan_first_screen_on_the_bundled_example() {
    let out = kubehash(
        &[
            "scan",
            "--to",
            "1.31",
            "-i",
            "testdata/cluster/pods.json",
            "--nodes",
            "testdata/cluster/nodes.json",
        ],
        b"",
    );
    let s = text(&out.stdout);
    let first: Vec<&str> = s.lines().take(8).collect();
    assert_eq!(
        first,
        [
            "Upgrade to kubelet 1.31: 15 of 24 containers would be restarted, 1 recreated with their static pod, 0 kept, 8 not running.",
            "Scanned: testdata/cluster/pods.json.",
            "",
            "NODE           KUBELET  UPGRADE                                                           CONTAINERS  RESTART  RECREATED  KEPT  NOT-RUNNING  ERROR",
            "(unscheduled)  ?        nothing restarts                                                  3           0        0          0     3            0",
            "node-a         1.29     in place with kubehash (5 restarts avoided, 1 static pod to pin)  7           5        1          0     1            0",
            "node-b         1.30     in place with kubehash (5 restarts avoided)                       7           5        0          0     2            0",
            "node-c         1.27     in place with kubehash (5 restarts avoided)                       7           5        0          0     2            0",
        ]
    );
    assert!(
        s.contains("Next:\n  15 of the 15 restarts are only the hash format changing"),
        "{s}"
    );
}

/// `matrix -n`/`-l` narrow the pods as scan's do, and each pair counts what scan counts.
#[test]
fn matrix_narrows_pods_as_scan_does() {
    for filter in [
        &["-n", "shop"][..],
        &["-l", "app in (web,postgres)"],
        &["-n", "data", "-l", "app"],
    ] {
        let mut args = vec![
            "matrix",
            "-i",
            PODS,
            "--versions",
            "1.29,1.31",
            "-o",
            "json",
        ];
        args.extend_from_slice(filter);
        let out = kubehash(&args, b"");
        assert!(out.status.success(), "{filter:?}: {}", text(&out.stderr));
        let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut args = vec![
            "scan", "-i", PODS, "--from", "1.29", "--to", "1.31", "-o", "json",
        ];
        args.extend_from_slice(filter);
        let out = kubehash(&args, b"");
        let scan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let t = &scan["total"];
        let pair = &m["pairs"][0];
        assert_eq!(
            (
                &pair["restarted"],
                &pair["recreated"],
                &pair["kept"],
                &pair["not_running"]
            ),
            (
                &t["restart"],
                &t["recreated"],
                &t["kept"],
                &t["not_running"]
            ),
            "{filter:?}"
        );
        assert!(m["containers"].as_u64().unwrap() < 24, "{filter:?}: {m}");
        assert_eq!(m["containers"], t["containers"], "{filter:?}");
    }
}

/// `matrix` labels its pairs.
#[test]
fn matrix_labels_its_pairs() {
    let out = kubehash(
        &[
            "matrix",
            "-i",
            PODS,
            "--versions",
            "1.30,1.31",
            "-o",
            "json",
        ],
        b"",
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["pairs"],
        serde_json::json!([{"from": "1.30", "to": "1.31", "restarted": 15, "recreated": 1,
                            "kept": 0, "not_running": 8, "hash_changed": 24},
                           {"from": "1.31", "to": "1.30", "restarted": 15, "recreated": 1,
                            "kept": 0, "not_running": 8, "hash_changed": 24}])
    );
}

/// Colour only on a terminal and never with NO_COLOR (run under a pseudo-terminal by `script`).
#[test]
fn colour_on_a_terminal_unless_no_color() {
    let bin = env!("CARGO_BIN_EXE_kubehash");
    let run = |no_color: bool| {
        let mut c = Command::new("script");
        c.args([
            "-qec",
            &format!("{bin} scan --to 1.31 -i {PODS} --nodes {NODES}"),
            "/dev/null",
        ]);
        c.env_remove("NO_COLOR");
        if no_color {
            c.env("NO_COLOR", "1");
        }
        text(&c.output().expect("script runs").stdout)
    };
    let coloured = run(false);
    assert!(
        coloured.contains("\x1b[32min place with kubehash"),
        "{coloured}"
    );
    assert!(!run(true).contains('\x1b'));
    // Piped (these tests' usual stdout): no colour either.
    let piped = kubehash(&["scan", "--to", "1.31", "-i", PODS, "--nodes", NODES], b"");
    assert!(!text(&piped.stdout).contains('\x1b'));
}

/// `scan -o json` and `-o yaml` validate against the JSON Schema the README documents
/// (docs/schema/scan-report.schema.json), for the bundled example (with per-node checks, unknown
/// node versions and bad pods too).
#[test]
fn scan_output_validates_against_its_json_schema() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string("docs/schema/scan-report.schema.json").unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    for format in ["json", "yaml"] {
        let out = kubehash(
            &[
                "scan", "--to", "1.31", "-i", PODS, "--nodes", NODES, "-o", format,
            ],
            b"",
        );
        let doc: serde_json::Value = serde_yaml_ng::from_slice(&out.stdout).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "-o {format}: {errors:?}");
    }
    // A report with an unknown node version, a bad container and pods that are not pods.
    let pods = br#"{"kind":"Pod","metadata":{"namespace":"n","name":"bad"},"spec":{"nodeName":"x","containers":[{"name":"c","tty":1}]}}
{"kind":"Pod","metadata":{"namespace":"n","name":"empty"},"spec":{}}"#;
    let out = kubehash(
        &[
            "scan", "--to", "1.31", "--from", "1.30", "-i", "-", "-o", "json",
        ],
        pods,
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        validator.is_valid(&doc),
        "{:?}",
        validator
            .iter_errors(&doc)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );
    // The schema is strict: an unknown key is an error.
    let mut extra = doc.clone();
    extra["surprise"] = serde_json::json!(1);
    assert!(!validator.is_valid(&extra));
    let mut bad_node = doc.clone();
    bad_node["nodes"]["x"]["upgrade"] = serde_json::json!("maybe");
    assert!(!validator.is_valid(&bad_node));
    let mut bad_container = doc;
    bad_container["containers"][0]["impact"] = serde_json::json!("sometimes");
    assert!(!validator.is_valid(&bad_container));
}

/// `--only` picks the verdicts the table lists, `--sort-by` orders it.
#[test]
fn only_and_sort_by_shape_the_container_table() {
    let table = |extra: &[&str]| {
        let mut args = vec!["scan", "--to", "1.31", "-i", PODS, "--nodes", NODES];
        args.extend_from_slice(extra);
        let s = text(&kubehash(&args, b"").stdout);
        s.lines()
            .skip_while(|l| !l.starts_with("CONTAINER "))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let recreated = table(&["--only", "recreated"]);
    assert_eq!(recreated.len(), 1, "{recreated:?}");
    assert!(recreated[0].starts_with("kube-system/etcd-node-a/etcd"));
    let by_node = table(&["--only", "restart", "--sort-by", "node"]);
    assert_eq!(by_node.len(), 15);
    let nodes: Vec<&str> = by_node
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(nodes, sorted);
    // A verdict no container has is said as such, never as "No container restarts".
    let scan = |extra: &[&str]| {
        let mut args = vec!["scan", "--to", "1.31", "-i", PODS, "--nodes", NODES];
        args.extend_from_slice(extra);
        kubehash(&args, b"")
    };
    let none = text(&scan(&["--only", "Error"]).stdout);
    assert!(none.contains("\nNo container is error.\n"), "{none}");
    assert!(!none.contains("No container restarts"), "{none}");
    // A verdict mistyped is refused, with the ones there are: it never lists nothing, silently.
    let typo = scan(&["--only", "restarts"]);
    assert_eq!(typo.status.code(), Some(1));
    assert_eq!(
        text(&typo.stderr),
        "kubehash: invalid value 'restarts' for '--only <VERDICT,…>' [possible values: restart, will-restart, unprovable, recreated, not-running, kept, error] (see kubehash --help)\n"
    );
    assert!(typo.stdout.is_empty());
}

/// `hash` streams its rows, but to a spool: a bad value after good ones prints the error and
/// nothing half-way, in every format.
#[test]
fn hash_prints_nothing_when_the_input_breaks_half_way() {
    let mut input = Vec::new();
    for i in 0..200 {
        input.extend_from_slice(
            format!("{{\"id\":\"c{i}\",\"container\":{{\"name\":\"a\",\"image\":\"b\"}}}}\n")
                .as_bytes(),
        );
    }
    input.extend_from_slice(b"{\"id\":\"broken\",\"container\":{\"name\":");
    for format in ["table", "json", "yaml", "jsonl"] {
        let out = kubehash(&["hash", "-o", format], &input);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{format}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{format}: {}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains("not valid JSON: EOF while parsing"),
            "{format}: {}",
            text(&out.stderr)
        );
    }
}

/// A file and stdin are both read on every core (framed, the frames parsed on the workers), stdin
/// kept as it is read (in memory, then in a temporary file) so that the one reader can read it
/// again where the framer stops; whatever the input, both must print the same bytes and exit
/// alike, and so must stdin when no temporary file can be made (`TMPDIR` missing: the framer
/// stops at the end of what memory keeps). Inputs that break late (after thousands of objects,
/// past the framer's first chunk and past what memory keeps of stdin), break inside a List's
/// `items`, carry bytes Go's reader replaces, or have shapes the framer leaves to the one reader.
#[test]
fn a_file_and_stdin_read_alike() {
    let record = |i: usize| {
        format!("{{\"id\":\"c{i}\",\"container\":{{\"name\":\"n{i}\",\"image\":\"i\",\"args\":[\"{}\"]}}}}\n", "x".repeat(i % 300))
    };
    let many: String = (0..5000).map(record).collect();
    let pod = |i: usize| {
        format!(
            r#"{{"kind":"Pod","metadata":{{"namespace":"ns","name":"p{i}"}},"spec":{{"nodeName":"n","containers":[{{"name":"c","image":"i{i}"}}]}},"status":{{"phase":"Running","containerStatuses":[{{"name":"c","state":{{"running":{{}}}}}}]}}}}"#
        )
    };
    let pods: Vec<String> = (0..3000).map(pod).collect();
    let list = format!(
        r#"{{"kind":"List","metadata":{{}},"items":[{}]}}"#,
        pods.join(",")
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("records", many.clone().into_bytes()),
        (
            "records, the last broken",
            format!("{many}{{\"id\":\"x\",\"container\":{{\"name\":").into_bytes(),
        ),
        (
            "records, one bad number late",
            format!(
                "{many}{{\"id\":\"x\",\"container\":{{\"name\":\"a\",\"image\":1e999}}}}\n{many}"
            )
            .into_bytes(),
        ),
        ("a list", list.clone().into_bytes()),
        (
            "a list, a trailing comma",
            list.replace("]}", ",]}").into_bytes(),
        ),
        (
            "a list, metadata broken after items",
            format!("{}, \"metadata\": {{]}}", &list[..list.len() - 1]).into_bytes(),
        ),
        (
            "invalid UTF-8 and a lone surrogate",
            format!(
                "{}\n{{\"name\":\"a\\ud800\",\"image\":\"\u{e9}\"}}\n",
                &many[..2000]
            )
            .into_bytes()
            .into_iter()
            .map(|b| if b == 0xc3 { 0xff } else { b })
            .collect(),
        ),
        (
            "a top-level scalar between objects",
            format!("{}7\n{}", &many[..3000], &many[3000..6000]).into_bytes(),
        ),
        (
            "records past what memory keeps of stdin, one bad number late",
            format!(
                "{}{{\"id\":\"x\",\"container\":{{\"name\":\"a\",\"image\":1e999}}}}\n{many}",
                many.repeat(5)
            )
            .into_bytes(),
        ),
        ("nothing but white space", b"  \n ".to_vec()),
        ("an empty list", br#"{"kind":"List","items":[]}"#.to_vec()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("input.json");
    let file_arg = file.to_str().unwrap();
    for (what, input) in cases {
        std::fs::write(&file, &input).unwrap();
        let runs: [(&str, &[&str]); 2] = [
            ("hash", &["hash", "--versions", "1.29,1.31", "-o", "jsonl"]),
            (
                "scan",
                &["scan", "--to", "1.31", "--from", "1.30", "-o", "json"],
            ),
        ];
        for (cmd, args) in runs {
            let from_file = kubehash(&[args, &["-i", file_arg]].concat(), b"");
            let from_stdin = kubehash(&[args, &["-i", "-"]].concat(), &input);
            let no_tmp = [("TMPDIR", "/nonexistent/kubehash-test")];
            let kept_in_memory = kubehash_env(&[args, &["-i", "-"]].concat(), &input, &no_tmp);
            // Each names its input: the file by its path, stdin as `stdin` (and `-` in a report).
            let file_names = |b: &[u8]| text(b).replace(file_arg, "INPUT");
            let stdin_names = |b: &[u8]| {
                text(b)
                    .replace("stdin", "INPUT")
                    .replace("\"-\"", "\"INPUT\"")
            };
            assert_eq!(
                from_file.status.code(),
                from_stdin.status.code(),
                "{cmd}, {what}: {}",
                text(&from_file.stderr)
            );
            assert_eq!(
                file_names(&from_file.stdout),
                stdin_names(&from_stdin.stdout),
                "{cmd}, {what}"
            );
            assert_eq!(
                file_names(&from_file.stderr),
                stdin_names(&from_stdin.stderr),
                "{cmd}, {what}"
            );
            for (from, kept) in [
                (&from_stdin.stdout, &kept_in_memory.stdout),
                (&from_stdin.stderr, &kept_in_memory.stderr),
            ] {
                assert_eq!(text(from), text(kept), "{cmd}, {what}, no temporary file");
            }
            assert_eq!(from_stdin.status.code(), kept_in_memory.status.code());
        }
    }
}

/// A table, and a message on stderr, show other people's strings and never obey them: an escape
/// sequence in a pod's name or a container's (a hand-written file holds any text; an image is
/// any text the API server takes) would erase the line that says "drain needed", retitle the
/// terminal or write its clipboard, and a newline would forge a row. Each is printed as a
/// visible escape, the columns still line up, and JSON keeps the exact strings.
#[test]
fn other_peoples_control_characters_are_shown_not_obeyed() {
    // As JSON text: escape, erase the line, carriage return, OSC 52 (the clipboard), BEL, C1
    // CSI, right-to-left override, newline.
    let hostile = r"c\u001b[2K\r\u001b]52;c;cm0gLXJm\u0007\u009b31m\u202eexe.\nevil";
    let pod = format!(
        r#"{{"kind":"Pod","metadata":{{"namespace":"ns","name":"p\u001b[8m"}},"spec":{{"nodeName":"n","containers":[{{"name":"{hostile}","image":"i"}},{{"name":"ok","image":"i"}}]}},"status":{{"phase":"Running","containerStatuses":[{{"name":"{hostile}","state":{{"running":{{}}}}}},{{"name":"ok","state":{{"running":{{}}}}}}]}}}}"#
    );
    let bad_container = format!(r#"{{"name":"{hostile}","image":5}}"#);
    let obeyed = |b: &[u8]| {
        let t = text(b);
        t.chars()
            .find(|c| (c.is_control() && *c != '\n') || ('\u{2028}'..='\u{202e}').contains(c))
    };
    for (args, stdin) in [
        (
            &["scan", "--to", "1.31", "--from", "1.30", "-i", "-"][..],
            pod.as_bytes(),
        ),
        (
            &[
                "scan", "--to", "1.31", "--from", "1.30", "-i", "-", "-o", "wide",
            ],
            pod.as_bytes(),
        ),
        (&["hash", "--versions", "1.30,1.31"], pod.as_bytes()),
        (&["hash"], bad_container.as_bytes()),
    ] {
        let out = kubehash(args, stdin);
        for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert_eq!(obeyed(bytes), None, "{args:?} {stream}: {}", text(bytes));
        }
        let shown = text(&out.stdout) + &text(&out.stderr);
        assert!(
            shown.contains(r"c\u{1b}[2K\r\u{1b}]52;c;cm0gLXJm\u{7}\u{9b}31m\u{202e}exe.\nevil"),
            "{args:?}: {shown}"
        );
    }
    // One row per container, the columns aligned: the row after the hostile one starts where
    // the header's second column does.
    let out = kubehash(&["hash", "--versions", "1.31"], pod.as_bytes());
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let column = |l: &str| l.find("1.31").unwrap();
    assert_eq!(
        column(lines[1]),
        lines[0].find("KUBELET").unwrap(),
        "{table}"
    );
    assert_eq!(column(lines[2]), column(lines[1]), "{table}");
    // Machine formats keep the strings exactly.
    let out = kubehash(
        &["hash", "--versions", "1.31", "-o", "jsonl"],
        pod.as_bytes(),
    );
    let first: serde_json::Value =
        serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    let want: serde_json::Value =
        serde_json::from_str(&format!(r#""ns/p\u001b[8m/{hostile}""#)).unwrap();
    assert_eq!(first["id"], want);

    // On a terminal (through `script`): kubehash's own colours, and no one else's escape.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pod.json");
    std::fs::write(&file, &pod).unwrap();
    let bin = env!("CARGO_BIN_EXE_kubehash");
    let on_terminal = |args: &str| {
        let out = Command::new("script")
            .args([
                "-qec",
                &format!("{bin} {args} -i {}", file.display()),
                "/dev/null",
            ])
            .env_remove("NO_COLOR")
            .output()
            .expect("script runs");
        text(&out.stdout)
    };
    let table = on_terminal("scan --to 1.31 --from 1.30");
    assert!(table.contains("\x1b[32min place with kubehash"), "{table}");
    let foreign: Vec<&str> = table
        .split('\x1b')
        .skip(1)
        .filter(|s| !s.starts_with("[32m") && !s.starts_with("[0m"))
        .collect();
    assert!(foreign.is_empty(), "{foreign:?} in {table}");
    // `--explain` prints the exact bytes the kubelet hashes (a ≤ 1.15 dump holds them raw) to a
    // file or a pipe, and shows them escaped on a terminal.
    let piped = kubehash(
        &["hash", "--explain", "1.15", "-i", file.to_str().unwrap()],
        b"",
    );
    assert!(
        text(&piped.stdout).contains("\x1b[2K\r\x1b]52;c;cm0gLXJm\x07"),
        "{}",
        text(&piped.stdout)
    );
    let shown = on_terminal("hash --explain 1.15");
    assert!(!shown.contains('\x1b'), "{shown}");
    assert!(
        shown.contains(r"c\u{1b}[2K\r\u{1b}]52;c;cm0gLXJm\u{7}"),
        "{shown}"
    );
}

/// Windows PowerShell 5 saves `kubectl get pods -o json > pods.json` as UTF-16 with a byte
/// order mark, and `Out-File -Encoding utf8` as UTF-8 with one. kubectl reads both (go-yaml goes
/// by the mark), and so does kubehash: JSON and YAML, from a file (whatever its extension says)
/// and from stdin, print what the same text in plain UTF-8 prints, byte for byte. Characters
/// outside the Basic Multilingual Plane (surrogate pairs in UTF-16) fall across every read
/// boundary. UTF-16 that breaks its mark's promise is one line naming the byte, and nothing is
/// printed.
#[test]
fn inputs_saved_by_windows_powershell_read_as_their_utf8_text() {
    let records: String = (0..3000)
        .map(|i| {
            format!(
                "{{\"id\":\"c{i}\",\"container\":{{\"name\":\"n{i}\",\"image\":\"i\",\"args\":[\"{}\"]}}}}\n",
                "\u{1F600}é".repeat(i % 7)
            )
        })
        .collect();
    let yaml = "kind: Pod\nmetadata: {namespace: ns, name: p}\nspec:\n  nodeName: n\n  containers:\n  - name: c\n    image: \"i\u{1F680}\"\n    tty: yes\n";
    let pods = std::fs::read_to_string("testdata/cluster/pods.json").unwrap();
    let utf16 = |t: &str, big: bool| -> Vec<u8> {
        let mark: &[u8] = if big { b"\xFE\xFF" } else { b"\xFF\xFE" };
        let units = t.encode_utf16().flat_map(|u| match big {
            true => u.to_be_bytes(),
            false => u.to_le_bytes(),
        });
        mark.iter().copied().chain(units).collect()
    };
    let marked = |t: &str| -> Vec<(&str, Vec<u8>)> {
        vec![
            (
                "UTF-8 with a mark",
                [b"\xEF\xBB\xBF", t.as_bytes()].concat(),
            ),
            ("UTF-16LE", utf16(t, false)),
            ("UTF-16BE", utf16(t, true)),
        ]
    };
    let hash: &[&str] = &["hash", "--versions", "1.15,1.29,1.31", "-o", "jsonl"];
    let scan: &[&str] = &["scan", "--to", "1.31", "--from", "1.30", "-o", "json"];
    let dir = tempfile::tempdir().unwrap();
    for (what, plain, ext, args) in [
        ("records", &records, "json", hash),
        ("a YAML pod", &yaml.to_string(), "yaml", hash),
        ("the example's pods", &pods, "json", scan),
    ] {
        let run = |name: &str, bytes: &[u8], stdin: bool| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let input = if stdin { "-" } else { path.to_str().unwrap() };
            let out = kubehash(
                &[args, &["-i", input]].concat(),
                if stdin { bytes } else { b"" },
            );
            // Each names its input: the file by its path, stdin as `stdin`.
            let named = |b: &[u8]| match stdin {
                true => text(b).replace("stdin", "INPUT"),
                false => text(b).replace(path.to_str().unwrap(), "INPUT"),
            };
            (out.status.code(), named(&out.stdout), named(&out.stderr))
        };
        let want = run(&format!("plain.{ext}"), plain.as_bytes(), false);
        assert_eq!(want.0, Some(0), "{what}: {}", want.2);
        for (encoding, bytes) in marked(plain) {
            let same = |got: (Option<i32>, String, String), how: &str| {
                // The first line that differs, not two whole reports.
                let differ = |a: &str, b: &str| {
                    a.lines()
                        .zip(b.lines())
                        .find(|(x, y)| x != y)
                        .map(|(x, y)| format!("{x} ≠ {y}"))
                };
                assert!(
                    got == want,
                    "{what}, {encoding}, {how}: exit {:?} ≠ {:?}; stdout {:?}; stderr {:?}",
                    got.0,
                    want.0,
                    differ(&got.1, &want.1),
                    differ(&got.2, &want.2).unwrap_or(got.2.clone())
                );
            };
            for name in [format!("in.{ext}"), "in".to_string()] {
                same(run(&name, &bytes, false), &name);
            }
            same(run("stdin", &bytes, true), "stdin");
        }
    }
    // A compressed file, whatever its name says, is named as such.
    for name in ["pods.json", "pods.json.gz", "pods.yaml"] {
        let path = dir.path().join(name);
        std::fs::write(&path, b"\x1F\x8B\x08\x00\x00\x00\x00\x00\x00\x03").unwrap();
        let out = kubehash(&[&scan[..5], &["-i", path.to_str().unwrap()]].concat(), b"");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(
            err,
            format!(
                "kubehash: {}: gzip-compressed, not JSON or YAML: decompress it first (zcat)\n",
                path.display()
            )
        );
    }
    for (bytes, byte, why) in [
        (
            b"\xFF\xFE{\x00\"\x00a\x00\x00\xDC".to_vec(),
            8,
            "a surrogate without its pair",
        ),
        (
            b"\xFE\xFF\x00{\x00".to_vec(),
            4,
            "the input ends inside a character",
        ),
    ] {
        for stdin in [false, true] {
            let path = dir.path().join("bad.json");
            std::fs::write(&path, &bytes).unwrap();
            let input = if stdin { "-" } else { path.to_str().unwrap() };
            let out = kubehash(&["hash", "-i", input], if stdin { &bytes } else { b"" });
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains(&format!(
                    "byte {byte} is not UTF-16 as the byte order mark says ({why})"
                )),
                "{err}"
            );
        }
    }
}

/// YAML means what it means to kubectl and the kubelet (YAML 1.1 scalars through
/// `sigs.k8s.io/yaml`): plain `010` is 8 and `yes` is true, so a pod written that way hashes as
/// the JSON the API server would hold; a tagged scalar is refused, naming it.
#[test]
fn yaml_scalars_hash_as_go_reads_them() {
    let yaml = b"kind: Pod\nmetadata: {namespace: ns, name: p}\nspec:\n  containers:\n  - name: c\n    image: i\n    tty: yes\n    stdin: off\n    ports:\n    - containerPort: 010\n    resources:\n      limits: {cpu: 010, memory: 1_000}\n";
    let json = br#"{"kind":"Pod","metadata":{"namespace":"ns","name":"p"},"spec":{"containers":[{"name":"c","image":"i","tty":true,"stdin":false,"ports":[{"containerPort":8}],"resources":{"limits":{"cpu":8,"memory":1000}}}]}}"#;
    let hashes = |input: &[u8]| {
        let out = kubehash(&["hash", "--versions", "1.15,1.30", "-o", "jsonl"], input);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(hashes(yaml), hashes(json));
    let out = kubehash(
        &["hash", "-o", "jsonl"],
        b"name: c\nimage: i\nworkingDir: !!str 010\n",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("the YAML scalar \"010\" has a tag"),
        "{}",
        text(&out.stderr)
    );
}

/// `Quantity.UnmarshalJSON` parses a JSON number's text as it parses a string's contents, so a
/// quantity written as a number (as hand-written static pod manifests do: `cpu: 0.5`, or
/// `0.50`, which a struct dump tells from `0.5`) hashes as the same text in a string, in every
/// version, from stdin, a file, a PodList and YAML.
#[test]
fn a_quantity_written_as_a_number_hashes_as_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let container = |cpu: &str| {
        format!(
            r#"{{"name":"a","image":"b","resources":{{"limits":{{"cpu":{cpu},"memory":134217728}},"requests":{{"cpu":{cpu}}}}}}}"#
        )
    };
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let hashes = |input: &str, stdin: &str| {
        let out = kubehash(
            &["hash", "--versions", "all", "-o", "jsonl", "-i", input],
            stdin.as_bytes(),
        );
        assert!(out.status.success(), "{input}: {}", text(&out.stderr));
        let first: serde_json::Value =
            serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
        first["hash"].clone()
    };
    for number in ["0.5", "0.50", "5E-1", "1e3", "-0"] {
        let want = hashes("-", &container(&format!("\"{number}\"")));
        assert_eq!(want.as_object().unwrap().len(), 30);
        let podlist = format!(
            r#"{{"kind":"PodList","items":[{{"metadata":{{"name":"p"}},"spec":{{"containers":[{}]}}}}]}}"#,
            container(number)
        );
        for (input, stdin) in [
            ("-".to_string(), container(number)),
            (file("c.json", &container(number)), String::new()),
            (file("pods.json", &podlist), String::new()),
        ] {
            assert_eq!(hashes(&input, &stdin), want, "{number} {input}");
        }
    }
    let want = hashes("-", &container(r#""0.5""#));
    let yaml = "name: a\nimage: b\nresources:\n  limits:\n    cpu: 0.5\n    memory: 134217728\n  requests:\n    cpu: .5\n";
    assert_eq!(hashes(&file("c.yaml", yaml), ""), want);
    // Go's `json.Marshal` writes `0.50` from YAML as `0.5`, and a struct dump tells them apart.
    let yaml = yaml.replace(".5", "0.50");
    assert_eq!(hashes(&file("c.yaml", &yaml), ""), want);
    assert_ne!(hashes("-", &container("0.50")), want);
}

/// A quantity string with an escape fails `Quantity.UnmarshalJSON`, which parses the raw text,
/// backslash and all: the container is not hashed, whichever reader reads it; `-0` is 0 to an
/// integer field, from JSON and from YAML (where `json.Marshal` writes `-0.0` as `-0`).
#[test]
fn an_escaped_quantity_fails_and_minus_zero_is_zero() {
    let dir = tempfile::tempdir().unwrap();
    let escaped = r#"{"name":"a","image":"b","resources":{"limits":{"cpu":"0.\u0035"}}}"#;
    let path = dir.path().join("c.json");
    std::fs::write(&path, escaped).unwrap();
    let list = dir.path().join("list.json");
    std::fs::write(&list, format!("[{escaped},{escaped}]")).unwrap();
    let (path, list) = (path.to_string_lossy(), list.to_string_lossy());
    // 1.31 alone reads a bare container's name and image without decoding it, where it can.
    for (input, stdin, versions) in [
        ("-", escaped, "all"),
        (&*path, "", "all"),
        (&*list, "", "all"),
        (&*list, "", "1.31"),
    ] {
        let out = kubehash(
            &["hash", "--versions", versions, "-o", "jsonl", "-i", input],
            stdin.as_bytes(),
        );
        assert_eq!(out.status.code(), Some(1), "{input}");
        let out = text(&out.stdout);
        assert!(
            out.lines()
                .all(|l| l.contains(r#""error":"a.resources.limits.cpu"#)
                    && l.contains("quantities must match")),
            "{input}: {out}"
        );
    }
    let port = |p: &str| format!(r#"{{"name":"a","image":"b","ports":[{{"containerPort":{p}}}]}}"#);
    let hash = |stdin: &str| {
        let out = kubehash(
            &["hash", "--versions", "1.15,1.30", "-o", "jsonl"],
            stdin.as_bytes(),
        );
        (out.status.code(), text(&out.stdout))
    };
    let zero = hash(&port("0"));
    assert_eq!(zero.0, Some(0));
    assert_eq!(hash(&port("-0")), zero);
    assert_eq!(
        hash("name: a\nimage: b\nports:\n- containerPort: -0.0\n"),
        zero
    );
    // Go's `strconv.ParseInt` refuses `-0.0` written in JSON.
    assert_eq!(hash(&port("-0.0")).0, Some(1));
}

/// The hash table keeps its rows until the whole input is read, past 50,000 in a temporary file.
/// Without `$TMPDIR` that file cannot be made: one line naming it, exit 1, nothing printed.
#[test]
fn rows_without_a_temporary_file_say_where() {
    let input: String = (0..60_000)
        .map(|i| format!("{{\"name\":\"c{i}\",\"image\":\"i\"}}\n"))
        .collect();
    let out = kubehash_env(
        &["hash", "--versions", "1.31", "-i", "-"],
        input.as_bytes(),
        &[("TMPDIR", "/nonexistent/kubehash-test")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "kubehash: the rows kept before printing (a temporary file in /nonexistent/kubehash-test):"
        ),
        "{err}"
    );
}

/// `audit snapshot --out` replaces an earlier snapshot only. Given a journal, a plan or a
/// manifest by mistake, it refused nothing and replaced it: an upgrade's journal lost is its
/// rollback lost. Refused before the runtime is asked (here, none runs).
#[test]
fn audit_snapshot_never_replaces_what_is_not_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("1.30-to-1.31.jsonl");
    let body = b"{\"kind\":\"begin\",\"at_unix\":1,\"to\":\"1.31\",\"from\":\"1.30\",\"runtime\":\"containerd 1.7\"}\n";
    std::fs::write(&journal, body).unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&journal, &link).unwrap();
    let sock = format!("unix://{}", dir.path().join("none.sock").display());
    for (out, says) in [
        (
            &journal,
            "it holds something other than a kubehash audit snapshot",
        ),
        (&link, "it is there and not a regular file"),
        (
            &dir.path().to_path_buf(),
            "it is there and not a regular file",
        ),
    ] {
        let o = out.display().to_string();
        let r = kubehash(&["audit", "snapshot", "--cri", &sock, "--out", &o], b"");
        assert_eq!(r.status.code(), Some(1));
        assert_eq!(
            text(&r.stderr),
            format!("kubehash: --out {o}: {says}; kubehash replaces only an earlier audit snapshot: give another path\n")
        );
    }
    assert_eq!(std::fs::read(&journal).unwrap(), body);
    assert_eq!(std::fs::read_link(&link).unwrap(), journal);
    // An earlier snapshot may be replaced: the runtime is asked (and is not there).
    let earlier = dir.path().join("before.json");
    std::fs::write(&earlier, br#"{"apiVersion":"kubehash.dev/v1alpha1","kind":"AuditSnapshot","taken_at_unix":1,"containers":[]}"#).unwrap();
    let e = earlier.display().to_string();
    let r = kubehash(&["audit", "snapshot", "--cri", &sock, "--out", &e], b"");
    assert!(
        text(&r.stderr).contains("CRI endpoint"),
        "{}",
        text(&r.stderr)
    );
}

/// A --cri socket where something other than a CRI runtime listens (here, an HTTP/1 server) is
/// named as such, not left at "transport error".
#[test]
fn a_socket_that_does_not_speak_cri_is_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("http.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut c in listener.incoming().flatten() {
            let _ = c.read(&mut [0u8; 64]);
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            // Held open until the client goes: what it reads is the answer, not a hang-up.
            while c.read(&mut [0u8; 64]).is_ok_and(|n| n > 0) {}
        }
    });
    let endpoint = format!("unix://{}", sock.display());
    let out = kubehash(
        &[
            "node", "plan", "--to", "1.31", "--from", "1.30", "-i", PODS, "--cri", &endpoint,
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "kubehash: CRI endpoint {endpoint}: what listens there does not speak CRI (gRPC), or closed the connection: Version: "
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A pod the input lists twice (a directory holding the cluster's PodList and a copy of one of
/// its pods) is one pod: counted once when both listings assess alike, and when they do not
/// (listings taken at different times), counted from its first listing with a line saying so,
/// and the scan is incomplete (2). Pods without a UID are never taken for one another.
#[test]
fn a_pod_listed_twice_is_counted_once() {
    let summary = |out: &Output| {
        text(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let once = kubehash(&["scan", "--to", "1.31", "-i", PODS, "--nodes", NODES], b"");
    assert_eq!(once.status.code(), Some(0), "{}", text(&once.stderr));
    let list: serde_json::Value = serde_json::from_slice(&std::fs::read(PODS).unwrap()).unwrap();
    let pod = list["items"][0].clone();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(PODS, d.join("a.json")).unwrap();
    let scan = || {
        kubehash(
            &[
                "scan",
                "--to",
                "1.31",
                "-i",
                d.to_str().unwrap(),
                "--nodes",
                NODES,
            ],
            b"",
        )
    };
    let matrix = |input: &str| kubehash(&["matrix", "-i", input, "--versions", "1.29,1.31"], b"");
    std::fs::write(d.join("b.json"), serde_json::to_vec(&pod).unwrap()).unwrap();
    let twice = scan();
    assert_eq!(twice.status.code(), Some(0), "{}", text(&twice.stderr));
    assert_eq!(summary(&twice), summary(&once));
    // `matrix` counts each pod once too.
    let (m_once, m_twice) = (matrix(PODS), matrix(d.to_str().unwrap()));
    assert_eq!(m_twice.status.code(), Some(0), "{}", text(&m_twice.stderr));
    assert_eq!(text(&m_twice.stdout), text(&m_once.stdout));

    let mut later = pod.clone();
    later["spec"]["containers"][0]["image"] = "registry.k8s.io/kube-proxy:v9".into();
    std::fs::write(d.join("b.json"), serde_json::to_vec(&later).unwrap()).unwrap();
    let differently = scan();
    assert_eq!(
        differently.status.code(),
        Some(2),
        "{}",
        text(&differently.stderr)
    );
    assert_eq!(summary(&differently), summary(&once));
    let err = text(&differently.stderr);
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    assert!(
        err.contains(&format!(
            "b.json: object 1: pod kube-system/kube-proxy-x7k2p (uid {uid}) is listed again"
        )),
        "{err}"
    );
    let m_differently = matrix(d.to_str().unwrap());
    assert_eq!(
        m_differently.status.code(),
        Some(2),
        "{}",
        text(&m_differently.stderr)
    );
    assert_eq!(text(&m_differently.stdout), text(&m_once.stdout));
    let err = text(&m_differently.stderr);
    assert!(
        err.contains(&format!(
            "not counted: {}: object 1: pod kube-system/kube-proxy-x7k2p (uid {uid}) is listed again, and hashed otherwise",
            d.join("b.json").display()
        )),
        "{err}"
    );

    // Without UIDs, two listings of one name are two pods (manifests of two nodes, say).
    let mut bare = pod.clone();
    bare["metadata"].as_object_mut().unwrap().remove("uid");
    let bare = serde_json::to_string(&bare).unwrap();
    let out = kubehash(
        &["scan", "--to", "1.31", "--from", "1.30", "-i", "-"],
        format!("{bare}\n{bare}\n").as_bytes(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        summary(&out).starts_with("Upgrade to kubelet 1.31: 2 of 2 containers"),
        "{}",
        text(&out.stdout)
    );
}

/// The command lines in `text` worth checking: in code blocks, lines that run `kubehash` (a
/// trailing `\` joins the next line, a `#` comment is cut), with `whole` set; elsewhere, code
/// spans that start with `kubehash` or with one of its commands (`node apply --pins-only`).
fn command_lines(text: &str, commands: &[String]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let line = line.split(" #").next().unwrap_or("").trim();
            let joined = format!("{pending} {}", line.trim_end_matches('\\'));
            if line.ends_with('\\') {
                pending = joined;
                continue;
            }
            pending.clear();
            let joined = shell_cut(joined.trim());
            if joined.starts_with("kubehash ") {
                out.push((joined.to_string(), true));
            }
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            let first = span.split_whitespace().next().unwrap_or("");
            if first == "kubehash" {
                out.push((span.to_string(), false));
            } else if commands.iter().any(|c| c == first) {
                out.push((format!("kubehash {span}"), false));
            }
        }
    }
    out
}

/// The commands prose suggests, as messages and help texts write them: from `kubehash` and one
/// of its commands to the end of the clause (a quote, a backtick, a bracket, `; `, `, `, `. `,
/// or the line's end); `{journal}` in a format string stands for a value.
fn prose_commands(text: &str, commands: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("kubehash ") {
        let rest = &text[at..];
        let end = ['"', '`', ')', '\n', '\\']
            .iter()
            .filter_map(|c| rest.find(*c))
            .chain(["; ", ", ", ". "].iter().filter_map(|s| rest.find(s)))
            .min()
            .unwrap_or(rest.len());
        let line = rest[..end].trim_end_matches('.');
        if line
            .split_whitespace()
            .nth(1)
            .is_some_and(|w| w.split('|').all(|w| commands.iter().any(|c| c == w)))
        {
            out.push(line.replace(['{', '}'], ""));
        }
    }
    out
}

/// `line` up to the shell's first redirection or pipe into another program (a ` | ` before a
/// flag is a usage line's alternative).
fn shell_cut(line: &str) -> &str {
    let mut end = line.len();
    for op in [" > ", " >> ", " 2>", " && ", " ; "] {
        end = end.min(line.find(op).unwrap_or(end));
    }
    for (at, _) in line.match_indices(" | ") {
        if !line[at + 3..].starts_with('-') {
            end = end.min(at);
        }
    }
    line[..end].trim_end()
}

/// Why `line` does not name only flags its command takes, if it does not: it walks the
/// subcommands its words name, then looks up every `--long` and `-s` word in that command.
fn flags_unknown_in(root: &clap::Command, line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut cmd = root;
    let mut rest = &words[1..];
    while let Some(&word) = rest.first() {
        let alternatives: Vec<&str> = word.split('|').collect();
        if alternatives.len() > 1
            && alternatives
                .iter()
                .all(|a| cmd.find_subcommand(a).is_some())
        {
            // `node plan|apply --to 1.31`: each alternative with the rest of the line.
            return alternatives.iter().find_map(|a| {
                let tail = rest[1..].join(" ");
                flags_unknown_in(cmd, &format!("{} {a} {tail}", cmd.get_name()))
            });
        }
        let Some(sub) = cmd.find_subcommand(word) else {
            break;
        };
        cmd = sub;
        rest = &rest[1..];
    }
    let takes = |long: &str| {
        long == "help"
            || cmd.get_arguments().any(|a| {
                a.get_long() == Some(long)
                    || a.get_all_aliases().into_iter().flatten().any(|x| x == long)
            })
    };
    let takes_short = |c: char| c == 'h' || cmd.get_arguments().any(|a| a.get_short() == Some(c));
    for word in rest.iter().flat_map(|w| w.split('|')) {
        let word = word.trim_start_matches(['[', '(']);
        let word = word.trim_end_matches([']', ')', ',', '.', ':', ';', '…']);
        if let Some(long) = word.strip_prefix("--") {
            let long = long.split('=').next().unwrap_or("");
            if !long.is_empty() && !takes(long) {
                return Some(format!("`{}` takes no --{long}", cmd.get_name()));
            }
        } else if let Some(short) = word.strip_prefix('-') {
            let mut chars = short.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                if c.is_ascii_alphabetic() && !takes_short(c) {
                    return Some(format!("`{}` takes no -{c}", cmd.get_name()));
                }
            }
        }
    }
    None
}

/// A word that stands for a value the reader fills in (`VERSION`, `PODS`, `1.V`, `…`).
fn has_placeholder(line: &str) -> bool {
    line.split(|c: char| c.is_whitespace() || "[]()|=,".contains(c))
        .any(|w| {
            w.contains('…')
                || w.contains("1.V")
                || (w.len() > 1
                    && w.chars().any(|c| c.is_ascii_uppercase())
                    && w.chars()
                        .all(|c| c.is_ascii_uppercase() || "_.-".contains(c)))
        })
        || line.contains(['[', '|'])
}

/// Every flag the README and the docs show a command with is one that command takes, and every
/// whole command line in their code blocks parses; so do the commands `--help` and the bundled
/// example's scan suggest. A flag renamed in `args.rs` and not in the prose fails here.
#[test]
fn the_docs_name_only_flags_the_commands_take() {
    use clap::{CommandFactory, Parser};
    let root = kubehash::cli::args::Cli::command();
    let commands: Vec<String> = root
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let dir = env!("CARGO_MANIFEST_DIR");
    let docs = [
        "README.md",
        "docs/design.md",
        "docs/architecture.md",
        "docs/performance.md",
        "docs/containerd-notes.md",
    ];
    let sources: Vec<(String, String)> = docs
        .iter()
        .map(|f| {
            (
                f.to_string(),
                std::fs::read_to_string(format!("{dir}/{f}")).unwrap(),
            )
        })
        .collect();
    // Prose: every --help, every message in the sources, the example scan's `Next:` lines.
    let mut prose: Vec<(String, String)> = Vec::new();
    let mut all = vec![root.clone()];
    while let Some(mut cmd) = all.pop() {
        all.extend(cmd.get_subcommands().cloned());
        let name = format!("{} --help", cmd.get_name());
        prose.push((name, cmd.render_long_help().to_string()));
    }
    let mut dirs = vec![std::path::PathBuf::from(format!("{dir}/src"))];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                prose.push((path.display().to_string(), text));
            }
        }
    }
    let scan = kubehash(&["scan", "--to", "1.31", "-i", PODS, "--nodes", NODES], b"");
    let next = text(&scan.stdout);
    assert!(
        next.contains("kubehash node"),
        "the example's scan suggests no command"
    );
    prose.push(("the example's scan".into(), next));
    let mut seen = (0, 0, 0);
    for (source, text) in &prose {
        for line in prose_commands(text, &commands) {
            seen.2 += 1;
            if let Some(why) = flags_unknown_in(&root, &line) {
                panic!("{source}: {line}: {why}");
            }
        }
    }
    for (source, text) in &sources {
        for (line, whole) in command_lines(text, &commands) {
            seen.0 += 1;
            if let Some(why) = flags_unknown_in(&root, &line) {
                panic!("{source}: {line}: {why}");
            }
            if whole && !has_placeholder(&line) {
                seen.1 += 1;
                let words: Vec<&str> = line.split_whitespace().collect();
                if let Err(e) = kubehash::cli::args::Cli::try_parse_from(&words) {
                    panic!("{source}: {line}: does not parse: {e}");
                }
            }
        }
    }
    assert!(
        seen.0 > 40 && seen.1 > 10 && seen.2 > 40,
        "lines checked, parsed, prose: {seen:?}"
    );
}
