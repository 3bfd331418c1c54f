//! `kubehash agent` through a whole kubelet binary swap: a real containerd (tests/harness), a local
//! HTTP server standing in for the kubelet's healthz (up → down → up), and an API server over real
//! HTTP answering with kube-apiserver-shaped Node and PodList responses and accepting Events (no
//! kube-apiserver runs on these machines) and enforcing deploy/rbac.yaml's rules as RBAC would
//! (403 otherwise). The agent is killed (SIGKILL) and started again while
//! Planned and while Applied, and must resume without writing twice.

mod harness;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::{hash, pod_json, Containerd};
use kubehash::containerd::{parse_metadata, stored_hashes, Store, EXTENSION};
use kubehash::cri::Cri;
use serde_json::{json, Value};

/// Answers a request: (method, target, body) → (status, body).
type Handler = Arc<dyn Fn(&str, &str, &str) -> (u16, String) + Send + Sync>;

/// An HTTP/1.1 server answering with `handler(method, target, body)`; returns its address.
fn http_server(handler: Handler) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(5000) {
            let Ok(stream) = stream else { continue };
            let handler = handler.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let (method, target) = (
                    parts.next().unwrap_or("").to_string(),
                    parts.next().unwrap_or("").to_string(),
                );
                let mut len = 0;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                let _ = reader.read_exact(&mut body);
                let (code, resp) = handler(&method, &target, &String::from_utf8_lossy(&body));
                let mut stream = stream;
                let _ = write!(stream, "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{resp}", resp.len());
            });
        }
    });
    addr
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn phase(state_dir: &Path) -> String {
    std::fs::read_to_string(state_dir.join("agent-state.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .and_then(|v| v["phase"].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_plans_applies_while_the_kubelet_is_down_and_verifies_after() {
    let mut ctrd = Containerd::start();
    let ep = ctrd.endpoint();
    let mut cri = Cri::connect(&ep).await.unwrap();
    let harness::WebPod {
        web,
        changed_now,
        web_id,
        changed_id,
        ..
    } = harness::web_pod(&ctrd, &mut cri, "1.30").await;

    // The API server: the Node (annotated for 1.31, kubelet 1.30), its pods, and Events.
    let events: Arc<Mutex<Vec<Value>>> = Arc::default();
    let ev = events.clone();
    let pod_list = json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},
        "items":[pod_json("shop","web-1","uid-web-1",&[web.clone(), changed_now.clone()])]})
    .to_string();
    let node = |annotated: bool| {
        let annotations = if annotated {
            json!({"kubehash.dev/target-kubelet-version":"v1.31.0"})
        } else {
            json!({})
        };
        json!({"kind":"Node","apiVersion":"v1","metadata":{"name":"test-node","uid":"node-uid-1","resourceVersion":"100",
            "annotations":annotations},"status":{"nodeInfo":{"kubeletVersion":"v1.30.2"}}})
    };
    // The Node is annotated only once the watch is running: the annotation arrives as a watch
    // event, as it does when upgrade tooling sets it.
    let watched = Arc::new(AtomicBool::new(false));
    let w = watched.clone();
    let watch_requests = Arc::new(Mutex::new(Vec::<String>::new()));
    let wr = watch_requests.clone();
    // RBAC as deploy/rbac.yaml grants it: anything else is 403, as kube-apiserver answers.
    let grants = harness::rbac::agent_grants();
    let used: Arc<Mutex<BTreeSet<harness::rbac::Grant>>> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let (u, r) = (used.clone(), refused.clone());
    let api = http_server(Arc::new(move |method, target, body| {
        let Some(want) = harness::rbac::attributes(method, target) else {
            r.lock().unwrap().push(format!("{method} {target}"));
            return (404, "{}".into());
        };
        if !harness::rbac::allowed(&grants, &want) {
            r.lock().unwrap().push(format!("{method} {target}"));
            return (403, harness::rbac::forbidden(&want));
        }
        u.lock().unwrap().insert(want);
        if method == "GET" && target.starts_with("/api/v1/nodes/test-node") {
            (200, node(w.load(Ordering::SeqCst)).to_string())
        } else if method == "GET"
            && target.starts_with("/api/v1/nodes?")
            && target.contains("watch=true")
        {
            wr.lock().unwrap().push(target.to_string());
            let first = !w.swap(true, Ordering::SeqCst);
            let event =
                json!({"type": if first { "MODIFIED" } else { "ADDED" }, "object": node(true)});
            (200, format!("{event}\n"))
        } else if method == "GET"
            && target.starts_with("/api/v1/pods")
            && target.contains("spec.nodeName%3Dtest-node")
        {
            (200, pod_list.clone())
        } else if method == "POST" && target.starts_with("/api/v1/namespaces/default/events") {
            let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
            ev.lock().unwrap().push(v.clone());
            (201, body.to_string())
        } else {
            (404, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#.into())
        }
    }));
    let kubeconfig = ctrd.dir.join("kubeconfig");
    std::fs::write(&kubeconfig, format!("apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: \"http://{api}\"}}\nusers:\n- name: t\n  user: {{token: t}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t}}\ncurrent-context: t\n")).unwrap();

    // The kubelet's healthz.
    let kubelet_up = Arc::new(AtomicBool::new(true));
    let up = kubelet_up.clone();
    let healthz = http_server(Arc::new(move |_, _, _| {
        if up.load(Ordering::SeqCst) {
            (200, "ok".into())
        } else {
            (503, "down".into())
        }
    }));

    let state_dir = ctrd.dir.join("state");
    let metrics_port = free_port();
    let start_agent = || -> Child {
        Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args([
                "agent",
                "--node-name",
                "test-node",
                "--cri",
                &ep,
                "--containerd",
                &ep,
                "--grace-seconds",
                "1",
                "--poll-ms",
                "150",
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--kubelet-healthz")
            .arg(format!("http://{healthz}/healthz"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(ctrd.dir.join("agent.log"))
                    .unwrap(),
            ))
            .spawn()
            .unwrap()
    };
    let reasons = |events: &Arc<Mutex<Vec<Value>>>| -> Vec<String> {
        events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let store = Store::connect(&ep).await.unwrap();
    let web_before = store.get(&web_id).await.unwrap().extensions[EXTENSION]
        .value
        .clone();
    let changed_before = store.get(&changed_id).await.unwrap().extensions[EXTENSION]
        .value
        .clone();

    // 1. Kubelet up: the annotation arrives through the Node watch; the plan is published,
    //    nothing is written.
    let mut agent = start_agent();
    wait("the node watch", Duration::from_secs(30), || {
        !watch_requests.lock().unwrap().is_empty()
    });
    assert!(
        watch_requests.lock().unwrap()[0].contains("fieldSelector=metadata.name%3Dtest-node"),
        "{:?}",
        watch_requests.lock().unwrap()
    );
    wait("the plan", Duration::from_secs(30), || {
        phase(&state_dir) == "planned"
    });
    wait("the plan event", Duration::from_secs(10), || {
        reasons(&events).contains(&"KubehashPlanned".to_string())
    });
    let planned = events
        .lock()
        .unwrap()
        .iter()
        .find(|e| e["reason"] == "KubehashPlanned")
        .cloned()
        .unwrap();
    assert_eq!(planned["involvedObject"]["kind"], "Node");
    assert_eq!(planned["involvedObject"]["name"], "test-node");
    assert!(
        planned["message"].as_str().unwrap().contains("1 rewrite"),
        "{planned}"
    );
    assert!(state_dir.join("plan-1.31.json").exists());
    let metrics = || -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    wait("metrics", Duration::from_secs(10), || {
        metrics().contains("kubehash_plan_containers{verdict=\"rewrite\"} 1")
    });
    assert!(metrics().contains("kubehash_agent_phase{phase=\"planned\"} 1"));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        store.get(&web_id).await.unwrap().extensions[EXTENSION].value,
        web_before,
        "no write while the kubelet is up"
    );

    // 2. Killed while planned, started again: it carries on from its state.
    agent.kill().unwrap();
    let _ = agent.wait();
    let mut agent = start_agent();

    // 3. The kubelet stops: after the grace period the agent applies.
    kubelet_up.store(false, Ordering::SeqCst);
    wait("apply", Duration::from_secs(30), || {
        phase(&state_dir) == "applied"
    });
    let web_after = store.get(&web_id).await.unwrap().extensions[EXTENSION]
        .value
        .clone();
    assert_eq!(
        stored_hashes(&parse_metadata(&web_after, &web_id).unwrap()).0,
        Some(hash(&web, "1.31"))
    );
    assert_eq!(
        store.get(&changed_id).await.unwrap().extensions[EXTENSION].value,
        changed_before,
        "a changed spec is never touched"
    );
    assert!(reasons(&events).contains(&"KubehashApplied".to_string()));

    // 4. Killed while applied, started again: no second write.
    agent.kill().unwrap();
    let _ = agent.wait();
    let mut agent = start_agent();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(phase(&state_dir), "applied");

    // 5. The upgrade tooling restarts containerd and starts kubelet 1.31: the agent verifies.
    ctrd.restart();
    kubelet_up.store(true, Ordering::SeqCst);
    wait("verify", Duration::from_secs(30), || {
        phase(&state_dir) == "done"
    });
    assert!(
        reasons(&events).contains(&"KubehashVerified".to_string()),
        "{:?}",
        reasons(&events)
    );
    let _ = agent.kill();
    let _ = agent.wait();

    // The journal is consistent: exactly one write for one container, and it completed.
    let journals: Vec<_> = std::fs::read_dir(state_dir.join("journal"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(journals.len(), 1);
    let text = std::fs::read_to_string(journals[0].path()).unwrap();
    assert_eq!(text.matches("\"kind\":\"write\"").count(), 1, "{text}");
    assert_eq!(text.matches("\"kind\":\"written\"").count(), 1, "{text}");
    assert!(text.contains(&web_id));

    // RBAC: nothing the agent asked for was refused, and every verb deploy/ grants was used.
    assert_eq!(*refused.lock().unwrap(), Vec::<String>::new());
    assert_eq!(*used.lock().unwrap(), harness::rbac::agent_grants());
}
