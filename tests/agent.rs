//! `kubehash agent` through kubelet binary swaps, on positive evidence only: a real containerd
//! (tests/harness), a kubelet under the test's control (a process named `kubelet`, a healthz over
//! real HTTP whose port really closes when it stops, a binary on disk whose version the test
//! swaps; tests/harness/kubelet.rs), and an API server over real HTTP that answers with
//! kube-apiserver-shaped objects and enforces deploy/rbac.yaml as RBAC would (403 otherwise; no
//! kube-apiserver runs on these machines; tests/harness/apiserver.rs). Where a scenario needs it,
//! the agent runs in its own PID namespace, as in a pod without hostPID.

mod harness;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::apiserver::TestApi;
use harness::kubelet::{Healthz, TestKubelet};
use harness::{free_port, hash, pod_json, Containerd};
use kubehash::rewrite::pin::PIN_COMMENT;
use kubehash::runtime::containerd::{parse_metadata, stored_hashes, Store, EXTENSION};
use kubehash::runtime::cri::Cri;
use serde_json::{json, Value};

fn wait(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn state(state_dir: &Path) -> Value {
    std::fs::read_to_string(state_dir.join("agent-state.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .unwrap_or(Value::Null)
}

fn phase(state_dir: &Path) -> String {
    state(state_dir)["phase"].as_str().unwrap_or("").to_string()
}

fn http_get(port: u16, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A node whose pods kubelet 1.30 created: `current` containers that run their spec, and one
/// (`changed`) whose spec changed since; the API server, the kubelet (up, binary 1.30), and a
/// state directory for the agent.
struct Rig {
    ctrd: Containerd,
    api: TestApi,
    kubelet: TestKubelet,
    state_dir: PathBuf,
    metrics_port: u16,
    current: Vec<(Value, String)>,
    changed_id: String,
    originals: Vec<Vec<u8>>,
}

impl Rig {
    async fn new(current: usize) -> Rig {
        Rig::new_with(current, false).await
    }

    /// [`Rig::new`], and where `stale`, one more container (`stale`, after the others) that
    /// kubelet 1.31's hash keeps but that does not run its spec: created with `--old`, its
    /// stored hash kubelet 1.31's of its spec, which now says `--new` (a pinned static pod's
    /// manifest edited, or a collision).
    async fn new_with(current: usize, stale: bool) -> Rig {
        let ctrd = Containerd::start();
        let mut cri = Cri::connect(&ctrd.endpoint()).await.unwrap();
        let specs: Vec<Value> = (0..current)
            .map(|i| json!({"name":format!("web{i}"),"image":harness::IMAGE,"args":[format!("--port={}", 8080 + i)]}))
            .collect();
        let changed_now = json!({"name":"changed","image":harness::IMAGE,"args":["--new"]});
        let changed_then = json!({"name":"changed","image":harness::IMAGE,"args":["--old"]});
        let mut tcs: Vec<harness::TestContainer> = specs
            .iter()
            .map(|s| harness::TestContainer {
                spec: s.clone(),
                stored_hash: None,
            })
            .collect();
        tcs.push(harness::TestContainer {
            spec: changed_now.clone(),
            stored_hash: Some(hash(&changed_then, "1.30")),
        });
        let stale_now = json!({"name":"stale","image":harness::IMAGE,"args":["--new"]});
        if stale {
            tcs.push(harness::TestContainer {
                spec: json!({"name":"stale","image":harness::IMAGE,"args":["--old"]}),
                stored_hash: Some(hash(&stale_now, "1.31")),
            });
        }
        let pod = harness::create_pod(
            &mut cri,
            &ctrd.dir.join("pods"),
            "shop",
            "web-1",
            "uid-web-1",
            &tcs,
            "1.30".parse().unwrap(),
        )
        .await;
        let mut all = specs.clone();
        all.push(changed_now);
        if stale {
            all.push(stale_now);
        }
        // The pod mounts a claim bound to a CSI volume: the agent gets both for the volumes
        // check (which passes), as the kubelet does.
        let mut pod_object = pod_json("shop", "web-1", "uid-web-1", &all);
        pod_object["spec"]["volumes"] =
            json!([{"name":"data","persistentVolumeClaim":{"claimName":"data-web-1"}}]);
        let api = TestApi::start(
            "v1.30.2",
            json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},
                "items":[pod_object]}),
        );
        api.objects.lock().unwrap().extend([
            json!({"kind":"PersistentVolumeClaim","apiVersion":"v1",
                "metadata":{"namespace":"shop","name":"data-web-1","uid":"uid-claim-1"},
                "spec":{"accessModes":["ReadWriteOnce"],"volumeName":"pv-data-web-1"},
                "status":{"phase":"Bound"}}),
            json!({"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pv-data-web-1"},
                "spec":{"csi":{"driver":"ebs.csi.aws.com","volumeHandle":"vol-1"},
                    "claimRef":{"namespace":"shop","name":"data-web-1","uid":"uid-claim-1"}},
                "status":{"phase":"Bound"}}),
        ]);
        let mut kubelet = TestKubelet::new(&ctrd.dir.join("kubelet"), "v1.30.2");
        kubelet.start();
        let store = Store::connect(&ctrd.endpoint()).await.unwrap();
        let mut originals = Vec::new();
        for id in &pod.container_ids {
            originals.push(
                store.get(id).await.unwrap().extensions[EXTENSION]
                    .value
                    .clone(),
            );
        }
        let state_dir = ctrd.dir.join("agent-state");
        Rig {
            current: specs.into_iter().zip(pod.container_ids.clone()).collect(),
            changed_id: pod.container_ids[current].clone(),
            ctrd,
            api,
            kubelet,
            state_dir,
            metrics_port: free_port(),
            originals,
        }
    }

    fn agent_command(&self, extra: &[&str]) -> Command {
        let ep = self.ctrd.endpoint();
        let mut c = Command::new(env!("CARGO_BIN_EXE_kubehash"));
        c.args([
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
        .arg(self.api.kubeconfig(&self.ctrd.dir))
        .arg("--state-dir")
        .arg(&self.state_dir)
        .arg("--kubelet-healthz")
        .arg(self.kubelet.healthz_url())
        .arg("--kubelet-binary")
        .arg(self.kubelet.binary())
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", self.metrics_port))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.ctrd.dir.join("agent.log"))
                .unwrap(),
        ));
        c
    }

    fn start_agent(&self, extra: &[&str]) -> Child {
        self.agent_command(extra).spawn().unwrap()
    }

    async fn extensions(&self) -> Vec<Vec<u8>> {
        let store = Store::connect(&self.ctrd.endpoint()).await.unwrap();
        let mut out = Vec::new();
        for (_, id) in &self.current {
            out.push(
                store.get(id).await.unwrap().extensions[EXTENSION]
                    .value
                    .clone(),
            );
        }
        out.push(
            store.get(&self.changed_id).await.unwrap().extensions[EXTENSION]
                .value
                .clone(),
        );
        out
    }

    async fn rewritten(&self) -> usize {
        self.extensions()
            .await
            .iter()
            .zip(&self.originals)
            .filter(|(a, b)| a != b)
            .count()
    }

    /// The plan is made while the kubelet runs.
    fn wait_planned(&self, to: &str) {
        wait("the plan", Duration::from_secs(30), || {
            let s = state(&self.state_dir);
            s["phase"] == "planned" && s["to"] == to && s["seen_up"] == true
        });
    }

    /// The operator swaps the binary and stops the kubelet.
    fn swap_and_stop(&mut self, version: &str) {
        self.kubelet.set_binary(version);
        self.kubelet.stop();
    }

    /// An agent started, told to upgrade to 1.31, planned with the kubelet up, and applied once
    /// the kubelet was swapped and stopped; the agent still runs.
    fn applied_by_an_agent(&mut self) -> Child {
        self.applied_by_an_agent_with(&[])
    }

    fn applied_by_an_agent_with(&mut self, args: &[&str]) -> Child {
        let agent = self.start_agent(args);
        self.api.set_target(Some("v1.31.0"));
        self.wait_planned("1.31");
        self.swap_and_stop("v1.31.0");
        wait("apply", Duration::from_secs(30), || {
            phase(&self.state_dir) == "applied"
        });
        agent
    }

    /// A kubelet of `version` starts and posts its status (again and again, as it does), until
    /// `done`.
    fn kubelet_returns_until(&mut self, version: &str, what: &str, mut done: impl FnMut() -> bool) {
        self.kubelet.start();
        let api = &self.api;
        wait(what, Duration::from_secs(30), || {
            api.kubelet_posts(version);
            done()
        });
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.ctrd.dir.join("agent.log")).unwrap_or_default()
    }

    fn stop_agent(agent: &mut Child) {
        let _ = agent.kill();
        let _ = agent.wait();
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "--- agent log (last 40 lines, newest first) ---\n{}",
                tail.join("\n")
            );
        }
    }
}

/// A container the new kubelet keeps (its stored hash is kubelet 1.31's of its spec) though the
/// runtime's record says it was created from another spec: nothing kubehash writes, something a
/// person should know. The plan Event counts it, and is a Warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_event_warns_of_containers_that_run_another_spec() {
    let rig = Rig::new_with(1, true).await;
    let mut agent = rig.start_agent(&["--dry-run"]);
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");
    wait("the plan event", Duration::from_secs(10), || {
        rig.api.event("KubehashPlanned").is_some()
    });
    let planned = rig.api.event("KubehashPlanned").unwrap();
    let message = planned["message"].as_str().unwrap();
    assert!(
        message.contains(
            "(1 unchanged running another spec than their current one, by the runtime's record"
        ),
        "{planned}"
    );
    assert_eq!(planned["type"], "Warning", "{planned}");
    let plan: Value = serde_json::from_str(
        &std::fs::read_to_string(rig.state_dir.join("plan-1.31.json")).unwrap(),
    )
    .unwrap();
    let stale = plan
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["container"] == "stale")
        .unwrap();
    assert_eq!(stale["verdict"], "unchanged", "{plan}");
    assert!(
        stale["runs_another_spec"]
            .as_str()
            .unwrap_or_default()
            .contains("created with args [\"--old\"]"),
        "{plan}"
    );
    Rig::stop_agent(&mut agent);
    assert_eq!(rig.rewritten().await, 0, "a dry run writes nothing");
}

/// The whole swap: planned while the kubelet runs, killed and resumed while planned and while
/// applied, apply once the kubelet is down and the new binary in place, verify once kubelet 1.31
/// posts its status. RBAC: nothing refused, and every verb deploy/ grants is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_plans_applies_while_the_kubelet_is_down_and_verifies_after() {
    let mut rig = Rig::new(1).await;
    let mut agent = rig.start_agent(&[]);
    wait("the node watch", Duration::from_secs(30), || {
        !rig.api.watch_requests.lock().unwrap().is_empty()
    });
    rig.api.set_target(Some("v1.31.0"));
    assert!(rig.api.watch_requests.lock().unwrap()[0]
        .contains("fieldSelector=metadata.name%3Dtest-node"));
    rig.wait_planned("1.31");
    wait("the plan event", Duration::from_secs(10), || {
        rig.api.reasons().contains(&"KubehashPlanned".to_string())
    });
    // The volumes check read the pod's claim and its (CSI) volume.
    let preflight: Value = serde_json::from_str(
        &std::fs::read_to_string(rig.state_dir.join("preflight-1.31.json")).unwrap(),
    )
    .unwrap();
    let volumes = preflight
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "volumes")
        .unwrap();
    assert_eq!(
        volumes["evidence"],
        "1 pod read (inline volumes and the persistent volumes of bound claims), none with a volume kubelet 1.31 cannot mount"
    );
    let planned = rig.api.event("KubehashPlanned").unwrap();
    assert_eq!(planned["involvedObject"]["kind"], "Node");
    assert!(
        planned["message"].as_str().unwrap().contains("1 rewrite"),
        "{planned}"
    );
    wait("metrics", Duration::from_secs(10), || {
        let m = http_get(rig.metrics_port, "/metrics");
        m.contains("kubehash_plan_containers{verdict=\"rewrite\"} 1")
            && m.contains("kubehash_kubelet_up 1")
    });
    assert!(http_get(rig.metrics_port, "/healthz").starts_with("HTTP/1.1 200"));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(rig.rewritten().await, 0, "no write while the kubelet is up");

    // Killed while planned, started again: it carries on from its state.
    Rig::stop_agent(&mut agent);
    let mut agent = rig.start_agent(&[]);

    rig.swap_and_stop("v1.31.0");
    wait("apply", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "applied"
    });
    let store = Store::connect(&rig.ctrd.endpoint()).await.unwrap();
    let (web, web_id) = &rig.current[0];
    let after = store.get(web_id).await.unwrap().extensions[EXTENSION]
        .value
        .clone();
    assert_eq!(
        stored_hashes(&parse_metadata(&after, web_id).unwrap()).0,
        Some(hash(web, "1.31"))
    );
    assert_eq!(rig.rewritten().await, 1, "a changed spec is never touched");
    // The metrics say what the agent did: its phase and the records it wrote.
    wait("metrics after apply", Duration::from_secs(10), || {
        let m = http_get(rig.metrics_port, "/metrics");
        m.contains("kubehash_agent_phase{phase=\"applied\"} 1")
            && m.contains("kubehash_agent_phase{phase=\"planned\"} 0")
            && m.contains("kubehash_rewrites_total 1")
    });

    // Killed while applied, started again: no second write.
    Rig::stop_agent(&mut agent);
    let mut agent = rig.start_agent(&[]);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(phase(&rig.state_dir), "applied");

    // containerd restarts, kubelet 1.31 starts and posts its status: verified.
    rig.ctrd.restart();
    let sd = rig.state_dir.clone();
    rig.kubelet_returns_until("v1.31.0", "verify", || phase(&sd) == "done");
    assert!(rig.api.reasons().contains(&"KubehashVerified".to_string()));
    wait("metrics after verify", Duration::from_secs(10), || {
        let m = http_get(rig.metrics_port, "/metrics");
        m.contains("kubehash_agent_phase{phase=\"done\"} 1")
            && m.contains("kubehash_verify_failures_total 0")
    });
    Rig::stop_agent(&mut agent);

    // One journal for the upgrade, one write, completed.
    let text = std::fs::read_to_string(rig.state_dir.join("journal/1.30-to-1.31.jsonl")).unwrap();
    assert_eq!(text.matches("\"kind\":\"write\"").count(), 1, "{text}");
    assert_eq!(text.matches("\"kind\":\"written\"").count(), 1, "{text}");

    assert_eq!(*rig.api.refused.lock().unwrap(), Vec::<String>::new());
    // Every grant is used by some request (a cluster-wide grant by a request in a namespace too).
    let used = rig.api.used.lock().unwrap().clone();
    for grant in harness::rbac::agent_grants() {
        let one = std::collections::BTreeSet::from([grant.clone()]);
        assert!(
            used.iter().any(|u| harness::rbac::allowed(&one, u)),
            "{grant:?} is granted and never used: {used:?}"
        );
    }
}

/// After verifying the new kubelet, the agent audits the upgrade: once that kubelet has had
/// `--audit-after-seconds` to restart what it restarts, every container that ran before apply
/// (recorded while the kubelet was down) is checked against what runs now and against the plan.
/// Here the new kubelet restarts the changed container, as predicted, and also one kubehash
/// rewrote, which the audit must not hide: a warning Event, the report and the metrics say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_audits_the_upgrade_once_the_new_kubelet_settled() {
    let mut rig = Rig::new(2).await;
    let mut agent = rig.start_agent(&["--audit-after-seconds", "8"]);
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");
    rig.swap_and_stop("v1.31.0");
    wait("apply", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "applied"
    });
    // apply recorded, beside its journal, what ran when it began, and its plan.
    let journal = rig.state_dir.join("journal");
    let before: Value =
        serde_json::from_slice(&std::fs::read(journal.join("1.30-to-1.31.before.json")).unwrap())
            .unwrap();
    assert_eq!(before["kind"], "AuditSnapshot");
    assert_eq!(
        before["containers"].as_array().unwrap().len(),
        3,
        "{before}"
    );
    assert!(journal.join("1.30-to-1.31.plan.json").exists());
    rig.ctrd.restart();
    let sd = rig.state_dir.clone();
    rig.kubelet_returns_until("v1.31.0", "verify", || phase(&sd) == "done");
    assert!(
        state(&rig.state_dir)["audit"]["after"].is_u64(),
        "the audit is due later"
    );

    // Kubelet 1.31 restarts the container whose spec changed (planned: will-restart) and,
    // unexpectedly, one that kubehash rewrote (planned: rewrite).
    let mut cri = Cri::connect(&rig.ctrd.endpoint()).await.unwrap();
    let (web0, web0_id) = rig.current[0].clone();
    let changed_spec = json!({"name":"changed","image":harness::IMAGE,"args":["--new"]});
    let mut again = Vec::new();
    for (n, (id, spec)) in [(&rig.changed_id, &changed_spec), (&web0_id, &web0)]
        .into_iter()
        .enumerate()
    {
        let sandbox = format!("web-1-again{n}");
        again.push(harness::restart_in_shop_pod(&mut cri, &rig.ctrd, id, spec, &sandbox).await);
    }

    wait("the audit", Duration::from_secs(30), || {
        rig.api.reasons().contains(&"KubehashAudited".to_string())
    });
    let event = rig.api.event("KubehashAudited").unwrap();
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains(
            "3 containers ran before: 1 kept, 2 restarted, 0 recreated with their pod, 0 gone; 1 not as kubehash predicted: shop/web-1/web0 restarted (rewrite)"
        ),
        "{event}"
    );
    assert_eq!(event["type"], "Warning", "{event}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(rig.state_dir.join("audit-1.31.json")).unwrap())
            .unwrap();
    assert_eq!(
        report["counts"],
        json!({"kept": 1, "restarted": 2, "recreated": 0, "gone": 0})
    );
    assert_eq!(report["mispredicted"], 1);
    assert_eq!(
        harness::audit_report_schema_errors(&report),
        Vec::<String>::new(),
        "the agent writes the report audit compare prints"
    );
    let fate = |id: &str| {
        report["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
            .unwrap()
    };
    let (web0_seen, changed_seen) = (fate(&web0_id), fate(&rig.changed_id));
    assert_eq!(
        (
            &web0_seen["fate"],
            &web0_seen["predicted"],
            &web0_seen["as_predicted"]
        ),
        (&json!("restarted"), &json!("rewrite"), &json!(false)),
        "{web0_seen}"
    );
    assert_eq!(web0_seen["now"], again[1].as_str());
    assert_eq!(
        (
            &changed_seen["fate"],
            &changed_seen["predicted"],
            &changed_seen["as_predicted"]
        ),
        (&json!("restarted"), &json!("will-restart"), &json!(true)),
        "{changed_seen}"
    );
    assert_eq!(fate(&rig.current[1].1)["fate"], "kept");
    wait("audit metrics", Duration::from_secs(10), || {
        let m = http_get(rig.metrics_port, "/metrics");
        m.contains("kubehash_audit_containers{fate=\"restarted\"} 2")
            && m.contains("kubehash_audit_containers{fate=\"kept\"} 1")
            && m.contains("kubehash_audit_mispredicted 1")
    });
    // Audited once: the phase is done, with nothing due (saved just after the Event).
    let sd = rig.state_dir.clone();
    wait("the audited phase saved", Duration::from_secs(10), || {
        let s = state(&sd);
        s.get("phase").is_some() && s.get("audit").is_none()
    });
    let s = state(&rig.state_dir);
    assert_eq!(s["phase"], "done");
    assert!(s.get("audit").is_none(), "{s}");
    assert!(s["detail"]
        .as_str()
        .unwrap()
        .contains("1 not as kubehash predicted"));
    Rig::stop_agent(&mut agent);
}

/// The agent pins a static pod's manifest at the moment it rewrites hashes (kubelet down, binary
/// swapped), and rewrites that pod's container, whose spec it takes from the manifest (the test
/// API server has no mirror pod for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_pins_static_pods_when_it_rewrites() {
    let mut rig = Rig::new(1).await;
    let manifests = rig.ctrd.dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let yaml = "# node-local proxy\napiVersion: v1\nkind: Pod\nmetadata:\n  name: proxy\n  namespace: kube-system\nspec:\n  containers:\n  - name: proxy\n    image: haproxy:2.9\n";
    std::fs::write(manifests.join("proxy.yaml"), yaml).unwrap();
    let mut spec = json!({"name": "proxy", "image": "haproxy:2.9"});
    kubehash::kubelet::defaults::default_container(&mut spec);
    let uid = "7d0c9b8a7f6e5d4c3b2a19080706f5e4";
    let mut cri = Cri::connect(&rig.ctrd.endpoint()).await.unwrap();
    let pod = harness::create_static_pod(
        &mut cri,
        &rig.ctrd.dir.join("pods"),
        "kube-system",
        "proxy-test-node",
        uid,
        &[harness::TestContainer {
            spec: spec.clone(),
            stored_hash: None,
        }],
        "1.30".parse().unwrap(),
    )
    .await;
    let mut agent = rig.start_agent(&["--manifests", &manifests.display().to_string()]);
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");
    assert_eq!(
        std::fs::read_to_string(manifests.join("proxy.yaml")).unwrap(),
        yaml
    );
    rig.swap_and_stop("v1.31.0");
    wait("apply", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "applied"
    });
    Rig::stop_agent(&mut agent);
    assert_eq!(
        std::fs::read_to_string(manifests.join("proxy.yaml")).unwrap(),
        yaml.replace(
            "metadata:\n",
            &format!("metadata:\n  uid: \"{uid}\" # {PIN_COMMENT}\n")
        )
    );
    let store = Store::connect(&rig.ctrd.endpoint()).await.unwrap();
    let id = &pod.container_ids[0];
    let after = store.get(id).await.unwrap().extensions[EXTENSION]
        .value
        .clone();
    assert_eq!(
        stored_hashes(&parse_metadata(&after, id).unwrap()).0,
        Some(hash(&spec, "1.31"))
    );
}

/// 1. The operator aborts the swap and kubelet 1.30 starts again: hash checks would pass, but
///    the Node says 1.30, so the agent rolls back at once instead of reporting success. Once the
///    old kubelet has had `--audit-after-seconds`, the agent audits the rollback: a container it
///    restarted (here one kubehash had rewritten, as happens when containerd was restarted after
///    the rewrite and not again after the rollback) is a warning that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_kubelet_coming_back_is_rolled_back_not_verified() {
    let mut rig = Rig::new(2).await;
    let mut agent = rig.applied_by_an_agent_with(&["--audit-after-seconds", "6"]);
    assert_eq!(rig.rewritten().await, 2);
    // The swap is aborted: the old binary is back, and kubelet 1.30 starts.
    rig.kubelet.set_binary("v1.30.2");
    let sd = rig.state_dir.clone();
    rig.kubelet_returns_until("v1.30.2", "rollback", || phase(&sd) == "rolled-back");
    assert_eq!(rig.extensions().await, rig.originals, "every byte restored");
    assert!(
        state(&rig.state_dir)["audit"]["after"].is_u64(),
        "the rollback's audit is due later"
    );
    let mut cri = Cri::connect(&rig.ctrd.endpoint()).await.unwrap();
    let (web0, web0_id) = rig.current[0].clone();
    let again =
        harness::restart_in_shop_pod(&mut cri, &rig.ctrd, &web0_id, &web0, "web-1-again").await;
    wait("the rollback's audit", Duration::from_secs(30), || {
        rig.api.reasons().contains(&"KubehashAudited".to_string())
    });
    // The Event is published before the phase is saved: stopped in between, the agent would
    // audit again when started (at least once), and the state would still say it is due.
    let sd = rig.state_dir.clone();
    wait("the audited phase saved", Duration::from_secs(10), || {
        let s = state(&sd);
        s.get("phase").is_some() && s.get("audit").is_none()
    });
    Rig::stop_agent(&mut agent);
    let event = rig.api.event("KubehashAudited").unwrap();
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains(
            "after the rollback from kubelet 1.31: 3 containers ran before: 2 kept, 1 restarted, 0 recreated with their pod, 0 gone; 1 not kept: shop/web-1/web0 restarted"
        ),
        "{event}"
    );
    assert_eq!(event["type"], "Warning", "{event}");
    let report: Value = serde_json::from_slice(
        &std::fs::read(rig.state_dir.join("audit-1.31-rolled-back.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        harness::audit_report_schema_errors(&report),
        Vec::<String>::new()
    );
    assert_eq!(
        report["counts"],
        json!({"kept": 2, "restarted": 1, "recreated": 0, "gone": 0})
    );
    let web0_seen = report["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == web0_id.as_str())
        .cloned()
        .unwrap();
    assert_eq!(web0_seen["now"], again.as_str());
    assert!(
        web0_seen["predicted"].is_null() && web0_seen["as_predicted"].is_null(),
        "the plan was for kubelet 1.31, which never ran: {web0_seen}"
    );
    assert!(
        !rig.state_dir.join("audit-1.31.json").exists(),
        "no audit of an upgrade that did not happen"
    );
    let s = state(&rig.state_dir);
    assert_eq!(s["phase"], "rolled-back");
    assert!(s.get("audit").is_none(), "audited once: {s}");
    let reasons = rig.api.reasons();
    assert!(
        !reasons.contains(&"KubehashVerified".to_string()),
        "{reasons:?}"
    );
    let ev = rig.api.event("KubehashRolledBack").unwrap();
    let msg = ev["message"].as_str().unwrap();
    assert!(
        msg.contains("kubelet 1.30 came back instead of 1.31"),
        "{msg}"
    );
    assert!(msg.contains("up to 2 containers may restart"), "{msg}");
}

/// After a rollback the agent restarts containerd, as after apply, when it has the command: until
/// then the runtime reports the rewritten hashes it loaded, and the old kubelet restarts their
/// containers at its next sync. It then checks that CRI reports the original hashes, and says
/// so; a restart that fails, or a command that exits 0 and restarts nothing, is said in the
/// Event. The same check after apply's restart warns before the new kubelet starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_restarts_containerd_after_a_rollback_too() {
    rollback_restarts_containerd(Restart::Works).await;
}

/// Kubelet 1.31 ran before the agent applied (started too early, and stopped again) and
/// restarted a container: what runs is no record of before the upgrade. The agent's apply records
/// nothing for the audit, and `KubehashApplied`, a warning, says so and why, so that nobody
/// waits for an audit that will not come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_begun_before_the_agent_applied_is_said_to_go_unaudited() {
    let mut rig = Rig::new(1).await;
    let mut agent = rig.start_agent(&[]);
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");
    let (spec, id) = rig.current[0].clone();
    let mut cri = Cri::connect(&rig.ctrd.endpoint()).await.unwrap();
    harness::restart_in_shop_pod(&mut cri, &rig.ctrd, &id, &spec, "web-1-again").await;
    rig.swap_and_stop("v1.31.0");
    wait("apply", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "applied"
    });
    Rig::stop_agent(&mut agent);
    let applied = rig.api.event("KubehashApplied").unwrap();
    let msg = applied["message"].as_str().unwrap();
    assert_eq!(applied["type"], "Warning", "{applied}");
    assert!(
        msg.contains("nothing recorded for the audit, so the agent will not audit this upgrade: container shop/web-1-again/web0 carries the new kubelet's hash"),
        "{msg}"
    );
    // No record beside the journal the Event names.
    let journal = msg
        .split("; journal ")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    assert!(Path::new(journal).exists(), "{journal}");
    let before = Path::new(journal).with_extension("before.json");
    assert!(!before.exists(), "{}", before.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_restart_after_a_rollback_is_said() {
    rollback_restarts_containerd(Restart::FailsAgain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_restarts_nothing_after_a_rollback_is_caught() {
    rollback_restarts_containerd(Restart::DoesNothing).await;
}

/// The agent's `--restart-containerd` command in these tests, which only counts its runs (so
/// after apply, containerd has not reloaded what was written: the agent must say so).
#[derive(PartialEq)]
enum Restart {
    /// containerd, never restarted, still reports the original hashes after the rollback, as a
    /// real restart makes it do.
    Works,
    /// The second run (after the rollback) fails.
    FailsAgain,
    /// containerd really restarted after apply (it reports the rewritten hashes), and the
    /// command restarts nothing after the rollback.
    DoesNothing,
}

/// An agent with a restart command applies 1.30 → 1.31, then kubelet 1.30 comes back.
async fn rollback_restarts_containerd(restart: Restart) {
    let mut rig = Rig::new(1).await;
    let runs = rig.ctrd.dir.join("restarts");
    let count = || {
        std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let mut cmd = format!("echo run >> {}", runs.display());
    if restart == Restart::FailsAgain {
        cmd = format!("test ! -e {0} && {cmd}", runs.display());
    }
    let mut agent = rig.applied_by_an_agent_with(&["--restart-containerd", &cmd]);
    assert_eq!(count(), 1, "after apply");
    // The command only counted: containerd never reloaded what apply wrote, and the agent says
    // so before kubelet 1.31 starts.
    let unseen = rig.api.event("KubehashRuntimeNotReloaded").unwrap();
    assert_eq!(unseen["type"], "Warning");
    assert!(
        unseen["message"].as_str().unwrap().contains(
            "CRI reports the new hash of only 0 of 1 rewritten containers (not shop/web-1/"
        ),
        "{unseen}"
    );
    if restart == Restart::DoesNothing {
        rig.ctrd.restart();
    }
    rig.kubelet.set_binary("v1.30.2");
    let sd = rig.state_dir.clone();
    rig.kubelet_returns_until("v1.30.2", "rollback", || phase(&sd) == "rolled-back");
    Rig::stop_agent(&mut agent);
    assert_eq!(rig.extensions().await, rig.originals, "every byte restored");
    let msg = rig.api.event("KubehashRolledBack").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    match restart {
        Restart::FailsAgain => {
            assert_eq!(count(), 1);
            assert!(msg.contains("Restarting containerd failed"), "{msg}");
            assert!(msg.contains("up to 1 containers may restart"), "{msg}");
        }
        Restart::Works => {
            assert_eq!(count(), 2, "after the rollback");
            assert!(
                msg.contains(
                    "containerd restarted, and CRI reports the original hash of all 1 containers"
                ),
                "{msg}"
            );
            assert!(!msg.contains("may restart"), "{msg}");
        }
        Restart::DoesNothing => {
            assert_eq!(count(), 2, "after the rollback");
            assert!(
                msg.contains(
                    "but CRI reports the original hash of only 0 of 1 containers (not shop/web-1/"
                ),
                "{msg}"
            );
        }
    }
}

/// The agent's rollback proves each original against the specs it saved with the plan: a
/// journal whose original holds a hash someone chose (which passes every check the journal and
/// the record allow) is not written back, the other container is, and the agent says it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_rolls_back_only_originals_its_saved_specs_prove() {
    forged_original_rolled_back(false).await;
}

/// With the specs saved with the plan lost (the state file deleted), the agent still rolls back,
/// each original proved against the spec apply journaled with it: before, the rollback failed
/// whole and every rewritten container was left for the old kubelet to restart. The forged
/// original is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_rolls_back_against_the_journal_when_its_saved_specs_are_lost() {
    forged_original_rolled_back(true).await;
}

/// An agent applies 1.30 → 1.31, the first write's original is forged in the journal (and the
/// saved specs deleted if `lose_specs`), then kubelet 1.30 comes back: the agent restores the
/// other container only.
async fn forged_original_rolled_back(lose_specs: bool) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut rig = Rig::new(2).await;
    let mut agent = rig.applied_by_an_agent();
    Rig::stop_agent(&mut agent);
    let written = rig.extensions().await;
    // Forge the first write's original: its hash annotation, and the line's old_hash with it.
    let path = rig.state_dir.join("journal/1.30-to-1.31.jsonl");
    let mut forged_id = String::new();
    let lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut r: Value = serde_json::from_str(l).unwrap();
            if r["kind"] == "write" && forged_id.is_empty() {
                forged_id = r["container_id"].as_str().unwrap().to_string();
                let old = r["old_hash"].as_str().unwrap().to_string();
                let value =
                    String::from_utf8(b64.decode(r["old_value"].as_str().unwrap()).unwrap())
                        .unwrap()
                        .replace(&old, "0badc0de");
                r["old_value"] = json!(b64.encode(value));
                r["old_hash"] = json!("0badc0de");
            }
            r.to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    assert!(
        kubehash::rewrite::journal::read(&path).is_ok(),
        "the forgery validates"
    );
    if lose_specs {
        std::fs::remove_file(rig.state_dir.join("pods-1.31.json")).unwrap();
    }

    let mut agent = rig.start_agent(&[]);
    rig.kubelet.set_binary("v1.30.2");
    let sd = rig.state_dir.clone();
    rig.kubelet_returns_until("v1.30.2", "rollback", || phase(&sd) == "failed");
    Rig::stop_agent(&mut agent);
    let now = rig.extensions().await;
    for (i, (_, id)) in rig.current.iter().enumerate() {
        if *id == forged_id {
            assert_eq!(now[i], written[i], "the forged original is not written");
        } else {
            assert_eq!(now[i], rig.originals[i], "the other container is restored");
        }
    }
    let msg = rig.api.event("KubehashRolledBack").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("rolled back 1 of 2 containers"), "{msg}");
}

/// 2. "Kubelet stopped" needs positive evidence: a healthz on another port, a slow healthz, or a
///    kubelet process the agent cannot see (its own PID namespace) never lead to a write; a 200
///    whose status line arrives in two TCP segments is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_without_evidence_that_the_kubelet_stopped() {
    let mut rig = Rig::new(1).await;
    rig.api.set_target(Some("v1.31.0"));

    // (a) A healthz URL where nothing listens: never seen up, so "refused" proves nothing.
    let nowhere = format!("http://127.0.0.1:{}/healthz", free_port());
    let mut agent = rig.start_agent(&["--kubelet-healthz", &nowhere]);
    wait("plan", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "planned"
    });
    rig.kubelet.stop_process();
    rig.kubelet.set_binary("v1.31.0");
    wait("no-evidence event", Duration::from_secs(20), || {
        rig.api
            .reasons()
            .contains(&"KubehashNoEvidence".to_string())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rig.rewritten().await, 0);
    Rig::stop_agent(&mut agent);

    // (b) The agent in its own PID namespace (a pod without hostPID) cannot see the kubelet.
    let _ = std::fs::remove_dir_all(&rig.state_dir);
    rig.kubelet.set_binary("v1.30.2");
    rig.kubelet.start();
    let inner = rig.agent_command(&[]);
    let mut agent = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait("cannot-see event", Duration::from_secs(30), || {
        rig.api
            .reasons()
            .contains(&"KubehashCannotSeeKubelet".to_string())
    });
    rig.swap_and_stop("v1.31.0");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        rig.rewritten().await,
        0,
        "nothing written without seeing the kubelet"
    );
    Rig::stop_agent(&mut agent);

    // (c) A slow healthz is not a stopped kubelet, even while the process is gone.
    let _ = std::fs::remove_dir_all(&rig.state_dir);
    rig.kubelet.set_binary("v1.30.2");
    rig.kubelet.start();
    let mut agent = rig.start_agent(&[]);
    rig.wait_planned("1.31");
    *rig.kubelet.mode.lock().unwrap() = Healthz::Slow(Duration::from_secs(8));
    rig.kubelet.stop_process();
    rig.kubelet.set_binary("v1.31.0");
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(rig.rewritten().await, 0, "a slow answer is not a refusal");
    // (d) Nor is a refusing healthz while the process still runs.
    *rig.kubelet.mode.lock().unwrap() = Healthz::Ok;
    rig.kubelet.start_process();
    rig.kubelet.stop_healthz();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(rig.rewritten().await, 0, "the process still runs");
    Rig::stop_agent(&mut agent);

    // (e) A 200 in two TCP segments is up: the plan records the kubelet as seen.
    let _ = std::fs::remove_dir_all(&rig.state_dir);
    *rig.kubelet.mode.lock().unwrap() = Healthz::Split;
    rig.kubelet.set_binary("v1.30.2");
    rig.kubelet.start();
    let mut agent = rig.start_agent(&[]);
    rig.wait_planned("1.31");
    Rig::stop_agent(&mut agent);
}

/// 2. The write loop probes again before every write: the new kubelet coming up after write 1
///    of 3 stops the writes (and, as it reports 1.30, the one write is rolled back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_stops_the_moment_the_kubelet_returns() {
    let mut rig = Rig::new(3).await;
    let mut agent = rig
        .agent_command(&[])
        .env("KUBEHASH_TEST_PAUSE_AFTER_WRITE_MS", "2000")
        .spawn()
        .unwrap();
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");
    rig.swap_and_stop("v1.31.0");
    let journal = rig.state_dir.join("journal/1.30-to-1.31.jsonl");
    wait("the first write", Duration::from_secs(30), || {
        std::fs::read_to_string(&journal).is_ok_and(|t| t.contains("\"kind\":\"written\""))
    });
    rig.kubelet.set_binary("v1.30.2");
    let sd = rig.state_dir.clone();
    rig.kubelet_returns_until("v1.30.2", "rollback", || phase(&sd) == "rolled-back");
    Rig::stop_agent(&mut agent);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(text.matches("\"kind\":\"write\"").count(), 1, "{text}");
    assert!(rig.api.reasons().contains(&"KubehashStopped".to_string()));
    assert_eq!(rig.extensions().await, rig.originals);
}

/// 3. The target is read again after planning: changed → planned anew, removed → cancelled, and a
///    stale plan is never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_or_removed_target_is_never_applied_stale() {
    let mut rig = Rig::new(1).await;
    let mut agent = rig.start_agent(&[]);
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");
    rig.api.set_target(Some("v1.32.0"));
    rig.wait_planned("1.32");
    assert!(rig.api.reasons().contains(&"KubehashReplanned".to_string()));
    rig.api.set_target(None);
    wait("cancelled", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "idle"
    });
    // The kubelet is swapped to 1.31 and stops: nothing is wanted, nothing is written.
    rig.swap_and_stop("v1.31.0");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(rig.rewritten().await, 0);
    assert!(rig.api.reasons().contains(&"KubehashCancelled".to_string()));
    Rig::stop_agent(&mut agent);
}

/// 4. The restart command has a timeout; SIGTERM is honoured while it hangs; /healthz says when
///    the agent is stuck; a missed window is reported; an Event lost in an API outage is sent
///    again; two agents never run on one node; a metrics address in use is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_robust_to_hangs_outages_and_duplicates() {
    let mut rig = Rig::new(1).await;
    // Events are down while the agent plans.
    rig.api
        .events_down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut agent = rig.start_agent(&[
        "--restart-containerd",
        "sleep 30",
        "--restart-timeout-seconds",
        "5",
        "--stuck-seconds",
        "1",
    ]);
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");

    // A second agent on the node is refused.
    let second = rig
        .agent_command(&[])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another kubehash agent"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );

    // The outage ends: the queued plan Event arrives.
    assert!(rig.api.reasons().is_empty());
    rig.api
        .events_down
        .store(false, std::sync::atomic::Ordering::SeqCst);
    wait("the queued event", Duration::from_secs(10), || {
        rig.api.reasons().contains(&"KubehashPlanned".to_string())
    });

    // The restart command hangs: /healthz turns 503 while it does, then the timeout fails it.
    rig.swap_and_stop("v1.31.0");
    wait("stuck", Duration::from_secs(30), || {
        http_get(rig.metrics_port, "/healthz").starts_with("HTTP/1.1 503")
    });
    wait("the timeout", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "failed"
    });
    let failed = state(&rig.state_dir);
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("did not finish within 5s"),
        "{failed}"
    );
    Rig::stop_agent(&mut agent);

    // SIGTERM in the middle of a hanging command: the agent exits at once.
    std::fs::remove_dir_all(&rig.state_dir).unwrap();
    assert!(!rig.state_dir.exists());
    rig.kubelet.set_binary("v1.30.2");
    rig.kubelet.start();
    let mut agent = rig.start_agent(&["--restart-containerd", "sleep 60"]);
    rig.wait_planned("1.31");
    rig.swap_and_stop("v1.31.0");
    wait("applying", Duration::from_secs(30), || {
        phase(&rig.state_dir) == "applying"
    });
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    unsafe_sigterm(agent.id());
    let status = agent.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(status.success(), "{status}");

    // A metrics address in use is an error, not an agent without /healthz.
    let _ = std::fs::remove_dir_all(&rig.state_dir);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    rig.metrics_port = taken.local_addr().unwrap().port();
    let out = rig
        .agent_command(&[])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("metrics address"));
}

/// A binary swap shorter than the grace period: the agent never saw the kubelet down long enough,
/// and says so once kubelet 1.31 reports itself, instead of staying planned in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_window_is_reported() {
    let mut rig = Rig::new(1).await;
    let mut agent = rig.start_agent(&["--grace-seconds", "30"]);
    rig.api.set_target(Some("v1.31.0"));
    rig.wait_planned("1.31");
    rig.swap_and_stop("v1.31.0");
    std::thread::sleep(Duration::from_millis(500));
    let sd = rig.state_dir.clone();
    rig.kubelet_returns_until("v1.31.0", "missed window", || phase(&sd) == "failed");
    Rig::stop_agent(&mut agent);
    assert!(rig
        .api
        .reasons()
        .contains(&"KubehashMissedWindow".to_string()));
    assert_eq!(rig.rewritten().await, 0);
}

fn unsafe_sigterm(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}
