//! The node agent against a real containerd (tests/harness): pods are created over CRI as kubelet
//! F would, then `kubehash node plan` → `apply` → containerd restart → `verify`, as an operator
//! runs them during a kubelet binary swap.

mod harness;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::kills::{measure, run_killed, Schedule};
use harness::{create_pod, hash, kubehash, pod_json, text, Containerd, TestContainer};
use kubehash::kubelet::hash::hash_container;
use kubehash::kubelet::sink::format_hash;
use kubehash::kubelet::version::KubeletVersion;
use kubehash::runtime::containerd::{
    parse_metadata, stored_hashes, validate_edit, Store, EXTENSION, TYPE_URL,
};
use kubehash::runtime::cri::{keys, Cri};
use serde_json::{json, Value};

fn v(s: &str) -> KubeletVersion {
    s.parse().unwrap()
}

/// Containers whose spec is current (`a`, `b`) and one whose spec changed after it was created
/// (`changed`). `b` carries `resizePolicy`, as an API server with in-place resize returns it,
/// which kubelet 1.26 drops and 1.27 – 1.30 hash: a 1.26 → 1.27 rewrite of `b` would keep it
/// running without the policy 1.27 applies, so the proof rule refuses it.
fn specs() -> (Value, Value, Value, Value) {
    let a = json!({"name":"a","image":harness::IMAGE,"args":["--a"],"resources":{"limits":{"memory":"64Mi"},"requests":{"cpu":"100m","memory":"64Mi"}},
        "terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"});
    let b = json!({"name":"b","image":harness::IMAGE,"env":[{"name":"X","value":"1"}],
        "resizePolicy":[{"resourceName":"memory","restartPolicy":"RestartContainer"}],"terminationMessagePath":"/dev/termination-log",
        "terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"});
    let changed_now = json!({"name":"changed","image":harness::IMAGE,"args":["--new"]});
    let changed_then = json!({"name":"changed","image":harness::IMAGE,"args":["--old"]});
    (a, b, changed_now, changed_then)
}

struct Node {
    ctrd: Containerd,
    pods_file: std::path::PathBuf,
    ids: HashMap<String, String>,
}

/// A node whose containers were created by kubelet `from`: a/b current, `changed` not.
async fn node_made_by(from: &str) -> Node {
    let ctrd = Containerd::start();
    let mut cri = Cri::connect(&ctrd.endpoint()).await.expect("CRI");
    let (a, b, changed_now, changed_then) = specs();
    let pod = create_pod(
        &mut cri,
        &ctrd.dir.join("pods"),
        "shop",
        "web-1",
        "uid-web-1",
        &[
            TestContainer {
                spec: a.clone(),
                stored_hash: None,
            },
            TestContainer {
                spec: b.clone(),
                stored_hash: None,
            },
            TestContainer {
                spec: changed_now.clone(),
                stored_hash: Some(hash(&changed_then, from)),
            },
        ],
        v(from),
    )
    .await;
    let pods_file = ctrd.dir.join("pods.json");
    let list =
        json!({"kind":"List","items":[pod_json("shop","web-1","uid-web-1",&[a, b, changed_now])]});
    std::fs::write(&pods_file, serde_json::to_vec(&list).unwrap()).unwrap();
    let ids = ["a", "b", "changed"]
        .iter()
        .zip(pod.container_ids)
        .map(|(n, id)| (n.to_string(), id))
        .collect();
    Node {
        ctrd,
        pods_file,
        ids,
    }
}

async fn records(
    store: &Store,
    ids: &HashMap<String, String>,
) -> HashMap<String, containerd_client::services::v1::Container> {
    let mut out = HashMap::new();
    for (name, id) in ids {
        out.insert(name.clone(), store.get(id).await.unwrap());
    }
    out
}

fn ext(r: &containerd_client::services::v1::Container) -> Vec<u8> {
    r.extensions[EXTENSION].value.clone()
}

async fn upgrade(from: &str, to: &str) {
    let mut node = node_made_by(from).await;
    let ep = node.ctrd.endpoint();
    let pods = node.pods_file.display().to_string();
    let journal = node.ctrd.dir.join("journal/run.jsonl");
    let journal_s = journal.display().to_string();
    let (a, b, ..) = specs();

    // Plan: a and b provably run their spec; `changed` does not.
    let plan = kubehash(&[
        "node", "plan", "--cri", &ep, "--to", to, "--from", from, "-i", &pods, "-o", "json",
    ]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let verdict = |c: &str| {
        plan["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["container"] == c)
            .unwrap()["verdict"]
            .clone()
    };
    // b's resizePolicy: dropped by 1.26, hashed by 1.27 – 1.30.
    let b_dropped = v(from).minor() < 27 && (27..=30).contains(&v(to).minor());
    let expect = |spec: &Value, dropped: bool| {
        if hash(spec, from) == hash(spec, to) {
            "unchanged"
        } else if dropped {
            "will-restart"
        } else {
            "rewrite"
        }
    };
    let expected = [("a", expect(&a, false)), ("b", expect(&b, b_dropped))];
    for (name, want) in expected {
        assert_eq!(verdict(name), want, "{name}: {plan}");
    }
    let rewrites = expected.iter().filter(|(_, w)| *w == "rewrite").count();
    assert_eq!(verdict("changed"), "will-restart", "{plan}");

    let store = Store::connect(&ep).await.unwrap();
    let before = records(&store, &node.ids).await;
    let pids_before: HashMap<String, Option<u32>> = node
        .ids
        .iter()
        .map(|(n, id)| (n.clone(), node.ctrd.task_pid(id)))
        .collect();
    assert!(pids_before.values().all(Option::is_some), "{pids_before:?}");

    let apply_args = [
        "node",
        "apply",
        "--cri",
        &ep,
        "--containerd",
        &ep,
        "--to",
        to,
        "--from",
        from,
        "-i",
        &pods,
        "--journal",
        &journal_s,
        "-o",
        "json",
    ];
    let apply = kubehash(&apply_args);
    assert!(
        apply.status.success(),
        "{}{}",
        text(&apply.stdout),
        text(&apply.stderr)
    );
    let report: Value = serde_json::from_slice(&apply.stdout).unwrap();
    let results: Vec<&str> = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        results.iter().filter(|r| **r == "written").count(),
        rewrites,
        "{report}"
    );

    // Idempotent: nothing changes the second time.
    let again = kubehash(&apply_args);
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert!(
        again["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["result"] != "written"),
        "{again}"
    );

    node.ctrd.restart();
    drop(store);
    let store = Store::connect(&ep).await.unwrap();
    let after = records(&store, &node.ids).await;

    let verify = kubehash(&[
        "node",
        "verify",
        "--cri",
        &ep,
        "--containerd",
        &ep,
        "--journal",
        &journal_s,
    ]);
    assert!(
        verify.status.success(),
        "{}{}\n{}",
        text(&verify.stdout),
        text(&verify.stderr),
        node.ctrd.log()
    );

    let mut cri = Cri::connect(&ep).await.unwrap();
    let listed = cri.list_containers().await.unwrap();
    for (name, spec) in [("a", &a), ("b", &b), ("changed", &specs().2)] {
        let id = &node.ids[name];
        let c = listed
            .iter()
            .find(|c| &c.id == id)
            .unwrap_or_else(|| panic!("{name} ({id}) no longer listed by CRI"));
        assert_eq!(
            c.state,
            kubehash::runtime::cri::proto::ContainerState::ContainerRunning as i32,
            "{name} still running"
        );
        assert_eq!(
            node.ctrd.task_pid(id),
            pids_before[name],
            "{name} kept its task PID"
        );
        let (old, new) = (&before[name], &after[name]);
        // Nothing but the extension (and UpdatedAt) changes in the record.
        assert_eq!(
            (
                &old.labels,
                &old.image,
                &old.spec,
                &old.snapshot_key,
                &old.created_at,
                &old.sandbox,
                &old.runtime
            ),
            (
                &new.labels,
                &new.image,
                &new.spec,
                &new.snapshot_key,
                &new.created_at,
                &new.sandbox,
                &new.runtime
            ),
            "{name}"
        );
        let new_meta = parse_metadata(&ext(new), id).unwrap();
        let (h, hw) = stored_hashes(&new_meta);
        let (_, hw_before) = stored_hashes(&parse_metadata(&ext(old), id).unwrap());
        let want = expected.iter().find(|(n, _)| *n == name).map(|(_, w)| *w);
        if name == "changed" || want == Some("will-restart") {
            assert_eq!(
                ext(old),
                ext(new),
                "a container whose spec changed is never touched"
            );
            assert_ne!(c.annotations[keys::HASH], hash(spec, to));
        } else if want == Some("unchanged") {
            assert_eq!(ext(old), ext(new), "nothing to do for {name}");
            assert_eq!(c.annotations[keys::HASH], hash(spec, to));
        } else {
            validate_edit(&ext(old), &ext(new), id).unwrap();
            assert_eq!(h.as_deref(), Some(hash(spec, to).as_str()));
            assert_eq!(
                c.annotations[keys::HASH],
                hash(spec, to),
                "CRI reports hash_T(S)"
            );
            let to_v = v(to);
            match (hw_before, to_v.has_hash_without_resources()) {
                (None, _) => assert!(hw.is_none(), "hashWithoutResources is never added"),
                // kubelet 1.31 (InPlacePodVerticalScaling) still compared it: the 1.31 hash.
                (Some(_), false) if to == "1.31" => {
                    assert_eq!(hw.as_deref(), Some(hash(spec, to).as_str()))
                }
                (Some(before_w), false) => assert_eq!(
                    hw,
                    Some(before_w),
                    "left as is when the target does not use it"
                ),
                (Some(_), true) => assert_eq!(
                    hw.as_deref(),
                    Some(
                        format_hash(
                            hash_container(spec, &[to_v], "")
                                .unwrap()
                                .hash_without_resources[0]
                                .1
                        )
                        .as_str()
                    )
                ),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_1_15_to_1_16() {
    upgrade("1.15", "1.16").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_1_26_to_1_27_a_field_the_old_kubelet_dropped_is_not_masked() {
    upgrade("1.26", "1.27").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_1_30_to_1_31() {
    upgrade("1.30", "1.31").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_1_22_to_1_33_multi_version_jump() {
    upgrade("1.22", "1.33").await;
}

fn wait_for_lines(path: &Path, needle: &str, n: usize, deadline: Duration) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        let count = std::fs::read_to_string(path)
            .map(|s| s.matches(needle).count())
            .unwrap_or(0);
        if count >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_apply_converges_and_rollback_restores_every_byte() {
    let mut ctrd = Containerd::start();
    let ep = ctrd.endpoint();
    let mut cri = Cri::connect(&ep).await.unwrap();
    let specs: Vec<Value> = (0..4)
        .map(|i| json!({"name":format!("c{i}"),"image":harness::IMAGE,"args":[format!("--n={i}")]}))
        .collect();
    let (pod, pods_file) = harness::current_pod(&ctrd, &mut cri, &specs, "1.30").await;
    let store = Store::connect(&ep).await.unwrap();
    let mut originals = Vec::new();
    for id in &pod.container_ids {
        originals.push(ext(&store.get(id).await.unwrap()));
    }
    let journal = ctrd.dir.join("journal/run.jsonl");
    let args = |j: &Path| -> Vec<String> {
        [
            "node",
            "apply",
            "--cri",
            &ep,
            "--containerd",
            &ep,
            "--to",
            "1.31",
            "--from",
            "1.30",
            "-i",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            pods_file.display().to_string(),
            "--journal".into(),
            j.display().to_string(),
        ])
        .collect()
    };

    // Kill apply (SIGKILL) after 2 of 4 writes.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(args(&journal))
        .env("KUBEHASH_TEST_PAUSE_AFTER_WRITE_MS", "1500")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_lines(&journal, "\"kind\":\"written\"", 2, Duration::from_secs(30)),
        "two writes never finished"
    );
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    let done: usize = {
        let mut n = 0;
        for (id, orig) in pod.container_ids.iter().zip(&originals) {
            if ext(&store.get(id).await.unwrap()) != *orig {
                n += 1;
            }
        }
        n
    };
    assert_eq!(done, 2, "killed after two writes");

    // Running apply again converges: the two remaining are written, the two done are skipped.
    let again = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(args(&journal))
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", text(&again.stderr));
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    let count = |r: &str| {
        report["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["result"] == r)
            .count()
    };
    assert_eq!(
        (count("written"), count("already-rewritten")),
        (2, 2),
        "{report}"
    );
    for (id, spec) in pod.container_ids.iter().zip(&specs) {
        let meta = parse_metadata(&ext(&store.get(id).await.unwrap()), id).unwrap();
        assert_eq!(stored_hashes(&meta).0, Some(hash(spec, "1.31")));
    }
    // containerd loads what was written, as the upgrade does.
    ctrd.restart();
    let store = Store::connect(&ep).await.unwrap();
    let verify = || {
        kubehash(&[
            "node",
            "verify",
            "--cri",
            &ep,
            "--containerd",
            &ep,
            "--journal",
            &journal.display().to_string(),
        ])
    };
    let verified = verify();
    assert!(verified.status.success(), "{}", text(&verified.stdout));

    // Rollback from the journal restores every record byte for byte.
    let rb = kubehash(&[
        "node",
        "rollback",
        "--containerd",
        &ep,
        "--journal",
        &journal.display().to_string(),
    ]);
    assert!(
        rb.status.success(),
        "{}{}",
        text(&rb.stdout),
        text(&rb.stderr)
    );
    for (id, orig) in pod.container_ids.iter().zip(&originals) {
        assert_eq!(
            &ext(&store.get(id).await.unwrap()),
            orig,
            "{id} restored byte for byte"
        );
    }
    // containerd still reports what it loaded: the next step says to restart it, and verify,
    // which now checks the originals, says it has not been.
    assert!(
        text(&rb.stderr).contains("next: restart containerd"),
        "{}",
        text(&rb.stderr)
    );
    let unloaded = verify();
    assert_eq!(
        unloaded.status.code(),
        Some(2),
        "{}",
        text(&unloaded.stdout)
    );
    assert!(
        text(&unloaded.stderr).contains("was rolled back after its last apply"),
        "{}",
        text(&unloaded.stderr)
    );
    let table = text(&unloaded.stdout);
    assert!(table.contains("has the runtime been restarted?"), "{table}");
    assert!(
        table.contains("Summary: 0 of 4 containers verified as rolled back."),
        "{table}"
    );
    ctrd.restart();
    let reloaded = verify();
    let table = text(&reloaded.stdout);
    assert!(reloaded.status.success(), "{table}");
    assert!(
        table.contains("Summary: 4 of 4 containers verified as rolled back."),
        "{table}"
    );
    // A second rollback finds everything original and writes nothing.
    let rb2 = kubehash(&[
        "node",
        "rollback",
        "--containerd",
        &ep,
        "--journal",
        &journal.display().to_string(),
    ]);
    assert!(rb2.status.success());
    assert!(
        text(&rb2.stdout).contains("already holds the original value"),
        "{}",
        text(&rb2.stdout)
    );
    assert!(
        !text(&rb2.stderr).contains("restart containerd"),
        "nothing restored, nothing to reload: {}",
        text(&rb2.stderr)
    );
}

/// A real containerd running one pod of two containers as kubelet 1.30 created them, the pods
/// file, each record's extension as created, and where the journal goes.
struct Upgradable {
    ctrd: Containerd,
    ep: String,
    pod: harness::CreatedPod,
    pods_file: std::path::PathBuf,
    originals: Vec<Vec<u8>>,
    journal: String,
}

impl Upgradable {
    async fn new() -> Self {
        let ctrd = Containerd::start();
        let ep = ctrd.endpoint();
        let mut cri = Cri::connect(&ep).await.unwrap();
        let specs: Vec<Value> = (0..2)
            .map(|i| json!({"name":format!("c{i}"),"image":harness::IMAGE,"args":[format!("--n={i}")]}))
            .collect();
        let (pod, pods_file) = harness::current_pod(&ctrd, &mut cri, &specs, "1.30").await;
        let store = Store::connect(&ep).await.unwrap();
        let originals = extensions_of(&store, &pod.container_ids).await;
        let journal = ctrd.dir.join("journal/run.jsonl").display().to_string();
        Upgradable {
            ctrd,
            ep,
            pod,
            pods_file,
            originals,
            journal,
        }
    }
}

/// What the test does when kubehash's restart command asks it to.
#[derive(Clone, Copy)]
enum OnRestart {
    Restart,
    Stop,
}

/// Runs kubehash with `--restart-containerd=COMMAND`, where COMMAND creates `marker` and waits
/// for it to go: the test then restarts or stops the real containerd, as the command would, and
/// removes it.
fn run_with_restart(
    ctrd: &mut Containerd,
    args: &[String],
    on_restart: OnRestart,
) -> std::process::Output {
    let marker = ctrd.dir.join("restart-wanted");
    let command = format!(
        "--restart-containerd=touch {0}; while [ -e {0} ]; do sleep 0.1; done",
        marker.display()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(args)
        .arg(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        if marker.exists() {
            match on_restart {
                OnRestart::Restart => ctrd.restart(),
                OnRestart::Stop => ctrd.stop(),
            }
            std::fs::remove_file(&marker).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `node apply` and `node rollback` with `--restart-containerd` check, after the restart, that
/// CRI reports what the next kubelet must see: a command that exits 0 and restarts nothing, or
/// a runtime that does not come back, must not pass for a restart (exit 2, or 1 when it cannot
/// be checked), and the operator is told not to start the kubelet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_containerd_is_checked_after_apply_and_rollback() {
    let Upgradable {
        mut ctrd,
        ep,
        pod,
        pods_file,
        originals,
        journal,
    } = Upgradable::new().await;
    let store = Store::connect(&ep).await.unwrap();
    let owned = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let endpoints = ["--cri", &ep, "--containerd", &ep, "--journal", &journal];
    let apply = owned(
        &[
            &["node", "apply", "--to", "1.31", "--from", "1.30"][..],
            &endpoints,
            &["-i", &pods_file.display().to_string()],
        ]
        .concat(),
    );
    let rollback = owned(&[&["node", "rollback"][..], &endpoints].concat());
    let said = |out: &std::process::Output, code: i32, want: &[&str]| {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{}{err}", text(&out.stdout));
        for w in want {
            assert!(err.contains(w), "{w:?} not in: {err}");
        }
    };

    // A restart that restarts: the new hashes are reported, and the next step is kubelet 1.31.
    let out = run_with_restart(&mut ctrd, &apply, OnRestart::Restart);
    said(&out, 0, &["containerd restarted; CRI reports the new hash of all 2 rewritten containers. Now start kubelet 1.31"]);

    // A "restart" that restarts nothing after a rollback: CRI still reports the rewritten
    // hashes, which the old kubelet would take for changed specs.
    let mut nothing = rollback.clone();
    nothing.push("--restart-containerd=true".into());
    let out = kubehash(&nothing.iter().map(String::as_str).collect::<Vec<_>>());
    said(
        &out,
        2,
        &[
            "CRI reports the original hash of only 0 of 2 containers of the journal (not ns/p/c",
            "do not start the old kubelet yet",
        ],
    );
    assert_eq!(
        extensions_of(&store, &pod.container_ids).await,
        originals,
        "restored all the same"
    );

    // The same after apply, once containerd holds the originals again.
    ctrd.restart();
    let mut nothing = apply.clone();
    nothing.push("--restart-containerd=true".into());
    let out = kubehash(&nothing.iter().map(String::as_str).collect::<Vec<_>>());
    said(
        &out,
        2,
        &[
            "CRI reports the new hash of only 0 of 2 rewritten containers",
            "do not start kubelet 1.31 yet",
            "To undo: kubehash node rollback",
        ],
    );

    // A rollback whose restart restarts: the originals are reported.
    let out = run_with_restart(&mut ctrd, &rollback, OnRestart::Restart);
    said(&out, 0, &["CRI reports the original hash of all 2 containers of the journal. Now start the old kubelet"]);
    let store = Store::connect(&ep).await.unwrap();
    assert_eq!(extensions_of(&store, &pod.container_ids).await, originals);

    // A runtime that does not come back: one line, exit 1, and no claim either way.
    let out = run_with_restart(&mut ctrd, &apply, OnRestart::Stop);
    said(&out, 1, &["containerd was restarted, but whether CRI reports the new hash of the rewritten containers could not be checked"]);
    let err = text(&out.stderr);
    let said: Vec<_> = err.lines().filter(|l| l.starts_with("kubehash:")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("node verify --journal"), "{err}");
}

/// An upgrade tried, rolled back, and tried again later on the same journal (one per F → T):
/// meanwhile the old kubelet removed a container the first try had rewritten and the rollback
/// restored. That container is no part of the second try: verify must not fail on it, nor the
/// second rollback, and the container written twice is restored to what it held before the
/// second write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_tried_again_after_a_rollback_is_verified_and_rolled_back_alone() {
    use harness::KubeletCalls;
    let Upgradable {
        mut ctrd,
        ep,
        pod,
        pods_file,
        originals,
        journal,
    } = Upgradable::new().await;
    let store = Store::connect(&ep).await.unwrap();
    let endpoints = ["--cri", &ep, "--containerd", &ep, "--journal", &journal];
    let pods = ["-i", &pods_file.display().to_string()].map(String::from);
    // verify takes no pods.
    let run = |cmd: &[&str]| {
        let pods = match cmd[1] {
            "verify" => &[][..],
            _ => &pods[..],
        };
        let pods: Vec<&str> = pods.iter().map(String::as_str).collect();
        kubehash(&[cmd, &endpoints[..], &pods].concat())
    };
    let apply = ["node", "apply", "--to", "1.31", "--from", "1.30"];
    let ok = |out: &std::process::Output| {
        assert!(
            out.status.success(),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    };

    // The first try, undone.
    ok(&run(&apply));
    ok(&run(&["node", "rollback"]));
    assert_eq!(extensions_of(&store, &pod.container_ids).await, originals);
    ctrd.restart();
    // The old kubelet runs on, and removes c1 (its pod changed, say).
    let mut cri = Cri::connect(&ep).await.unwrap();
    cri.stop_container(&pod.container_ids[1], 0).await.unwrap();
    cri.remove_container(&pod.container_ids[1]).await.unwrap();

    // The second try rewrites c0 alone; verify checks it alone.
    ok(&run(&apply));
    ctrd.restart();
    let verified = run(&["node", "verify"]);
    ok(&verified);
    let table = text(&verified.stdout);
    assert!(
        table.contains("Summary: 1 of 1 containers verified."),
        "{table}"
    );
    assert!(!table.contains("ns/p/c1"), "{table}");

    // Rolling the second try back restores c0, and c1, gone, is no failure.
    let store = Store::connect(&ep).await.unwrap();
    let rb = run(&["node", "rollback"]);
    ok(&rb);
    let table = text(&rb.stdout);
    assert!(
        table.contains("nothing to restore: the rollback at journal line"),
        "{table}"
    );
    assert!(table.contains("Summary: 2 of 2"), "{table}");
    assert_eq!(
        extensions_of(&store, &pod.container_ids[..1]).await,
        originals[..1]
    );
    ctrd.restart();
    ok(&run(&["node", "verify"]));
}

/// Each record's CRI metadata extension, in the order of `ids`.
async fn extensions_of(store: &Store, ids: &[String]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for id in ids {
        out.push(ext(&store.get(id).await.unwrap()));
    }
    out
}

/// The safety rule under crashes, attacked at random: `apply` and `rollback` are SIGKILLed at
/// random moments, half at a random time into the run and half just after the journal gains a
/// random line (so between journaling a write and making it, and between making it and saying
/// so). After every kill, each record holds byte for byte its original value or the one value
/// apply writes, nothing else, and a record holding the written value is already in the
/// journal with both values (journal first, then write). Run again, apply converges; rollback,
/// itself killed at random and run again, restores every byte. The schedule's seed is printed;
/// `KUBEHASH_TEST_SEED` repeats its choices (the timing of a run is the machine's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_leave_every_record_original_or_rewritten() {
    const ROUNDS: usize = 10;
    let mut schedule = Schedule::from_env_or_clock();
    let seed = schedule.seed;

    let ctrd = Containerd::start();
    let ep = ctrd.endpoint();
    let mut cri = Cri::connect(&ep).await.unwrap();
    let specs: Vec<Value> = (0..6)
        .map(|i| json!({"name":format!("k{i}"),"image":harness::IMAGE,"args":[format!("--k={i}")]}))
        .collect();
    let (pod, pods_file) = harness::current_pod(&ctrd, &mut cri, &specs, "1.30").await;
    let store = Store::connect(&ep).await.unwrap();
    let ids = &pod.container_ids;
    let originals = extensions_of(&store, ids).await;
    let apply_args = |j: &Path| -> Vec<String> {
        let (ep, pods, j) = (&ep, pods_file.display(), j.display());
        format!(
            "node apply --cri {ep} --containerd {ep} --to 1.31 --from 1.30 -i {pods} --journal {j}"
        )
        .split(' ')
        .map(str::to_string)
        .collect()
    };
    let rollback_args = |j: &Path| -> Vec<String> {
        format!("node rollback --containerd {ep} --journal {}", j.display())
            .split(' ')
            .map(str::to_string)
            .collect()
    };

    // One run of each without kills: the value apply writes for each record (a function of the
    // record alone), and how long each run takes and how its journal lines come.
    let reference = ctrd.dir.join("journal/reference.jsonl");
    let apply_shape = measure(&apply_args(&reference), &reference);
    let rewritten = extensions_of(&store, ids).await;
    for (i, (new, old)) in rewritten.iter().zip(&originals).enumerate() {
        assert_ne!(new, old, "k{i} rewritten by the reference run");
        let meta = parse_metadata(new, &ids[i]).unwrap();
        assert_eq!(stored_hashes(&meta).0, Some(hash(&specs[i], "1.31")));
    }
    let rollback_shape = measure(&rollback_args(&reference), &reference);
    assert_eq!(
        extensions_of(&store, ids).await,
        originals,
        "the reference rollback"
    );

    // After a kill: every record original or rewritten, and a rewritten one journaled first.
    let mut mixed = 0;
    let mut check = |now: &[Vec<u8>], journal: &Path, when: String| {
        // Killed before the journal was made: no write may have happened.
        let journaled = match journal.exists() {
            true => kubehash::rewrite::journal::read(journal)
                .unwrap_or_else(|e| panic!("{when}: the journal does not read: {e}"))
                .writes(),
            false => Vec::new(),
        };
        let mut done = 0;
        for (i, value) in now.iter().enumerate() {
            if *value == originals[i] {
                continue;
            }
            assert_eq!(
                *value, rewritten[i],
                "{when}: k{i} holds neither its original nor its rewritten value (seed {seed})"
            );
            assert!(
                journaled
                    .iter()
                    .any(|w| w.id == ids[i] && w.original == originals[i] && w.written == *value),
                "{when}: k{i} was written before the journal held the write (seed {seed})"
            );
            done += 1;
        }
        if done > 0 && done < now.len() {
            mixed += 1;
        }
    };
    for round in 0..ROUNDS {
        let journal = ctrd.dir.join(format!("journal/round-{round}.jsonl"));
        // Apply, killed up to three times (each run goes on in the same journal), then run to
        // its end; then rollback, killed up to twice, then run to its end.
        let phases = [
            ("apply", apply_args(&journal), &apply_shape, 3, &rewritten),
            (
                "rollback",
                rollback_args(&journal),
                &rollback_shape,
                2,
                &originals,
            ),
        ];
        for (what, args, shape, kills, converged) in phases {
            for attempt in 0..kills {
                let at = schedule.kill_at(attempt, shape);
                let ended = run_killed(&args, &journal, at).ended;
                let when = format!("round {round}, {what} {attempt} killed at {at:?}");
                check(&extensions_of(&store, ids).await, &journal, when);
                if ended {
                    break;
                }
            }
            let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
                .args(&args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "round {round}, {what}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            assert_eq!(
                &extensions_of(&store, ids).await,
                converged,
                "round {round}: {what} converges"
            );
        }
    }
    // Line-timed kills land inside the write loop nearly every time; none at all would mean
    // the schedule attacked nothing.
    eprintln!("{mixed} kills left some records rewritten and some not");
    assert!(mixed > 0, "no kill landed between two writes (seed {seed})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_metadata_is_reported_and_never_written() {
    let ctrd = Containerd::start();
    let ep = ctrd.endpoint();
    let mut cri = Cri::connect(&ep).await.unwrap();
    let specs: Vec<Value> = ["truncated", "v2", "typeurl", "fine"]
        .iter()
        .map(|n| json!({"name":n,"image":harness::IMAGE}))
        .collect();
    let (pod, pods_file) = harness::current_pod(&ctrd, &mut cri, &specs, "1.30").await;
    let store = Store::connect(&ep).await.unwrap();

    // Damage three records behind CRI's back (CRI answers from memory, so it still plans them).
    let good = ext(&store.get(&pod.container_ids[0]).await.unwrap());
    store
        .write(&pod.container_ids[0], &good[..good.len() / 2])
        .await
        .unwrap();
    let v1 = ext(&store.get(&pod.container_ids[1]).await.unwrap());
    let v2 = String::from_utf8(v1)
        .unwrap()
        .replace("\"Version\":\"v1\"", "\"Version\":\"v2\"");
    store
        .write(&pod.container_ids[1], v2.as_bytes())
        .await
        .unwrap();
    {
        use containerd_client::services::v1::{
            containers_client::ContainersClient, Container, UpdateContainerRequest,
        };
        let channel = kubehash::runtime::cri::unix_channel(&ep).await.unwrap();
        let mut rec = Container {
            id: pod.container_ids[2].clone(),
            ..Default::default()
        };
        let value = ext(&store.get(&pod.container_ids[2]).await.unwrap());
        rec.extensions.insert(
            EXTENSION.into(),
            prost_types::Any {
                type_url: "example.com/Other".into(),
                value,
            },
        );
        let mut req = tonic::Request::new(UpdateContainerRequest {
            container: Some(rec),
            update_mask: Some(prost_types::FieldMask {
                paths: vec![kubehash::runtime::containerd::FIELD_MASK.into()],
            }),
        });
        req.metadata_mut().insert(
            "containerd-namespace",
            tonic::metadata::MetadataValue::from_static("k8s.io"),
        );
        ContainersClient::new(channel).update(req).await.unwrap();
    }
    let mut before = Vec::new();
    for id in &pod.container_ids {
        before.push(store.get(id).await.unwrap());
    }

    let journal = ctrd.dir.join("journal/run.jsonl");
    let out = kubehash(&[
        "node",
        "apply",
        "--cri",
        &ep,
        "--containerd",
        &ep,
        "--to",
        "1.31",
        "--from",
        "1.30",
        "-i",
        &pods_file.display().to_string(),
        "--journal",
        &journal.display().to_string(),
        "-o",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "errors exit 2: {}",
        text(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let result = |c: &str| {
        report["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["container"] == c)
            .unwrap()
            .clone()
    };
    for c in ["truncated", "v2", "typeurl"] {
        let r = result(c);
        assert_eq!(r["result"], "error", "{r}");
        assert!(r["detail"].as_str().unwrap().contains("not written"), "{r}");
    }
    assert_eq!(result("fine")["result"], "written");
    assert!(result("typeurl")["detail"]
        .as_str()
        .unwrap()
        .contains(TYPE_URL));
    // Proof that no write reached containerd for the damaged records: UpdatedAt and bytes unchanged.
    for (id, old) in pod.container_ids.iter().zip(&before).take(3) {
        let now = store.get(id).await.unwrap();
        assert_eq!(now.updated_at, old.updated_at, "{id} was written");
        assert_eq!(now.extensions, old.extensions);
    }
    // And the journal has no write record for them.
    let j = std::fs::read_to_string(&journal).unwrap();
    for id in pod.container_ids.iter().take(3) {
        assert!(!j.contains(id.as_str()), "journaled a write for {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_refuses_while_a_kubelet_runs() {
    let ctrd = Containerd::start();
    let ep = ctrd.endpoint();
    // A process named kubelet, seen by this apply only (its own PID namespace).
    std::fs::write(ctrd.dir.join("pods.json"), r#"{"kind":"List","items":[]}"#).unwrap();
    let out = harness::kubehash_beside_process(
        "kubelet",
        &ctrd.dir,
        &[
            "node",
            "apply",
            "--cri",
            &ep,
            "--containerd",
            &ep,
            "--to",
            "1.31",
            "-i",
            &ctrd.dir.join("pods.json").display().to_string(),
            "--journal",
            &ctrd.dir.join("j.jsonl").display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("a kubelet is running (process kubelet, pid "),
        "{err}"
    );
    assert!(err.contains("or pass --force"), "{err}");
    assert!(
        !ctrd.dir.join("j.jsonl").exists(),
        "nothing written, not even a journal"
    );
}
