//! The write path against an adversary, on a real containerd (tests/harness): weak proofs, crafted
//! collisions, forged and corrupted journals, interrupted and re-run applies with the default
//! journal, torn journal lines, and kubelets that hide behind another name or PID namespace. Each
//! test states the failure it guards against; each failed on kubehash 0.1.

mod harness;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use harness::{hash, kubehash, text, Containerd};
use kubehash::runtime::containerd::{parse_metadata, stored_hashes, Store, EXTENSION};
use kubehash::runtime::record::RecordStore;
use serde_json::{json, Value};

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A pod of containers created by kubelet `made_by`, each with the stored hash given (or the
/// creating kubelet's hash of `then`), and a pods file holding the current specs `now`.
struct Scenario {
    ctrd: Containerd,
    pods_file: PathBuf,
    ids: Vec<String>,
}

async fn scenario(made_by: &str, containers: &[(Value, Value)]) -> Scenario {
    let ctrd = Containerd::start();
    let stored: Vec<(Value, String)> = containers
        .iter()
        .map(|(then, now)| (now.clone(), hash(then, made_by)))
        .collect();
    let (ids, pods_file) = harness::shop_pod(&ctrd, made_by, &stored).await;
    Scenario {
        ctrd,
        pods_file,
        ids,
    }
}

async fn extensions(ep: &str, ids: &[String]) -> Vec<Vec<u8>> {
    let store = Store::connect(ep).await.unwrap();
    let mut out = Vec::new();
    for id in ids {
        out.push(
            store.get(id).await.unwrap().extensions[EXTENSION]
                .value
                .clone(),
        );
    }
    out
}

/// `kubehash node apply` on the scenario's node, journals in its `journals/`, JSON out.
fn apply_command(sc: &Scenario, extra: &[&str]) -> Command {
    let ep = sc.ctrd.endpoint();
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubehash"));
    c.args([
        "node",
        "apply",
        "--cri",
        &ep,
        "--containerd",
        &ep,
        "-o",
        "json",
    ])
    .arg("-i")
    .arg(&sc.pods_file)
    .arg("--journal-dir")
    .arg(sc.ctrd.dir.join("journals"))
    .args(extra);
    c
}

/// `n` containers `c0`, `c1`, … (distinct by their args), each unchanged since it was created.
fn unchanged(n: usize) -> Vec<(Value, Value)> {
    (0..n)
        .map(|i| {
            let c =
                json!({"name":format!("c{i}"),"image":harness::IMAGE,"args":[format!("--n={i}")]});
            (c.clone(), c)
        })
        .collect()
}

fn apply(sc: &Scenario, extra: &[&str]) -> Output {
    apply_command(sc, extra).output().unwrap()
}

/// Runs `node apply --from 1.30 --to 1.31` on a scenario of one container, checks that it is
/// planned `verdict` and left alone, and returns why.
fn left_alone_as(sc: &Scenario, verdict: &str, case: &str) -> String {
    let out = apply(sc, &["--from", "1.30", "--to", "1.31"]);
    assert_eq!(
        results(&out),
        [(verdict.to_string(), "left-alone".to_string())],
        "{case}: {}",
        text(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["outcomes"][0]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn results(out: &Output) -> Vec<(String, String)> {
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["verdict"].as_str().unwrap().to_string(),
                o["result"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// 1. A weak proof authorised a strong rewrite: downgrades out of the name+image epoch, and a
///    field the old kubelet dropped (appArmorProfile, recursiveReadOnly for 1.29 → 1.30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_proofs_write_nothing() {
    let img = harness::IMAGE;
    let then = json!({"name":"env","image":img,"env":[{"name":"MODE","value":"old"}]});
    let now = json!({"name":"env","image":img,"env":[{"name":"MODE","value":"new"}]});
    let sc = scenario("1.31", &[(then, now)]).await;
    let before = extensions(&sc.ctrd.endpoint(), &sc.ids).await;
    for (from, to) in [("1.31", "1.30"), ("1.33", "1.28")] {
        let out = apply(&sc, &["--from", from, "--to", to]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            results(&out),
            [("unprovable".to_string(), "left-alone".to_string())],
            "{from} → {to}"
        );
    }
    assert_eq!(extensions(&sc.ctrd.endpoint(), &sc.ids).await, before);
    drop(sc);

    let armored = json!({"name":"armored","image":img,
        "securityContext":{"appArmorProfile":{"type":"RuntimeDefault"}}});
    let rro = json!({"name":"rro","image":img,"volumeMounts":[{"name":"data","mountPath":"/data",
        "readOnly":true,"recursiveReadOnly":"Enabled"}]});
    let sc = scenario("1.29", &[(armored.clone(), armored), (rro.clone(), rro)]).await;
    let before = extensions(&sc.ctrd.endpoint(), &sc.ids).await;
    let out = apply(&sc, &["--from", "1.29", "--to", "1.30"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // CRI lists containers in no fixed order: find each by name.
    for (name, field) in [
        ("armored", "securityContext.appArmorProfile"),
        ("rro", "volumeMounts[].recursiveReadOnly"),
    ] {
        let o = v["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["container"] == name)
            .unwrap();
        assert_eq!(o["verdict"], "will-restart", "{o}");
        assert_eq!(o["result"], "left-alone", "{o}");
        assert!(o["detail"].as_str().unwrap().contains(field), "{o}");
    }
    assert_eq!(extensions(&sc.ctrd.endpoint(), &sc.ids).await, before);
}

/// 2. Without `--from`, a stored hash that is *some* kubelet's hash of the new spec (an image tag
///    crafted by meet-in-the-middle on FNV-1a makes kubelet 1.14's hash of the new spec equal the
///    stored 1.30 hash) masked an image update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_collision_writes_nothing() {
    let img = harness::IMAGE;
    let now = json!({"name":"app","image":img,"args":["--v2"]});
    // The container runs the old spec; its stored hash is what the attacker made collide.
    let ctrd = Containerd::start();
    let (ids, pods_file) =
        harness::shop_pod(&ctrd, "1.30", &[(now.clone(), hash(&now, "1.14"))]).await;
    let sc = Scenario {
        ctrd,
        pods_file,
        ids,
    };
    let before = extensions(&sc.ctrd.endpoint(), &sc.ids).await;
    let blind = apply(&sc, &["--to", "1.31"]);
    assert!(blind.status.success(), "{}", text(&blind.stderr));
    assert_eq!(
        results(&blind),
        [("unprovable".to_string(), "left-alone".to_string())]
    );
    let known = apply(&sc, &["--to", "1.31", "--from", "1.30"]);
    assert_eq!(
        results(&known),
        [("will-restart".to_string(), "left-alone".to_string())]
    );
    assert_eq!(extensions(&sc.ctrd.endpoint(), &sc.ids).await, before);
}

/// 2a'. A collision in the old kubelet's own hash where kubelet 1.31 does not look: the container
///    was created with `--v1` (or `MODE=old`, unprivileged, as user 1000, under seccomp), its
///    stored hash is kubelet 1.30's hash of the spec that now says `--v2` (`MODE=new`,
///    privileged, as root, unconfined), crafted or a 32-bit accident, and CRI's image agrees
///    with the spec, so the hashes prove a rewrite. Written, kubelet 1.31 (name and image) would
///    never apply the change. The runtime says what the container was created with
///    (containerd's verbose ContainerStatus): the plan says `will-restart`, and nothing is
///    written. (`apply` also reads the record again before each write: `rewrite::apply`'s unit
///    tests try that check alone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collision_the_record_contradicts_writes_nothing() {
    let img = harness::IMAGE;
    for (field, then, now, says) in [
        (
            "args",
            json!(["--v1"]),
            json!(["--v2"]),
            "created with args [\"--v1\"], and the spec now says [\"--v2\"]",
        ),
        (
            "env",
            json!([{"name":"MODE","value":"old"}]),
            json!([{"name":"MODE","value":"new"}]),
            "created with env \"MODE=old\", and the spec now says \"MODE=new\"",
        ),
        // The escalation a masked change would hide: the manifest now asks for a privileged
        // container, and the one that runs is not.
        (
            "securityContext",
            json!({}),
            json!({"privileged":true}),
            "created with securityContext.privileged false, and the spec now says true",
        ),
        (
            "securityContext",
            json!({"readOnlyRootFilesystem":true}),
            json!({"readOnlyRootFilesystem":false}),
            "created with securityContext.readOnlyRootFilesystem true, and the spec now says false",
        ),
        (
            "securityContext",
            json!({"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}),
            json!({"allowPrivilegeEscalation":true,"capabilities":{"drop":["ALL"]}}),
            "created with securityContext.allowPrivilegeEscalation false (no_new_privs true), and the spec now says true",
        ),
        (
            "securityContext",
            json!({"capabilities":{"drop":["ALL"]}}),
            json!({"capabilities":{"add":["SYS_ADMIN"],"drop":["ALL"]}}),
            "created with securityContext.capabilities.add [], and the spec now says [\"SYS_ADMIN\"]",
        ),
        (
            "securityContext",
            json!({"capabilities":{"drop":["ALL"]}}),
            json!({}),
            "created with securityContext.capabilities.drop [\"ALL\"], and the spec now says []",
        ),
        // Root where it ran as a user, a group, and seccomp lifted: what no hash from 1.31 sees.
        (
            "securityContext",
            json!({"runAsUser":1000}),
            json!({"runAsUser":0}),
            "created with securityContext.runAsUser 1000, and the spec now says 0",
        ),
        (
            "securityContext",
            json!({"runAsUser":1000,"runAsGroup":1000}),
            json!({"runAsUser":1000,"runAsGroup":0}),
            "created with securityContext.runAsGroup 1000, and the spec now says 0",
        ),
        (
            "securityContext",
            json!({"seccompProfile":{"type":"RuntimeDefault"}}),
            json!({"seccompProfile":{"type":"Unconfined"}}),
            "created with securityContext.seccompProfile RuntimeDefault, and the spec now says Unconfined",
        ),
    ] {
        let then = json!({"name":"app","image":img, field: then});
        let now = json!({"name":"app","image":img, field: now});
        let ctrd = Containerd::start();
        let (id, pods_file) = harness::collided_pod(&ctrd, "1.30", &then, &now).await;
        let sc = Scenario {
            ctrd,
            pods_file,
            ids: vec![id],
        };
        let before = extensions(&sc.ctrd.endpoint(), &sc.ids).await;
        let detail = left_alone_as(&sc, "will-restart", field);
        assert!(detail.contains(says), "{field}: {detail}");
        assert_eq!(extensions(&sc.ctrd.endpoint(), &sc.ids).await, before);
    }
}

/// 2b. A pods input holding a stale listing of a pod beside the current one (two dumps in one
///    directory, or concatenated): the container, made from the stale spec, proved against it and
///    its hash was rewritten, masking the change the current spec makes (kubelet 1.31 hashes only
///    name and image, so an args change is then never applied). Whichever listing comes last,
///    nothing is written (a directory of the two dumps is read the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_listing_beside_the_current_one_writes_nothing() {
    let img = harness::IMAGE;
    let then = json!({"name":"app","image":img,"args":["--v1"]});
    let now = json!({"name":"app","image":img,"args":["--v2"]});
    let sc = scenario("1.30", &[(then.clone(), now.clone())]).await;
    let before = extensions(&sc.ctrd.endpoint(), &sc.ids).await;
    let stale = harness::pod_json("shop", "web-1", "uid-web-1", &[then]);
    let current = harness::pod_json("shop", "web-1", "uid-web-1", &[now]);
    for (name, listings) in [
        ("stale last", [&current, &stale]),
        ("stale first", [&stale, &current]),
    ] {
        // Two `kubectl get pods -o json` dumps, one after the other in the one file.
        let dumps: Vec<String> = listings
            .iter()
            .map(|pod| json!({"kind":"List","items":[pod]}).to_string())
            .collect();
        std::fs::write(&sc.pods_file, dumps.join("\n")).unwrap();
        let detail = left_alone_as(&sc, "error", name);
        assert!(detail.contains("two different specs"), "{name}: {detail}");
        assert_eq!(
            extensions(&sc.ctrd.endpoint(), &sc.ids).await,
            before,
            "{name}"
        );
    }
}

/// A node where kubelet 1.30 made two current containers, and kubehash rewrote them for 1.31.
async fn applied() -> (Scenario, Vec<Vec<u8>>, PathBuf) {
    let specs: Vec<(Value, Value)> = ["a", "b"]
        .iter()
        .map(|n| {
            let c = json!({"name":n,"image":harness::IMAGE,"args":[format!("--{n}")]});
            (c.clone(), c)
        })
        .collect();
    let sc = scenario("1.30", &specs).await;
    let originals = extensions(&sc.ctrd.endpoint(), &sc.ids).await;
    let out = apply(&sc, &["--from", "1.30", "--to", "1.31"]);
    assert_eq!(
        results(&out),
        vec![("rewrite".to_string(), "written".to_string()); 2]
    );
    let journal = sc.ctrd.dir.join("journals/1.30-to-1.31.jsonl");
    assert!(journal.exists());
    (sc, originals, journal)
}

fn rollback(sc: &Scenario, journal: Option<&Path>) -> Output {
    rollback_with(sc, journal, &[])
}

fn rollback_with(sc: &Scenario, journal: Option<&Path>, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(rollback_args(sc, journal, extra))
        .output()
        .unwrap()
}

/// The arguments of `kubehash node rollback` on the scenario's node.
fn rollback_args(sc: &Scenario, journal: Option<&Path>, extra: &[&str]) -> Vec<String> {
    let ep = sc.ctrd.endpoint();
    let dir = s(&sc.ctrd.dir.join("journals"));
    let mut args = vec![
        "node".to_string(),
        "rollback".into(),
        "--containerd".into(),
        ep.clone(),
        "--cri".into(),
        ep,
        "--journal-dir".into(),
        dir,
    ];
    if let Some(j) = journal {
        args.extend(["--journal".into(), s(j)]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// 3. Rollback trusted the journal: an "original" that differs from the current record in more
///    than the hash annotations was written back and reported restored; one corrupted base64
///    character made rollback skip that record silently and exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_refuses_forged_and_corrupt_journals() {
    let (sc, originals, journal) = applied().await;
    let ep = sc.ctrd.endpoint();
    let written = extensions(&ep, &sc.ids).await;
    let genuine = std::fs::read_to_string(&journal).unwrap();
    let id = &sc.ids[0];
    let orig = String::from_utf8(originals[0].clone()).unwrap();
    let meta = parse_metadata(orig.as_bytes(), id).unwrap();
    let name = meta["Metadata"]["Name"].as_str().unwrap().to_string();
    let image = meta["Metadata"]["Config"]["image"]["image"]
        .as_str()
        .unwrap()
        .to_string();

    let forgeries: Vec<(&str, String)> = vec![
        ("another image", orig.replace(&image, "evil.example/app:1")),
        ("another name", orig.replace(&name, "other_name")),
        (
            "a skeleton record",
            json!({"Version":"v1","Metadata":{"ID":id,"Name":name,"SandboxID":meta["Metadata"]["SandboxID"],
                "Config":{"annotations":{"io.kubernetes.container.hash":stored_hashes(&meta).0}}}})
            .to_string(),
        ),
    ];
    // The journal line of this container's write (CRI lists containers in no fixed order).
    let line = 1 + genuine
        .lines()
        .position(|l| l.contains(&b64(orig.as_bytes())))
        .unwrap();
    for (what, forged) in forgeries {
        std::fs::write(
            &journal,
            genuine.replace(&b64(orig.as_bytes()), &b64(forged.as_bytes())),
        )
        .unwrap();
        let out = rollback(&sc, Some(&journal));
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(err.contains(&format!("line {line}:")), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert_eq!(
            extensions(&ep, &sc.ids).await,
            written,
            "{what}: nothing written"
        );
    }

    // One corrupted base64 character: an error naming the line, nothing written.
    let at = genuine.find("\"old_value\":\"").unwrap() + 30;
    let mut corrupt = genuine.clone();
    corrupt.replace_range(at..at + 1, "!");
    std::fs::write(&journal, corrupt).unwrap();
    let out = rollback(&sc, Some(&journal));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("line 2: old_value: bad base64"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(extensions(&ep, &sc.ids).await, written);

    // A file that is not a journal.
    let junk = sc.ctrd.dir.join("junk.jsonl");
    std::fs::write(&junk, "{\"hello\":1}\n").unwrap();
    let out = rollback(&sc, Some(&junk));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not a kubehash journal"),
        "{}",
        text(&out.stderr)
    );

    // The genuine journal still restores every byte, each original proved against the spec
    // apply journaled with it.
    std::fs::write(&journal, &genuine).unwrap();
    let out = rollback(&sc, Some(&journal));
    restored_every_byte(&sc, &out, &originals).await;
}

/// What a rollback that refused the first container's forged original leaves: exit 2, `why` in
/// its report, the first container as written and the second one restored.
async fn left_as_written(
    sc: &Scenario,
    out: &Output,
    what: &str,
    why: &str,
    written: &[Vec<u8>],
    originals: &[Vec<u8>],
) {
    let report = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: {report}{}",
        text(&out.stderr)
    );
    assert!(report.contains(why), "{what}: {report}");
    let now = extensions(&sc.ctrd.endpoint(), &sc.ids).await;
    assert_eq!(
        now[0], written[0],
        "{what}: the forged original is not written"
    );
    assert_eq!(
        now[1], originals[1],
        "{what}: the other container is restored"
    );
}

/// What a rollback that restored everything leaves: success, and every record byte for byte as
/// it was before apply.
async fn restored_every_byte(sc: &Scenario, out: &Output, originals: &[Vec<u8>]) {
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(extensions(&sc.ctrd.endpoint(), &sc.ids).await, originals);
}

/// The journal with each line of container `id`'s write edited by `edit` (as JSON).
fn edit_write(journal: &str, id: &str, edit: impl Fn(&mut Value)) -> String {
    journal
        .lines()
        .map(|l| {
            let mut r: Value = serde_json::from_str(l).unwrap();
            if r["kind"] == "write" && r["container_id"] == id {
                edit(&mut r);
            }
            r.to_string() + "\n"
        })
        .collect()
}

/// Without the pods, rollback had only the journal and the record: an original whose hash was
/// forged (or corrupted into another valid hash) was written back, and kubelet 1.30 would then
/// take the container for a spec it never ran. Apply now journals the spec it proved each write
/// against, and rollback proves the original against it as strictly as apply did: kubelet 1.31's
/// hash of that spec must be the hash in the record (which the journal does not hold), 1.30's the
/// original's.
///
/// Tried here: a forged original hash (and its `old_hash`), the journaled spec alone changed
/// (another image), both forged together to agree with each other, and the spec stripped (the
/// older format); each leaves the record as written, exit 2, and the other container restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_without_the_pods_proves_originals_against_the_journaled_specs() {
    let (sc, originals, journal) = applied().await;
    let ep = sc.ctrd.endpoint();
    let genuine = std::fs::read_to_string(&journal).unwrap();
    let written = extensions(&ep, &sc.ids).await;
    let id = sc.ids[0].clone();
    let orig = String::from_utf8(originals[0].clone()).unwrap();
    let stored = stored_hashes(&parse_metadata(orig.as_bytes(), &id).unwrap())
        .0
        .unwrap();
    let forge_original = |r: &mut Value, hash: &str| {
        let forged = orig.replace(&stored, hash);
        assert_ne!(forged, orig);
        r["old_value"] = json!(b64(forged.as_bytes()));
        r["old_hash"] = json!(hash);
    };
    let spec: Value = serde_json::from_str::<Value>(
        genuine
            .lines()
            .find(|l| l.contains(&id) && l.contains("\"kind\":\"write\""))
            .unwrap(),
    )
    .unwrap()["spec"]
        .clone();
    assert!(spec.is_object(), "apply journals the spec: {genuine}");
    let mut updated = spec.clone();
    updated["image"] = json!("registry.example/app:2");
    let masking = hash(&updated, "1.30");
    // Changed where kubelet 1.31 does not hash: only the record shows it.
    let mut new_args = spec.clone();
    new_args["args"] = json!(["--changed"]);
    let masking_args = hash(&new_args, "1.30");
    let cases = [
        (
            "a forged original hash",
            edit_write(&genuine, &id, |r| forge_original(r, "0badc0de")),
            "not the journaled original's",
        ),
        (
            "the journaled spec changed",
            edit_write(&genuine, &id, |r| r["spec"] = updated.clone()),
            "the journal does not hold the spec apply wrote from",
        ),
        (
            "the original and the spec forged to agree",
            edit_write(&genuine, &id, |r| {
                forge_original(r, &masking);
                r["spec"] = updated.clone();
            }),
            "the journal does not hold the spec apply wrote from",
        ),
        (
            "the original and the spec forged to agree on new args",
            edit_write(&genuine, &id, |r| {
                forge_original(r, &masking_args);
                r["spec"] = new_args.clone();
            }),
            "created with args [\"--a\"], and the spec now says [\"--changed\"]",
        ),
    ];
    for (what, forged, why) in cases {
        std::fs::write(&journal, &forged).unwrap();
        assert!(
            kubehash::rewrite::journal::read(&journal).is_ok(),
            "{what}: it validates"
        );
        let out = rollback(&sc, Some(&journal));
        left_as_written(&sc, &out, what, why, &written, &originals).await;
        // Written again for the next case, as apply wrote it.
        let store = Store::connect(&ep).await.unwrap();
        store
            .replace(&sc.ids[1], &originals[1], &written[1])
            .await
            .unwrap();
    }

    // A write journaled without its spec (kubehash before 2026-11-28, or the spec stripped to
    // get past the proof): never restored on the values' word alone. Given the pods, it is
    // proved against them and restored.
    let stripped = edit_write(&genuine, &id, |r| {
        r.as_object_mut().unwrap().remove("spec");
    });
    std::fs::write(&journal, &stripped).unwrap();
    let out = rollback(&sc, Some(&journal));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("holds no spec"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(extensions(&ep, &sc.ids).await[0], written[0]);
    std::fs::write(&journal, &stripped).unwrap();
    let out = rollback_with(&sc, Some(&journal), &["-i", &s(&sc.pods_file)]);
    restored_every_byte(&sc, &out, &originals).await;
}

/// A journal whose original holds a hash the forger chose passes every check the journal and the
/// record allow: the two values still differ in the hash annotations alone. The one such hash
/// that masks a spec change is the old kubelet's hash of a *new* spec (an image updated while
/// the kubelet was down): restored, the old kubelet takes the running container for the new
/// spec. Given the pods, rollback proves each original against its container's spec, as apply
/// proved it: kubelet TO's hash of the spec must be the written hash, FROM's the original's.
/// Tried here: a forged original hash, and the old kubelet's hash of an updated spec put in the
/// original, with the pods as they were and with the updated spec (the masking attack), and the
/// genuine journal after the spec changed; each leaves the record as written, exit 2. The
/// genuine journal with unchanged pods restores every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_with_the_pods_restores_only_originals_proved_against_them() {
    let (sc, originals, journal) = applied().await;
    let ep = sc.ctrd.endpoint();
    let genuine = std::fs::read_to_string(&journal).unwrap();
    let written = extensions(&ep, &sc.ids).await;
    let pods = s(&sc.pods_file);
    let orig = String::from_utf8(originals[0].clone()).unwrap();
    let meta = parse_metadata(orig.as_bytes(), &sc.ids[0]).unwrap();
    let stored = stored_hashes(&meta).0.unwrap();
    // The spec of this container as the pods file has it, with its image updated.
    let list: Value = serde_json::from_slice(&std::fs::read(&sc.pods_file).unwrap()).unwrap();
    let name = meta["Metadata"]["Config"]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let original_spec = list["items"][0]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name.as_str())
        .unwrap()
        .clone();
    let mut updated = original_spec.clone();
    updated["image"] = json!("registry.example/app:2");
    // The pods file with this container's spec replaced by `spec`.
    let pods_with = |spec: &Value, file: &str| {
        let mut changed = list.clone();
        for c in changed["items"][0]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
        {
            if c["name"] == name.as_str() {
                *c = spec.clone();
            }
        }
        let path = sc.ctrd.dir.join(file);
        std::fs::write(&path, changed.to_string()).unwrap();
        s(&path)
    };
    let forge = |hash: &str| {
        let forged = orig.replace(&stored, hash);
        assert_ne!(forged, orig);
        genuine
            .replace(&b64(orig.as_bytes()), &b64(forged.as_bytes()))
            .replace(
                &format!("\"old_hash\":\"{stored}\""),
                &format!("\"old_hash\":\"{hash}\""),
            )
    };
    let masking = hash(&updated, "1.30");
    for (what, forged) in [
        ("a chosen hash", forge("0badc0de")),
        ("the old kubelet's hash of an updated spec", forge(&masking)),
    ] {
        std::fs::write(&journal, &forged).unwrap();
        // The journal alone cannot tell: it validates.
        assert!(kubehash::rewrite::journal::read(&journal).is_ok(), "{what}");
        let out = rollback_with(&sc, Some(&journal), &["-i", &pods]);
        left_as_written(
            &sc,
            &out,
            what,
            "not the journaled original's",
            &written,
            &originals,
        )
        .await;
    }

    // After the spec changed since apply (its image updated while the kubelet was down), the
    // written hash is no longer kubelet 1.31's hash of the spec: nothing is restored, and kubelet
    // 1.30, back, restarts the container for its new spec, as it should. Tried with the genuine
    // journal, and with the attack itself: the forged original holds kubelet 1.30's hash of the
    // updated spec, so it matches the pods given; the written hash does not.
    let changed_file = pods_with(&updated, "changed-pods.json");
    for (what, journal_text) in [
        ("the genuine journal", genuine.clone()),
        (
            "the old kubelet's hash of the updated spec",
            forge(&masking),
        ),
    ] {
        std::fs::write(&journal, &journal_text).unwrap();
        let out = rollback_with(&sc, Some(&journal), &["-i", &changed_file]);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", text(&out.stdout));
        assert!(
            text(&out.stdout).contains("the spec changed since apply"),
            "{what}: {}",
            text(&out.stdout)
        );
        assert_eq!(extensions(&ep, &sc.ids).await[0], written[0], "{what}");
    }

    // The spec's args changed since apply (as a static pod's manifest can be edited), where
    // kubelet 1.31 does not hash, and the forged original holds kubelet 1.30's hash of the new
    // spec: both hashes prove it against the pods, and restored it would have kubelet 1.30 take
    // the container for the new args. The record says what the container was created with.
    let mut spec_now = original_spec.clone();
    spec_now["args"] = json!(["--changed"]);
    let new_args_file = pods_with(&spec_now, "new-args-pods.json");
    std::fs::write(&journal, forge(&hash(&spec_now, "1.30"))).unwrap();
    let out = rollback_with(&sc, Some(&journal), &["-i", &new_args_file]);
    left_as_written(
        &sc,
        &out,
        "the old kubelet's hash of a spec whose args changed",
        &format!("created with args [\"--{name}\"], and the spec now says [\"--changed\"]"),
        &written,
        &originals,
    )
    .await;
    std::fs::write(&journal, &genuine).unwrap();

    // The genuine journal with the pods as they are: every byte restored.
    let out = rollback_with(&sc, Some(&journal), &["-i", &pods]);
    restored_every_byte(&sc, &out, &originals).await;
}

/// A forged pair that passes the line checks (both values consistent with each other) but names
/// a value the record does not hold is skipped, never written: rollback is compare-and-swap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_is_compare_and_swap_against_the_written_value() {
    let (sc, originals, journal) = applied().await;
    let ep = sc.ctrd.endpoint();
    let genuine = std::fs::read_to_string(&journal).unwrap();
    let written = extensions(&ep, &sc.ids).await;
    // Replace both values with a consistent pair for another image.
    let orig = String::from_utf8(originals[0].clone()).unwrap();
    let new = String::from_utf8(written[0].clone()).unwrap();
    let image = harness::IMAGE;
    let forged = genuine
        .replace(
            &b64(orig.as_bytes()),
            &b64(orig.replace(image, "evil/app:1").as_bytes()),
        )
        .replace(
            &b64(new.as_bytes()),
            &b64(new.replace(image, "evil/app:1").as_bytes()),
        );
    std::fs::write(&journal, forged).unwrap();
    let out = rollback(&sc, Some(&journal));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("record changed since kubehash wrote it"));
    let now = extensions(&ep, &sc.ids).await;
    assert_eq!(now[0], written[0], "the forged container is untouched");
    assert_eq!(now[1], originals[1], "the genuine one is restored");
}

fn wait_for_lines(path: &Path, needle: &str, n: usize) -> bool {
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if std::fs::read_to_string(path)
            .map(|t| t.matches(needle).count() >= n)
            .unwrap_or(false)
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// 4. Every apply started a new journal, and verify/rollback without --journal read only the
///    newest: after an interrupted apply and a re-run, rollback restored half and said "3 of 3";
///    after an idempotent re-run, verify said "0 of 0" and exited 0. A torn last line glued the
///    next run's first record to it, and the whole journal was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_journal_covers_the_whole_upgrade() {
    let specs = unchanged(4);
    let mut sc = scenario("1.30", &specs).await;
    let ep = sc.ctrd.endpoint();
    let originals = extensions(&ep, &sc.ids).await;
    let journal = sc.ctrd.dir.join("journals/1.30-to-1.31.jsonl");
    let dir = s(&sc.ctrd.dir.join("journals"));
    let upgrade = ["--from", "1.30", "--to", "1.31"];

    // Killed (SIGKILL) after two of four writes, in the middle of the next append.
    let mut child = apply_command(&sc, &upgrade)
        .env("KUBEHASH_TEST_PAUSE_AFTER_WRITE_MS", "1500")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_lines(&journal, "\"kind\":\"written\"", 2));
    child.kill().unwrap();
    let _ = child.wait();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"kind\":\"write\",\"at_unix\":17"))
        .unwrap();

    // The re-run continues the same journal, sets the torn line aside and finishes.
    let again = apply(&sc, &upgrade);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let r = results(&again);
    assert_eq!(r.iter().filter(|(_, x)| x == "written").count(), 2, "{r:?}");
    assert!(sc
        .ctrd
        .dir
        .join("journals/1.30-to-1.31.jsonl.torn")
        .exists());
    // And once more: idempotent, nothing written.
    let third = apply(&sc, &upgrade);
    assert!(results(&third).iter().all(|(_, x)| x != "written"));
    let files: Vec<_> = std::fs::read_dir(sc.ctrd.dir.join("journals"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "one journal for the upgrade");

    // verify without --journal covers all four writes.
    sc.ctrd.restart();
    let verify = kubehash(&[
        "node",
        "verify",
        "--cri",
        &ep,
        "--containerd",
        &ep,
        "--journal-dir",
        &dir,
    ]);
    let out = text(&verify.stdout);
    assert!(verify.status.success(), "{out}{}", text(&verify.stderr));
    assert!(
        out.contains("Summary: 4 of 4 containers verified."),
        "{out}"
    );

    // rollback without --journal restores all four, byte for byte.
    let rb = rollback(&sc, None);
    let out = text(&rb.stdout);
    assert!(rb.status.success(), "{out}{}", text(&rb.stderr));
    assert!(out.contains("Summary: 4 of 4"), "{out}");
    assert_eq!(extensions(&ep, &sc.ids).await, originals);
}

/// 6. A kubelet binary named `kubelet-1.30`, or one in another PID namespace (seen only through
///    its healthz port), was not detected; rollback did not check for a running kubelet at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_kubelet_is_found_by_name_prefix_and_by_its_healthz_port() {
    let (sc, _, journal) = applied().await;
    let ep = sc.ctrd.endpoint();
    let written = extensions(&ep, &sc.ids).await;

    // A process named kubelet-1.30, seen by this rollback only (its own PID namespace).
    let args = rollback_args(&sc, Some(&journal), &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = harness::kubehash_beside_process("kubelet-1.30", &sc.ctrd.dir, &args);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("process kubelet-1.30"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(extensions(&ep, &sc.ids).await, written);

    // Nothing by that name, but something listening on the kubelet's healthz address.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let healthz = format!("http://{}/healthz", listener.local_addr().unwrap());
    let base = [
        "node",
        "rollback",
        "--containerd",
        &ep,
        "--journal",
        &s(&journal),
        "--kubelet-healthz",
        &healthz,
    ];
    let out = kubehash(&base);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("healthz address"),
        "{}",
        text(&out.stderr)
    );
    let pods = s(&sc.pods_file);
    let out = kubehash(&[
        "node",
        "apply",
        "--cri",
        &ep,
        "--containerd",
        &ep,
        "-i",
        &pods,
        "--from",
        "1.30",
        "--to",
        "1.31",
        "--journal",
        &s(&journal),
        "--kubelet-healthz",
        &healthz,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(extensions(&ep, &sc.ids).await, written);

    // --force overrides, and the listener going away lets rollback run.
    let mut forced = base.to_vec();
    forced.push("--force");
    assert!(kubehash(&forced).status.success());
    drop(listener);
}

/// 7. apply checked the gate before planning and then wrote its first record on that check;
///    recording the running containers for the audit now comes in between, so a kubelet that
///    starts meanwhile must stop apply before any write (the gate is asked again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_starting_while_apply_records_for_the_audit_stops_the_first_write() {
    let web = json!({"name": "web", "image": "i:1"});
    let sc = scenario("1.30", &[(web.clone(), web)]).await;
    let ep = sc.ctrd.endpoint();
    let originals = extensions(&ep, &sc.ids).await;
    // The kubelet's healthz address, free for now: no kubelet runs when apply starts.
    let port = harness::free_port();
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    let apply = apply_command(
        &sc,
        &[
            "--from",
            "1.30",
            "--to",
            "1.31",
            "--kubelet-healthz",
            &healthz,
        ],
    )
    .env("KUBEHASH_TEST_PAUSE_AFTER_RECORD_MS", "3000")
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let before = sc.ctrd.dir.join("journals/1.30-to-1.31.before.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !before.exists() {
        assert!(std::time::Instant::now() < deadline, "apply never recorded");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The kubelet starts while apply pauses after recording.
    let kubelet = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let out = apply.wait_with_output().unwrap();
    drop(kubelet);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        results(&out),
        vec![("rewrite".to_string(), "stopped".to_string())],
        "{}",
        text(&out.stdout)
    );
    assert_eq!(extensions(&ep, &sc.ids).await, originals, "nothing written");
}

/// 8. Two writers on one journal (an operator's `node apply` or `node rollback` while another,
///    or the agent, runs on the same node: they share `/var/lib/kubehash/journal`) appended
///    and cut "torn" tails on the assumption that nobody else did. A rollback then read the
///    journal while apply went on writing, restored what it had read, and called that
///    complete; a torn-tail cut could drop the other's write record. A second writer now
///    refuses (exit 1, one line) and writes nothing; once the first has finished, rollback
///    restores every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_per_journal() {
    let specs = unchanged(3);
    let sc = scenario("1.30", &specs).await;
    let ep = sc.ctrd.endpoint();
    let originals = extensions(&ep, &sc.ids).await;
    let journal = sc.ctrd.dir.join("journals/1.30-to-1.31.jsonl");
    let upgrade = ["--from", "1.30", "--to", "1.31"];
    // Each refusal waits 2 s for the lock (a process killed a moment ago may still hold it):
    // the first apply pauses long enough after each write to outlast both.
    let first = apply_command(&sc, &upgrade)
        .env("KUBEHASH_TEST_PAUSE_AFTER_WRITE_MS", "4000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for_lines(&journal, "\"kind\":\"written\"", 1));
    let lines = || std::fs::read_to_string(&journal).unwrap().lines().count();
    let refused = |out: Output, what: &str| {
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(
            err.contains("another kubehash process") && err.contains("1.30-to-1.31.jsonl"),
            "{what}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
    };
    let seen = lines();
    refused(rollback(&sc, None), "rollback");
    refused(apply(&sc, &upgrade), "a second apply");
    assert!(lines() >= seen, "the refused wrote nothing and cut nothing");
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let journaled = std::fs::read_to_string(&journal).unwrap();
    assert!(!journaled.contains("\"kind\":\"rollback\""), "{journaled}");
    assert_eq!(
        journaled.matches("\"kind\":\"begin\"").count(),
        1,
        "{journaled}"
    );

    // The first has finished: rollback restores every byte.
    let rb = rollback(&sc, None);
    assert!(rb.status.success(), "{}", text(&rb.stderr));
    assert_eq!(
        extensions(&ep, &sc.ids).await,
        originals,
        "every byte restored"
    );
}
