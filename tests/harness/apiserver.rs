//! An API server for the agent's tests, over real HTTP on loopback (no kube-apiserver runs on
//! these machines): it answers with kube-apiserver-shaped Node, PodList, watch and Event
//! responses, and gets of the PersistentVolumeClaims and PersistentVolumes a test gives it, enforces deploy/rbac.yaml as RBAC would (403 otherwise), and lets the test change
//! the Node (target annotation, the kubelet version and heartbeat the kubelet posts) and cut the
//! Events endpoint off (an API outage).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::rbac;

/// What the Node says.
#[derive(Debug, Clone)]
pub struct NodeState {
    pub target: Option<String>,
    pub kubelet_version: String,
    /// RFC 3339; the kubelet posts it with its own clock.
    pub heartbeat: String,
}

pub struct TestApi {
    pub addr: String,
    pub node: Arc<Mutex<NodeState>>,
    pub events: Arc<Mutex<Vec<Value>>>,
    /// Events are refused with 503 while this is set.
    pub events_down: Arc<AtomicBool>,
    pub used: Arc<Mutex<BTreeSet<rbac::Grant>>>,
    pub refused: Arc<Mutex<Vec<String>>>,
    pub watch_requests: Arc<Mutex<Vec<String>>>,
    /// PersistentVolumeClaims and PersistentVolumes, answered to a get by name (404 otherwise).
    pub objects: Arc<Mutex<Vec<Value>>>,
    /// Request paths answered once with 500 (a server error the kube client does not retry by
    /// itself, as it does 503), then served: each is removed when it is hit.
    pub flaky: Arc<Mutex<Vec<String>>>,
}

/// Now, as the kubelet writes heartbeats.
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl TestApi {
    /// Serves the Node `test-node` (kubelet `kubelet_version`, no target yet) and `pod_list`.
    pub fn start(kubelet_version: &str, pod_list: Value) -> TestApi {
        let node = Arc::new(Mutex::new(NodeState {
            target: None,
            kubelet_version: kubelet_version.into(),
            heartbeat: now_rfc3339(),
        }));
        let events: Arc<Mutex<Vec<Value>>> = Arc::default();
        let events_down = Arc::new(AtomicBool::new(false));
        let used: Arc<Mutex<BTreeSet<rbac::Grant>>> = Arc::default();
        let refused: Arc<Mutex<Vec<String>>> = Arc::default();
        let watch_requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let objects: Arc<Mutex<Vec<Value>>> = Arc::default();
        let objs = objects.clone();
        let flaky: Arc<Mutex<Vec<String>>> = Arc::default();
        let once = flaky.clone();
        let grants = rbac::agent_grants();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (n, ev, down, u, r, wr) = (
            node.clone(),
            events.clone(),
            events_down.clone(),
            used.clone(),
            refused.clone(),
            watch_requests.clone(),
        );
        let pods = pod_list.to_string();
        let handler = move |method: &str, target: &str, body: &str| -> (u16, String) {
            let Some(want) = rbac::attributes(method, target) else {
                r.lock().unwrap().push(format!("{method} {target}"));
                return (404, "{}".into());
            };
            if !rbac::allowed(&grants, &want) {
                r.lock().unwrap().push(format!("{method} {target}"));
                return (403, rbac::forbidden(&want));
            }
            u.lock().unwrap().insert(want.clone());
            let path = target.split('?').next().unwrap_or(target);
            {
                let mut once = once.lock().unwrap();
                if let Some(i) = once.iter().position(|p| p == path) {
                    once.remove(i);
                    return (500, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500}"#.into());
                }
            }
            let node_json = || {
                let s = n.lock().unwrap().clone();
                let annotations = match &s.target {
                    Some(t) => json!({"kubehash.dev/target-kubelet-version": t}),
                    None => json!({}),
                };
                json!({"kind":"Node","apiVersion":"v1","metadata":{"name":"test-node","uid":"node-uid-1",
                    "resourceVersion":"100","annotations":annotations,
                    "labels":{"kubernetes.io/hostname":"test-node","disk":"ssd"}},
                    "status":{"nodeInfo":{"kubeletVersion":s.kubelet_version},
                        "allocatable":{"cpu":"2","memory":"4Gi","pods":"110"},
                        "conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":s.heartbeat}]}})
            };
            if method == "GET" && target.starts_with("/api/v1/nodes/test-node") {
                (200, node_json().to_string())
            } else if method == "GET"
                && target.starts_with("/api/v1/nodes?")
                && target.contains("watch=true")
            {
                wr.lock().unwrap().push(target.to_string());
                (
                    200,
                    format!("{}\n", json!({"type":"MODIFIED","object":node_json()})),
                )
            } else if method == "GET"
                && target.starts_with("/api/v1/pods")
                && target.contains("spec.nodeName%3Dtest-node")
            {
                (200, pods.clone())
            } else if let (true, Some(found)) =
                (method == "GET", named_object(&objs, &want, target))
            {
                (200, found.to_string())
            } else if method == "POST" && target.starts_with("/api/v1/namespaces/default/events") {
                if down.load(Ordering::SeqCst) {
                    return (503, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}"#.into());
                }
                let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
                ev.lock().unwrap().push(v);
                (201, body.to_string())
            } else {
                (404, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#.into())
            }
        };
        let handler = Arc::new(handler);
        std::thread::spawn(move || {
            for stream in listener.incoming().take(20000) {
                let Ok(stream) = stream else { continue };
                let handler = handler.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    // A connection that sends no request is not one RBAC sees: an agent probing
                    // whether anything listens on its kubelet's healthz port, which another test's
                    // server may have been given once that test's kubelet stopped.
                    if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
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
        TestApi {
            addr,
            node,
            events,
            events_down,
            used,
            refused,
            watch_requests,
            objects,
            flaky,
        }
    }

    /// A kubeconfig for this server.
    pub fn kubeconfig(&self, dir: &Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(&path, format!("apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: \"http://{}\"}}\nusers:\n- name: t\n  user: {{token: t}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t}}\ncurrent-context: t\n", self.addr)).unwrap();
        path
    }

    pub fn set_target(&self, t: Option<&str>) {
        self.node.lock().unwrap().target = t.map(str::to_string);
    }

    /// The kubelet posts its status: its version and a heartbeat now.
    pub fn kubelet_posts(&self, version: &str) {
        let mut n = self.node.lock().unwrap();
        n.kubelet_version = version.into();
        n.heartbeat = now_rfc3339();
    }

    /// The reasons of the Events received, in order.
    pub fn reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn event(&self, reason: &str) -> Option<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find(|e| e["reason"] == reason)
            .cloned()
    }
}

/// The claim or volume a get of `target` asks for (`want`: its RBAC attributes; the name is the
/// path's last part), among `objects`.
fn named_object(objects: &Mutex<Vec<Value>>, want: &rbac::Grant, target: &str) -> Option<Value> {
    let (namespace, _, resource, verb) = want;
    let kind = match resource.as_str() {
        "persistentvolumeclaims" => "PersistentVolumeClaim",
        "persistentvolumes" => "PersistentVolume",
        _ => return None,
    };
    if verb != "get" {
        return None;
    }
    let name = target.split('?').next()?.rsplit('/').next()?.to_string();
    objects
        .lock()
        .unwrap()
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name.as_str()
                && o["metadata"]["namespace"].as_str() == namespace.as_deref()
        })
        .cloned()
}
