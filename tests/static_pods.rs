//! Static pods on a real containerd (tests/harness): sandboxes and containers created as a
//! kubelet creates a static pod read from a manifest file (sandbox `<name>-<node>`,
//! `kubernetes.io/config.source: file`, the derived UID as `kubernetes.io/config.hash`), a
//! manifests directory with comments, and no API server (so the specs come from the manifests
//! with the kubelet's defaults). The kubelet's UID derivation itself cannot run here; the test
//! picks the UID, as the kubelet would have derived one.

mod harness;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::kills::{measure, run_killed, Schedule};
use harness::{create_static_pod, hash, text, Containerd, TestContainer};
use kubehash::kubelet::defaults::default_container;
use kubehash::rewrite::pin::PIN_COMMENT;
use kubehash::runtime::containerd::{Store, EXTENSION};
use kubehash::runtime::cri::{keys, Cri};
use serde_json::{json, Value};

const NODE: &str = "node-1";

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The manifest's container as the kubelet defaults it (what it hashed when it created it).
fn defaulted(c: &Value) -> Value {
    let mut c = c.clone();
    default_container(&mut c);
    c
}

struct Node {
    ctrd: Containerd,
    manifests: PathBuf,
    pods_file: PathBuf,
    journal: PathBuf,
    /// The kubelet the pods ran under (their stored hashes) and the one `plan`/`apply` target.
    upgrade: (&'static str, &'static str),
}

impl Node {
    fn new() -> Node {
        let ctrd = Containerd::start();
        let manifests = ctrd.dir.join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        // No API server: no mirror pods, an empty pod list.
        let pods_file = ctrd.dir.join("pods.json");
        std::fs::write(&pods_file, r#"{"kind":"List","items":[]}"#).unwrap();
        let journal = ctrd.dir.join("journal.jsonl");
        Node {
            ctrd,
            manifests,
            pods_file,
            journal,
            upgrade: ("1.30", "1.31"),
        }
    }

    fn write(&self, file: &str, text: &str) -> PathBuf {
        let p = self.manifests.join(file);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Runs a static pod of `containers` (stored hashes from the old kubelet over `ran`).
    async fn run(&self, name: &str, uid: &str, ran: &[Value]) -> Vec<String> {
        let mut cri = Cri::connect(&self.ctrd.endpoint()).await.unwrap();
        let tcs: Vec<TestContainer> = ran
            .iter()
            .map(|c| TestContainer {
                spec: defaulted(c),
                stored_hash: Some(hash(&defaulted(c), self.upgrade.0)),
            })
            .collect();
        let pod = create_static_pod(
            &mut cri,
            &self.ctrd.dir.join("pods"),
            "kube-system",
            &format!("{name}-{NODE}"),
            uid,
            &tcs,
            self.upgrade.0.parse().unwrap(),
        )
        .await;
        pod.container_ids
    }

    /// The arguments of `kubehash node COMMAND` on this node, JSON out.
    fn args(&self, command: &str, extra: &[&str]) -> Vec<String> {
        let ep = self.ctrd.endpoint();
        let mut args = vec!["node", command, "--cri", &ep, "-o", "json"];
        let journal = s(&self.journal);
        let (manifests, pods) = (s(&self.manifests), s(&self.pods_file));
        if command == "plan" || command == "apply" {
            let (from, to) = self.upgrade;
            args.extend(["--to", to, "--from", from, "-i", &pods]);
            args.extend(["--manifests", &manifests, "--node-name", NODE]);
        }
        if command != "plan" {
            args.extend(["--containerd", &ep, "--journal", &journal]);
        }
        args.extend(extra);
        args.into_iter().map(String::from).collect()
    }

    fn node(&self, command: &str, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(self.args(command, extra))
            .output()
            .unwrap()
    }

    /// `node apply` (output piped), paused for `ms` between journaling its pin and putting it
    /// in place; returned once the journal holds the pin.
    fn apply_paused_at_pin(&self, ms: u64) -> std::process::Child {
        let child = Command::new(env!("CARGO_BIN_EXE_kubehash"))
            .args(self.args("apply", &[]))
            .env("KUBEHASH_TEST_PAUSE_BEFORE_PIN_MS", ms.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&self.journal).is_ok_and(|j| j.contains("\"kind\":\"pin\""))
        {
            assert!(Instant::now() < deadline, "apply never journaled the pin");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn json(&self, command: &str) -> Value {
        let out = self.node(command, &[]);
        assert!(
            out.status.success(),
            "node {command}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

async fn extension(ep: &str, id: &str) -> Vec<u8> {
    let store = Store::connect(ep).await.unwrap();
    store.get(id).await.unwrap().extensions[EXTENSION]
        .value
        .clone()
}

fn etcd() -> Value {
    json!({"name": "etcd", "image": "registry.k8s.io/etcd:3.5.15-0",
           "command": ["etcd", "--data-dir=/var/lib/etcd"],
           "livenessProbe": {"httpGet": {"port": 2381, "path": "/health"}},
           "resources": {"requests": {"cpu": "100m"}}})
}

const ETCD_YAML: &str = "# etcd, as kubeadm wrote it, then edited by hand\napiVersion: v1\nkind: Pod\nmetadata:\n  # kubeadm labels\n  labels:\n    component: etcd\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - command: [etcd, --data-dir=/var/lib/etcd]   # flow style on purpose\n    image: registry.k8s.io/etcd:3.5.15-0\n    livenessProbe:\n      httpGet: {port: 2381, path: /health}\n    name: etcd\n    resources:\n      requests:\n        cpu: 100m\n  hostNetwork: true\n";

const UID: &str = "2f8c5e0b7a1d4c3e9f6a5b4c3d2e1f00";

/// plan → apply → containerd restart → verify → rollback, for one static pod: the manifest gains
/// only `metadata.uid`, the container keeps its id and PID, CRI reports kubelet 1.31's hash, and
/// rollback restores the manifest (and its modification time) and the record byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_is_pinned_rewritten_verified_and_rolled_back() {
    let mut n = Node::new();
    let ep = n.ctrd.endpoint();
    let manifest = n.write("etcd.yaml", ETCD_YAML);
    let ids = n.run("etcd", UID, &[etcd()]).await;
    let id = &ids[0];
    let (record_before, pid_before) = (extension(&ep, id).await, n.ctrd.task_pid(id));
    let modified = || std::fs::metadata(&manifest).unwrap().modified().unwrap();
    let modified_before = modified();

    let plan = n.json("plan");
    assert_eq!(plan["static_pods"][0]["action"], "pin", "{plan}");
    assert_eq!(plan["static_pods"][0]["uid"], UID);
    assert_eq!(plan["containers"][0]["verdict"], "rewrite", "{plan}");

    let applied = n.json("apply");
    assert_eq!(applied["pins"][0]["result"], "written", "{applied}");
    assert_eq!(applied["outcomes"][0]["result"], "written", "{applied}");
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    assert_eq!(
        pinned,
        ETCD_YAML.replace(
            "metadata:\n",
            &format!("metadata:\n  uid: \"{UID}\" # {PIN_COMMENT}\n")
        ),
        "only metadata.uid (with its comment) is added"
    );

    n.ctrd.restart();
    let verified = n.json("verify");
    assert!(
        verified.as_array().unwrap().iter().all(|r| r["ok"] == true),
        "{verified}"
    );
    let mut cri = Cri::connect(&ep).await.unwrap();
    let c = cri
        .list_containers()
        .await
        .unwrap()
        .into_iter()
        .find(|c| &c.id == id)
        .expect("the container keeps its id");
    assert_eq!(c.annotations[keys::HASH], hash(&defaulted(&etcd()), "1.31"));
    assert_eq!(n.ctrd.task_pid(id), pid_before, "and its PID");

    // Applying again changes nothing: the manifest is pinned, the record rewritten.
    let again = n.json("apply");
    assert!(again["pins"].as_array().unwrap().is_empty(), "{again}");
    assert_eq!(again["outcomes"][0]["verdict"], "unchanged", "{again}");

    let rolled = n.json("rollback");
    assert!(
        rolled.as_array().unwrap().iter().all(|r| r["ok"] == true),
        "{rolled}"
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), ETCD_YAML);
    assert_eq!(extension(&ep, id).await, record_before);
    // Dated as before the pin: it still reads as the file its pod started from, so the upgrade
    // can be planned again.
    assert_eq!(modified(), modified_before);
    assert_eq!(n.json("plan")["static_pods"][0]["action"], "pin");
}

/// A manifest written just after its pod started (as a test lays out a node, or a copy made as
/// the pod started) is pinned: the kubelet that had just started the pod was running then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_written_just_after_its_pod_started_is_pinned() {
    let n = Node::new();
    let ids = n.run("etcd", UID, &[etcd()]).await;
    n.write("etcd.yaml", ETCD_YAML);
    let plan = n.json("plan");
    assert_eq!(plan["static_pods"][0]["action"], "pin", "{plan}");
    assert_eq!(plan["containers"][0]["id"], ids[0].as_str(), "{plan}");
    assert_eq!(plan["containers"][0]["verdict"], "rewrite", "{plan}");
}

/// The kubelet's node name is its host name lower-cased (`nodeutil.GetHostname`): given as
/// `NODE-1`, or read from a host named so, the node is `node-1`, and its static pod runs as
/// `etcd-node-1`. Taken as written, the name matched no sandbox, and the pod was not pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_name_is_lower_cased_as_the_kubelet_does() {
    let n = Node::new();
    n.write("etcd.yaml", ETCD_YAML);
    n.run("etcd", UID, &[etcd()]).await;
    let args: Vec<String> = n
        .args("plan", &[])
        .into_iter()
        .map(|a| if a == NODE { NODE.to_uppercase() } else { a })
        .collect();
    assert!(args.contains(&"NODE-1".to_string()), "{args:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["static_pods"][0]["action"], "pin", "{plan}");
    assert_eq!(plan["static_pods"][0]["uid"], UID, "{plan}");
}

/// Each manifest kubehash must not pin is reported and left byte for byte, and its containers are
/// not rewritten: several documents, already pinned, not parsable, no running sandbox, a spec
/// that no longer verifies against what runs, and a file rewritten after its pod started with a
/// change outside the containers (which, pinned, the new kubelet would never apply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_that_cannot_be_pinned_are_left_alone() {
    let n = Node::new();
    let ep = n.ctrd.endpoint();
    let pod = |name: &str, extra_meta: &str, image: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\n{extra_meta}spec:\n  containers:\n  - name: c\n    image: {image}\n"
        )
    };
    let c = |image: &str| json!({"name": "c", "image": image});
    let files = [
        (
            "several.yaml",
            format!(
                "{}---\n{}",
                pod("several", "", "a:1"),
                pod("other", "", "a:1")
            ),
        ),
        (
            "pinned.yaml",
            pod(
                "pinned",
                "  uid: \"11111111111111111111111111111111\"\n",
                "a:1",
            ),
        ),
        ("junk.yaml", "kind: Pod\nmetadata: [\n".to_string()),
        ("lonely.yaml", pod("lonely", "", "a:1")),
        // Runs a:1, but the manifest now says a:2.
        ("changed.yaml", pod("changed", "", "a:2")),
        // The same pod twice: a backup left beside the manifest, identical but for a comment.
        ("dup.yaml", pod("dup", "", "a:1")),
        (
            "dup.yaml.orig",
            format!("# before the edit\n{}", pod("dup", "", "a:1")),
        ),
    ];
    let mut before = Vec::new();
    for (f, t) in &files {
        before.push((n.write(f, t), t.clone()));
    }
    let several = n
        .run("several", "22222222222222222222222222222222", &[c("a:1")])
        .await;
    let pinned = n
        .run("pinned", "11111111111111111111111111111111", &[c("a:1")])
        .await;
    let changed = n
        .run("changed", "33333333333333333333333333333333", &[c("a:1")])
        .await;
    let dup = n
        .run("dup", "77777777777777777777777777777777", &[c("a:1")])
        .await;
    // Runs a:1 as its manifest says, but the manifest was rewritten since its pod started, with
    // a change outside the containers (a priority class), which no container's hash shows.
    let rewritten = n
        .run("rewritten", "44444444444444444444444444444444", &[c("a:1")])
        .await;
    let rewritten_text = format!(
        "{}  priorityClassName: system-node-critical\n",
        pod("rewritten", "", "a:1")
    );
    let rewritten_file = n.write("rewritten.yaml", &rewritten_text);
    // Rewritten an hour after its pod started, as while a kubelet was down for its upgrade.
    std::fs::File::options()
        .write(true)
        .open(&rewritten_file)
        .unwrap()
        .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(3600))
        .unwrap();
    before.push((rewritten_file, rewritten_text));
    // Saved as UTF-16 (a Windows editor): the kubelet reads such a file, kubehash reads it too
    // and never writes it. One sets its UID, one does not.
    let utf16 = |text: String, big: bool| -> Vec<u8> {
        let mark: &[u8] = if big { b"\xFE\xFF" } else { b"\xFF\xFE" };
        let units = text.encode_utf16().flat_map(|u| match big {
            true => u.to_be_bytes(),
            false => u.to_le_bytes(),
        });
        mark.iter().copied().chain(units).collect()
    };
    let utf16_files = [
        ("utf16.yaml", utf16(pod("utf16", "", "a:1"), false)),
        (
            "utf16-pinned.yaml",
            utf16(
                pod(
                    "utf16-pinned",
                    "  uid: \"55555555555555555555555555555555\"\n",
                    "a:1",
                ),
                true,
            ),
        ),
    ];
    for (f, bytes) in &utf16_files {
        std::fs::write(n.manifests.join(f), bytes).unwrap();
    }
    let utf16_unpinned = n
        .run("utf16", "66666666666666666666666666666666", &[c("a:1")])
        .await;
    let utf16_pinned = n
        .run(
            "utf16-pinned",
            "55555555555555555555555555555555",
            &[c("a:1")],
        )
        .await;
    // A manifest that is a symbolic link to a file kept elsewhere (config management's): the
    // kubelet follows the link; replacing the link would leave that file unpinned and the link
    // turned into a copy.
    let kept_elsewhere = n.manifests.parent().unwrap().join("linked-pod.yaml");
    let linked_text = pod("linked", "", "a:1");
    std::fs::write(&kept_elsewhere, &linked_text).unwrap();
    let link = n.manifests.join("linked.yaml");
    std::os::unix::fs::symlink(&kept_elsewhere, &link).unwrap();
    let linked = n
        .run("linked", "88888888888888888888888888888888", &[c("a:1")])
        .await;
    let records = [
        extension(&ep, &several[0]).await,
        extension(&ep, &changed[0]).await,
        extension(&ep, &rewritten[0]).await,
        extension(&ep, &utf16_unpinned[0]).await,
        extension(&ep, &dup[0]).await,
        extension(&ep, &linked[0]).await,
    ];

    let plan = n.json("plan");
    let action = |name: &str| {
        plan["static_pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| (p["action"].clone(), p["reason"].clone()))
    };
    assert!(action("several")
        .unwrap()
        .1
        .as_str()
        .unwrap()
        .contains("several documents"));
    assert_eq!(action("pinned").unwrap().0, "already-pinned");
    assert!(action("lonely")
        .unwrap()
        .1
        .as_str()
        .unwrap()
        .contains("no ready sandbox"));
    assert!(
        action("changed")
            .unwrap()
            .1
            .as_str()
            .unwrap()
            .contains("does not verify"),
        "{plan}"
    );
    assert!(
        action("rewritten")
            .unwrap()
            .1
            .as_str()
            .unwrap()
            .contains("after its pod's sandbox was created"),
        "{plan}"
    );
    assert!(
        action("junk").is_none(),
        "an unparsable manifest is not a static pod"
    );
    assert!(
        action("utf16")
            .unwrap()
            .1
            .as_str()
            .unwrap()
            .contains("the file is UTF-16 (its byte order mark says): kubehash reads such a file and never writes one; to keep the pod, set its metadata.uid to 66666666666666666666666666666666 by hand"),
        "{plan}"
    );
    assert_eq!(action("utf16-pinned").unwrap().0, "already-pinned");
    let why = action("linked").unwrap().1;
    assert!(
        why.as_str().unwrap().contains(&format!(
            "the file is a symbolic link to {}: replacing it would turn the link into a copy",
            kept_elsewhere.display()
        )),
        "{why}"
    );
    let why = action("dup").unwrap().1;
    let why = why.as_str().unwrap();
    assert!(
        why.starts_with("2 files declare the pod kube-system/dup (")
            && why.contains("dup.yaml, ")
            && why.contains("dup.yaml.orig)")
            && why.contains("so kubehash pins none"),
        "{why}"
    );
    let verdict = |id: &str| {
        plan["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()["verdict"]
            .clone()
    };
    assert_eq!(verdict(&several[0]), "recreated");
    assert_eq!(verdict(&changed[0]), "recreated");
    assert_eq!(verdict(&rewritten[0]), "recreated");
    assert_eq!(verdict(&utf16_unpinned[0]), "recreated");
    assert_eq!(verdict(&dup[0]), "recreated");
    assert_eq!(verdict(&linked[0]), "recreated");
    assert_eq!(verdict(&utf16_pinned[0]), "rewrite");
    assert_eq!(
        verdict(&pinned[0]),
        "rewrite",
        "a pinned static pod is like any other pod"
    );

    let out = n.node("apply", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("junk.yaml"),
        "the unparsable file is reported"
    );
    for (path, text_before) in &before {
        assert_eq!(
            &std::fs::read_to_string(path).unwrap(),
            text_before,
            "{path:?}"
        );
    }
    assert_eq!(extension(&ep, &several[0]).await, records[0]);
    assert_eq!(extension(&ep, &changed[0]).await, records[1]);
    assert_eq!(extension(&ep, &rewritten[0]).await, records[2]);
    assert_eq!(extension(&ep, &utf16_unpinned[0]).await, records[3]);
    assert_eq!(extension(&ep, &dup[0]).await, records[4]);
    assert_eq!(extension(&ep, &linked[0]).await, records[5]);
    assert_eq!(std::fs::read_link(&link).unwrap(), kept_elsewhere);
    assert_eq!(
        std::fs::read_to_string(&kept_elsewhere).unwrap(),
        linked_text
    );
    for (f, bytes) in &utf16_files {
        assert_eq!(&std::fs::read(n.manifests.join(f)).unwrap(), bytes, "{f}");
    }
}

/// A crash between journaling a pin and putting it in place leaves the manifest as it was; the
/// next apply pins it, and rollback restores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_journal_and_rename_converges() {
    let n = Node::new();
    let manifest = n.write("etcd.yaml", ETCD_YAML);
    n.run("etcd", UID, &[etcd()]).await;

    let mut child = n.apply_paused_at_pin(60_000);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), ETCD_YAML);
    let dots: Vec<_> = std::fs::read_dir(&n.manifests)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(dots.is_empty(), "nothing half-made beside the manifest");

    let applied = n.json("apply");
    assert_eq!(applied["pins"][0]["result"], "written", "{applied}");
    assert!(std::fs::read_to_string(&manifest)
        .unwrap()
        .contains(&format!("uid: \"{UID}\"")));
    let rolled = n.json("rollback");
    assert!(
        rolled.as_array().unwrap().iter().all(|r| r["ok"] == true),
        "{rolled}"
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), ETCD_YAML);
}

/// A manifest someone turns into a symbolic link after apply read it (config management taking
/// it over) is not replaced: the link would become a copy, and the file it points to stay
/// unpinned. The journaled pin stays undone, and rollback finds nothing of kubehash's to undo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_turned_into_a_link_during_apply_is_left_alone() {
    let n = Node::new();
    let manifest = n.write("etcd.yaml", ETCD_YAML);
    n.run("etcd", UID, &[etcd()]).await;
    let child = n.apply_paused_at_pin(3_000);
    // The same text, now kept elsewhere and linked in.
    let elsewhere = n.manifests.parent().unwrap().join("etcd-managed.yaml");
    std::fs::write(&elsewhere, ETCD_YAML).unwrap();
    let swap = n.manifests.join(".swap");
    std::os::unix::fs::symlink(&elsewhere, &swap).unwrap();
    std::fs::rename(&swap, &manifest).unwrap();
    let out = child.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(report["pins"][0]["result"], "error", "{report}");
    assert!(
        report["pins"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("it is now a symbolic link"),
        "{report}"
    );
    assert_eq!(std::fs::read_link(&manifest).unwrap(), elsewhere);
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), ETCD_YAML);
    let rolled = n.node("rollback", &[]);
    assert_eq!(
        std::fs::read_link(&manifest).unwrap(),
        elsewhere,
        "{}",
        text(&rolled.stdout)
    );
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), ETCD_YAML);

    // Pinned, then linked to a copy of the pinned text: rollback does not replace the link.
    std::fs::remove_file(&manifest).unwrap();
    std::fs::write(&manifest, ETCD_YAML).unwrap();
    let applied = n.json("apply");
    assert_eq!(applied["pins"][0]["result"], "written", "{applied}");
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&elsewhere, &pinned).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &swap).unwrap();
    std::fs::rename(&swap, &manifest).unwrap();
    let rolled = n.node("rollback", &[]);
    assert!(
        text(&rolled.stdout).contains("not restored: it is now a symbolic link"),
        "{}{}",
        text(&rolled.stdout),
        text(&rolled.stderr)
    );
    assert_eq!(std::fs::read_link(&manifest).unwrap(), elsewhere);
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), pinned);
}

/// `apply --pins-only` pins while a kubelet runs (pinning keeps the UID the running kubelet
/// derives) and writes no container record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_only_runs_beside_a_kubelet_and_writes_no_record() {
    let n = Node::new();
    let ep = n.ctrd.endpoint();
    let manifest = n.write("etcd.yaml", ETCD_YAML);
    let ids = n.run("etcd", UID, &[etcd()]).await;
    let record = extension(&ep, &ids[0]).await;
    // Each run beside a process named kubelet-1.30, seen by that run only (its own PID
    // namespace), so that the tests beside this one are not stopped by it.
    let beside_kubelet = |extra: &[&str]| {
        let args = n.args("apply", extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        harness::kubehash_beside_process("kubelet-1.30", &n.ctrd.dir, &args)
    };
    let refused = beside_kubelet(&[]);
    let pinned = beside_kubelet(&["--pins-only"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    assert!(pinned.status.success(), "{}", text(&pinned.stderr));
    let report: Value = serde_json::from_slice(&pinned.stdout).unwrap();
    assert_eq!(report["pins"][0]["result"], "written", "{report}");
    assert_eq!(report["outcomes"][0]["result"], "left-alone", "{report}");
    assert!(std::fs::read_to_string(&manifest)
        .unwrap()
        .contains(&format!("uid: \"{UID}\"")));
    assert_eq!(extension(&ep, &ids[0]).await, record);
}

/// A forged journal cannot make rollback write a manifest: a `pin` whose original differs from
/// the pinned text in more than `metadata.uid` (here, another image) stops rollback before it
/// writes anything, and so does a `pin` whose text sets another UID than its record names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_refuses_a_forged_pin() {
    use base64::Engine;
    let n = Node::new();
    let ep = n.ctrd.endpoint();
    let manifest = n.write("etcd.yaml", ETCD_YAML);
    let ids = n.run("etcd", UID, &[etcd()]).await;
    n.json("apply");
    let (pinned, record) = (
        std::fs::read_to_string(&manifest).unwrap(),
        extension(&ep, &ids[0]).await,
    );
    let journal = std::fs::read_to_string(&n.journal).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let forge = |field: &str, text: &str| -> String {
        journal
            .lines()
            .map(|l| {
                let mut v: Value = serde_json::from_str(l).unwrap();
                if v["kind"] == "pin" {
                    v[field] = b64.encode(text).into();
                }
                v.to_string() + "\n"
            })
            .collect()
    };
    for forged in [
        forge("old_value", &ETCD_YAML.replace("etcd:3.5.15-0", "evil:1")),
        forge(
            "new_value",
            &pinned.replace(UID, "00000000000000000000000000000000"),
        ),
    ] {
        std::fs::write(&n.journal, forged).unwrap();
        let out = n.node("rollback", &[]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains("manifest"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(std::fs::read_to_string(&manifest).unwrap(), pinned);
        assert_eq!(extension(&ep, &ids[0]).await, record);
    }
}

const SCHEDULER_YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: scheduler\n  namespace: kube-system\nspec:\n  containers:\n  - name: scheduler\n    image: registry.k8s.io/kube-scheduler:v1.30.0\n    command: [kube-scheduler, --v=2]\n  hostNetwork: true\n";

const SCHEDULER_UID: &str = "3a9d6f1c8b2e4d5f0a7b6c5d4e3f2a11";

fn scheduler() -> Value {
    json!({"name": "scheduler", "image": "registry.k8s.io/kube-scheduler:v1.30.0",
           "command": ["kube-scheduler", "--v=2"]})
}

/// Every manifest's text and every record's extension, in order.
async fn node_state(
    ep: &str,
    manifests: &[PathBuf],
    ids: &[String],
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let texts = manifests
        .iter()
        .map(|m| std::fs::read(m).unwrap())
        .collect();
    let mut records = Vec::new();
    for id in ids {
        records.push(extension(ep, id).await);
    }
    (texts, records)
}

/// The static-pod path under random kills (as `random_kills_leave_every_record_original_or_
/// rewritten` in node_agent.rs): two static pods, each pinned and its container rewritten by
/// `apply`, and both undone by `rollback`, each run SIGKILLed at random moments and run again.
/// After every kill, each manifest holds its original text or its pinned text, nothing else (at
/// most one dot-named temporary beside it, which the kubelet ignores), and a pinned manifest is
/// already in the journal; each record holds its original value or the rewritten one, journaled
/// first. The runs that follow converge, and leave no temporary behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_leave_every_manifest_and_record_whole() {
    const ROUNDS: usize = 20;
    let mut schedule = Schedule::from_env_or_clock();
    let seed = schedule.seed;
    let n = Node::new();
    let ep = n.ctrd.endpoint();
    let manifests = [
        n.write("etcd.yaml", ETCD_YAML),
        n.write("scheduler.yaml", SCHEDULER_YAML),
    ];
    let mut ids = n.run("etcd", UID, &[etcd()]).await;
    ids.extend(n.run("scheduler", SCHEDULER_UID, &[scheduler()]).await);
    let original = node_state(&ep, &manifests, &ids).await;
    let only_manifests = |when: &str, temporaries: bool| {
        for e in std::fs::read_dir(&n.manifests).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let temporary = name.starts_with('.') && name.ends_with(".kubehash-tmp");
            assert!(
                ["etcd.yaml", "scheduler.yaml"].contains(&name.as_str())
                    || (temporaries && temporary),
                "{when}: {name} beside the manifests (seed {seed})"
            );
        }
    };
    // Each round's journal is set aside once its round is done.
    let set_aside = |round: &str| {
        std::fs::rename(
            &n.journal,
            n.ctrd.dir.join(format!("journal-{round}.jsonl")),
        )
        .unwrap();
    };

    // One run of each without kills: the pinned texts and rewritten values, and the runs' shapes.
    let apply_shape = measure(&n.args("apply", &[]), &n.journal);
    let done = node_state(&ep, &manifests, &ids).await;
    for (i, (now, before)) in done.0.iter().zip(&original.0).enumerate() {
        assert_ne!(now, before, "manifest {i} pinned by the reference run");
    }
    for (i, (now, before)) in done.1.iter().zip(&original.1).enumerate() {
        assert_ne!(now, before, "record {i} rewritten by the reference run");
    }
    let rollback_shape = measure(&n.args("rollback", &[]), &n.journal);
    assert_eq!(node_state(&ep, &manifests, &ids).await, original);
    only_manifests("the reference runs", false);
    set_aside("reference");

    let mut mixed = 0;
    let mut check = |(texts, records): &(Vec<Vec<u8>>, Vec<Vec<u8>>), when: &str| {
        let changed = (texts.iter().zip(&original.0))
            .filter(|(a, b)| a != b)
            .count()
            + (records.iter().zip(&original.1))
                .filter(|(a, b)| a != b)
                .count();
        if changed > 0 && changed < texts.len() + records.len() {
            mixed += 1;
        }
        // Killed before the journal was made: nothing may have been written.
        let contents = match n.journal.exists() {
            true => kubehash::rewrite::journal::read(&n.journal)
                .unwrap_or_else(|e| panic!("{when}: the journal does not read: {e}")),
            false => Default::default(),
        };
        let (pins, writes) = (contents.pins(), contents.writes());
        for (i, text) in texts.iter().enumerate() {
            if *text == original.0[i] {
                continue;
            }
            assert_eq!(
                *text, done.0[i],
                "{when}: manifest {i} holds neither its text nor its pinned text (seed {seed})"
            );
            let path = s(&manifests[i]);
            assert!(
                pins.iter()
                    .any(|p| p.path == path && p.original == original.0[i] && p.written == *text),
                "{when}: manifest {i} pinned before the journal held the pin (seed {seed})"
            );
        }
        for (i, value) in records.iter().enumerate() {
            if *value == original.1[i] {
                continue;
            }
            assert_eq!(
                *value, done.1[i],
                "{when}: record {i} holds neither its value nor its rewritten value (seed {seed})"
            );
            assert!(
                writes
                    .iter()
                    .any(|w| w.id == ids[i] && w.original == original.1[i] && w.written == *value),
                "{when}: record {i} written before the journal held the write (seed {seed})"
            );
        }
        only_manifests(when, true);
    };

    for round in 0..ROUNDS {
        // Apply, killed up to three times, then run to its end; then rollback, killed up to
        // twice, then run to its end (exit 0: every manifest and record restored).
        let phases = [
            ("apply", &apply_shape, 3, &done),
            ("rollback", &rollback_shape, 2, &original),
        ];
        for (what, shape, kills, converged) in phases {
            for attempt in 0..kills {
                let at = schedule.kill_at(attempt, shape);
                let ended = run_killed(&n.args(what, &[]), &n.journal, at).ended;
                let when = format!("round {round}, {what} {attempt} killed at {at:?}");
                check(&node_state(&ep, &manifests, &ids).await, &when);
                if ended {
                    break;
                }
            }
            n.json(what);
            assert_eq!(
                &node_state(&ep, &manifests, &ids).await,
                converged,
                "round {round}: {what} converges"
            );
            only_manifests(&format!("round {round}, after {what}"), false);
        }
        set_aside(&format!("round-{round}"));
    }
    eprintln!("{mixed} kills left the node half pinned or half rewritten");
    assert!(mixed > 0, "no kill landed between two writes (seed {seed})");
}

/// A hand-written manifest's `cpu: 0.5` (a YAML number) is the quantity "0.5" to the kubelet,
/// which stored its hash from that. So the stored hash verifies against the manifest, and the
/// pod is pinned and its container rewritten, as any other: not left alone as undecidable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_quantity_in_a_manifest_is_read_as_the_kubelet_reads_it() {
    let n = Node::new();
    n.write("etcd.yaml", &ETCD_YAML.replace("cpu: 100m", "cpu: 0.5"));
    let mut ran = etcd();
    ran["resources"]["requests"]["cpu"] = json!("0.5");
    n.run("etcd", UID, &[ran]).await;
    let plan = n.json("plan");
    assert_eq!(plan["static_pods"][0]["action"], "pin", "{plan}");
    assert_eq!(plan["containers"][0]["verdict"], "rewrite", "{plan}");
}

/// A JSON manifest reaches the kubelet's JSON decoder as written, which hands a quantity its raw
/// text. `"cpu":0.50` is the quantity "0.50" (not "0.5": kubelet ≤ 1.15 dumps the text), so a
/// container whose stored hash came from that is proven and rewritten, and its pod pinned. A
/// quantity string with an escape (`"0.\u0035"`) fails `Quantity.UnmarshalJSON`, so no kubelet
/// runs that spec: the container is not rewritten, and nothing is written (its record and the
/// manifest stay byte for byte), though the escape reads as the "0.5" it did run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_manifest_quantity_is_read_from_its_raw_text() {
    let manifest = |cpu: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"etcd","namespace":"kube-system"}},"spec":{{"hostNetwork":true,"containers":[{{"name":"etcd","image":"registry.k8s.io/etcd:3.5.15-0","command":["etcd","--data-dir=/var/lib/etcd"],"livenessProbe":{{"httpGet":{{"port":2381,"path":"/health"}}}},"resources":{{"requests":{{"cpu":{cpu}}}}}}}]}}}}"#
        )
    };
    let running = |cpu: &str| {
        let mut ran = etcd();
        ran["resources"]["requests"]["cpu"] = json!(cpu);
        ran
    };

    {
        // One node (one containerd) at a time.
        let n = Node::new();
        n.write("etcd.json", &manifest("0.50"));
        n.run("etcd", UID, &[running("0.50")]).await;
        let plan = n.json("plan");
        assert_eq!(plan["static_pods"][0]["action"], "pin", "{plan}");
        assert_eq!(plan["containers"][0]["verdict"], "rewrite", "{plan}");
    }

    let n = Node::new();
    let ep = n.ctrd.endpoint();
    let written = manifest(r#""0.\u0035""#);
    let path = n.write("etcd.json", &written);
    let ids = n.run("etcd", UID, &[running("0.5")]).await;
    let record = extension(&ep, &ids[0]).await;
    let plan = n.json("plan");
    let refused = &plan["static_pods"][0];
    assert_eq!(refused["action"], "refused", "{plan}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("invalid quantity"),
        "{plan}"
    );
    assert_ne!(plan["containers"][0]["verdict"], "rewrite", "{plan}");
    let applied = n.node("apply", &[]);
    let out = format!("{}{}", text(&applied.stdout), text(&applied.stderr));
    assert!(!out.contains(r#""result":"written""#), "{out}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
    assert_eq!(extension(&ep, &ids[0]).await, record);
}

/// The mirror pod the API server holds for a static pod run from `container`.
fn mirror_pods(container: &Value) -> Value {
    json!({"kind": "List", "items": [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "kube-system", "name": format!("etcd-{NODE}"), "uid": "mirror-1",
            "annotations": {"kubernetes.io/config.mirror": UID, "kubernetes.io/config.hash": UID,
                "kubernetes.io/config.source": "file"}},
        "spec": {"nodeName": NODE, "containers": [defaulted(container)]}}]})
}

/// A pinned manifest edited while the kubelet is down (its args changed, its UID kept), with the
/// API server's mirror pod still holding the old spec: the container, proved against the mirror,
/// had its hash rewritten, and kubelet 1.31 (which hashes only name and image) kept running the
/// old args instead of restarting it with the new ones. Now it is proved only where the manifest
/// and the mirror agree; when they do, it is rewritten as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_edited_behind_its_mirror_pod_is_not_proved_by_the_mirror() {
    let n = Node::new();
    let ep = n.ctrd.endpoint();
    let pinned = ETCD_YAML.replace(
        "  namespace: kube-system\n",
        &format!("  namespace: kube-system\n  uid: {UID}\n"),
    );
    n.write("etcd.yaml", &pinned);
    let ids = n.run("etcd", UID, &[etcd()]).await;
    std::fs::write(&n.pods_file, mirror_pods(&etcd()).to_string()).unwrap();
    let plan = n.json("plan");
    assert_eq!(plan["containers"][0]["verdict"], "rewrite", "{plan}");

    n.write(
        "etcd.yaml",
        &pinned.replace("--data-dir=/var/lib/etcd", "--data-dir=/var/lib/etcd2"),
    );
    let before = extension(&ep, &ids[0]).await;
    let out = n.node("apply", &[]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    let o = &report["outcomes"][0];
    assert_eq!(o["verdict"], "error", "{report}");
    assert_eq!(o["result"], "left-alone", "{report}");
    assert!(
        o["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("the static pod's manifest says another spec for container etcd than its mirror pod does"),
        "{report}"
    );
    assert_eq!(extension(&ep, &ids[0]).await, before);
}

/// A static pod whose container the runtime's record says was created from another spec than
/// its manifest's, where the hashes do not tell (kubelet 1.31 → 1.32: both hash only name and
/// image). A manifest that pins `metadata.uid` keeps its pod through an edit, and its mirror pod
/// keeps the old spec (`kubernetes.io/config.hash` is that UID), so the kubelet goes on running
/// what the container was created from: said, with the way out (an edit that hardens the pod,
/// to run as a user in the container's or the pod's securityContext, is found as well as one of
/// its command). One that does not pin is not
/// pinned now (its file's date, kept by a copy, does not show the edit): pinned, the new kubelet
/// would keep the stale pod instead of recreating it from the file. Pods that run their manifest
/// are planned as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_does_not_run_its_manifest_is_said_and_never_pinned() {
    let mut n = Node::new();
    n.upgrade = ("1.31", "1.32");
    let ep = n.ctrd.endpoint();
    let manifest = |name: &str, uid: Option<&str>, arg: &str, mode: &str| {
        let uid = uid.map(|u| format!("  uid: \"{u}\"\n")).unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\n{uid}spec:\n  containers:\n  - name: c\n    image: a:1\n    command: [app, {arg}]\n    env:\n    - name: MODE\n      value: {mode}\n"
        )
    };
    let ran = |arg: &str, mode: &str| {
        json!({"name": "c", "image": "a:1", "command": ["app", arg],
               "env": [{"name": "MODE", "value": mode}]})
    };
    let (edited, kept, mirrored, hardened, pod_wide, remade) = (
        "a1111111111111111111111111111111",
        "b2222222222222222222222222222222",
        "c3333333333333333333333333333333",
        "f6666666666666666666666666666666",
        "07777777777777777777777777777777",
        "18888888888888888888888888888888",
    );
    // Written before the pods start, as a copy that keeps the file's date would leave them.
    let files = [
        (
            "edited.yaml",
            manifest("edited", Some(edited), "--new", "fast"),
        ),
        ("kept.yaml", manifest("kept", Some(kept), "--old", "fast")),
        ("copied.yaml", manifest("copied", None, "--new", "fast")),
        ("plain.yaml", manifest("plain", None, "--old", "fast")),
        (
            "mirrored.yaml",
            manifest("mirrored", Some(mirrored), "--old", "slow"),
        ),
        // Hardened since: to run as a user, where it runs as the image's (root).
        (
            "hardened.yaml",
            manifest("hardened", Some(hardened), "--old", "fast").replace(
                "    env:\n",
                "    securityContext:\n      runAsUser: 1000\n    env:\n",
            ),
        ),
        // Edited, and its container made again from the file since (after a crash): it runs
        // the manifest, though the mirror pod below still shows the old spec.
        (
            "remade.yaml",
            manifest("remade", Some(remade), "--old", "slow"),
        ),
        // The same for all its containers, in the pod's securityContext.
        (
            "pod-wide.yaml",
            manifest("pod-wide", Some(pod_wide), "--old", "fast").replace(
                "spec:\n",
                "spec:\n  securityContext:\n    runAsUser: 1000\n",
            ),
        ),
    ];
    let mut paths = Vec::new();
    for (f, t) in &files {
        paths.push((n.write(f, t), t.clone()));
    }
    let mut ids = Vec::new();
    for (name, uid) in [
        ("edited", edited),
        ("kept", kept),
        ("copied", "d4444444444444444444444444444444"),
        ("plain", "e5555555555555555555555555555555"),
        ("mirrored", mirrored),
        ("hardened", hardened),
        ("pod-wide", pod_wide),
    ] {
        ids.extend(n.run(name, uid, &[ran("--old", "fast")]).await);
    }
    ids.extend(n.run("remade", remade, &[ran("--old", "slow")]).await);
    // The API server's mirror pods of `mirrored` and `remade` still hold the spec the pods were
    // created from.
    let mirror = |name: &str, uid: &str| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "kube-system", "name": format!("{name}-{NODE}"),
                "uid": format!("mirror-{name}"),
                "annotations": {"kubernetes.io/config.mirror": uid,
                    "kubernetes.io/config.hash": uid,
                    "kubernetes.io/config.source": "file"}},
            "spec": {"nodeName": NODE, "containers": [defaulted(&ran("--old", "fast"))]}})
    };
    std::fs::write(
        &n.pods_file,
        json!({"kind": "List", "items": [mirror("mirrored", mirrored), mirror("remade", remade)]})
            .to_string(),
    )
    .unwrap();
    let mut records = Vec::new();
    for id in &ids {
        records.push(extension(&ep, id).await);
    }

    let plan = n.json("plan");
    let statics = plan["static_pods"].as_array().unwrap();
    let action = |name: &str| {
        let s = statics.iter().find(|s| s["name"] == name).unwrap();
        (
            s["action"].as_str().unwrap().to_string(),
            s["reason"].clone(),
        )
    };
    let container = |pod: &str| {
        plan["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["pod"] == format!("{pod}-{NODE}"))
            .unwrap()
            .clone()
    };
    for (pod, differs) in [
        ("edited", "command"),
        ("mirrored", "env"),
        (
            "hardened",
            "securityContext.runAsUser none, and the spec now says 1000",
        ),
        (
            "pod-wide",
            "the pod's securityContext.runAsUser none, and the pod now says 1000",
        ),
    ] {
        assert_eq!(action(pod).0, "already-pinned", "{plan}");
        let c = container(pod);
        assert_eq!(c["verdict"], "unchanged", "{plan}");
        let why = c["runs_another_spec"].as_str().unwrap_or_default();
        assert!(why.contains(&format!("created with {differs}")), "{plan}");
        assert!(
            c["reason"]
                .as_str()
                .unwrap()
                .contains("delete metadata.uid from the manifest"),
            "{plan}"
        );
    }
    assert_eq!(action("copied").0, "refused", "{plan}");
    let why = action("copied").1.as_str().unwrap_or_default().to_string();
    assert!(
        why.contains("container c does not verify against the manifest")
            && why.contains("created with command"),
        "{plan}"
    );
    assert_eq!(container("copied")["verdict"], "recreated", "{plan}");
    assert_eq!(action("kept").0, "already-pinned", "{plan}");
    assert_eq!(action("remade").0, "already-pinned", "{plan}");
    assert_eq!(action("plain").0, "pin", "{plan}");
    for pod in ["kept", "plain", "remade"] {
        let c = container(pod);
        assert_eq!(c["verdict"], "unchanged", "{plan}");
        assert!(c.get("runs_another_spec").is_none(), "{plan}");
    }

    // The table says how many, above the containers.
    let args: Vec<String> = n
        .args("plan", &[])
        .into_iter()
        .map(|a| if a == "json" { "table".into() } else { a })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(&args)
        .output()
        .unwrap();
    let table = text(&out.stdout);
    assert!(
        table.contains("\n4 unchanged containers run another spec than their current one, by the runtime's record: kubelet 1.32 keeps them as created (see WHY).\n"),
        "{table}"
    );

    // Planned for the kubelet that runs (no upgrade), as a check at any time: the same finding.
    n.upgrade = ("1.32", "1.32");
    let now = n.json("plan");
    let c = now["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pod"] == format!("edited-{NODE}"))
        .unwrap();
    assert_eq!(c["verdict"], "unchanged", "{now}");
    assert!(
        c["reason"]
            .as_str()
            .unwrap()
            .contains("delete metadata.uid from the manifest"),
        "{now}"
    );
    n.upgrade = ("1.31", "1.32");

    // Apply pins the pod that runs its manifest, and writes nothing else.
    let applied = n.json("apply");
    let pins = applied["pins"].as_array().unwrap();
    assert_eq!(pins.len(), 1, "{applied}");
    assert!(
        pins[0]["path"].as_str().unwrap().ends_with("plain.yaml"),
        "{applied}"
    );
    for (path, text) in paths.iter().filter(|(p, _)| !p.ends_with("plain.yaml")) {
        assert_eq!(&std::fs::read_to_string(path).unwrap(), text, "{path:?}");
    }
    for (id, record) in ids.iter().zip(&records) {
        assert_eq!(&extension(&ep, id).await, record, "{id}");
    }
}
