//! `kubehash audit` end to end on a real containerd (tests/harness): a snapshot before a
//! simulated upgrade (containerd restarted, as the node procedure does), a compare after it, and
//! a container replaced in between.

mod harness;

use harness::{hash, kubehash, restart_in_shop_pod, text, Containerd, KubeletCalls};
use kubehash::runtime::cri::Cri;
use serde_json::{json, Value};

fn compare(ep: &str, snapshot: &str, plan: &str) -> (Option<i32>, Value) {
    let out = kubehash(&[
        "audit",
        "compare",
        "--cri",
        ep,
        "--snapshot",
        snapshot,
        "--plan",
        plan,
        "-o",
        "json",
    ]);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(
        harness::audit_report_schema_errors(&v),
        Vec::<String>::new()
    );
    (out.status.code(), v)
}

/// `audit compare -o json` found both containers of the shop pod kept, as the plan `by` made
/// predicted (both `rewrite`): exit 0, a report that meets the schema.
fn both_kept_as_planned(out: &std::process::Output, by: &str) {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        harness::audit_report_schema_errors(&report),
        Vec::<String>::new()
    );
    assert_eq!(
        report["counts"],
        json!({"kept": 2, "restarted": 0, "recreated": 0, "gone": 0})
    );
    assert!(
        report["containers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["predicted"] == "rewrite" && c["as_predicted"] == true),
        "{by}'s plan is used: {report}"
    );
}

/// A real containerd running pod `shop/web-1` as kubelet 1.30 created it, one container per spec,
/// none changed since. Returns containerd, the container ids and the pods file.
async fn made_by_1_30(specs: &[Value]) -> (Containerd, Vec<String>, std::path::PathBuf) {
    let ctrd = Containerd::start();
    let stored: Vec<(Value, String)> = specs.iter().map(|s| (s.clone(), hash(s, "1.30"))).collect();
    let (ids, pods_file) = harness::shop_pod(&ctrd, "1.30", &stored).await;
    (ctrd, ids, pods_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_containers_report_no_restart_and_a_replaced_one_is_caught() {
    let specs = [
        json!({"name": "web", "image": "i:1"}),
        json!({"name": "log", "image": "i:1"}),
    ];
    let (mut ctrd, ids, pods_file) = made_by_1_30(&specs).await;
    let ep = ctrd.endpoint();
    let dir = ctrd.dir.clone();
    let (snapshot, plan) = (dir.join("before.json"), dir.join("plan.json"));
    let planned = kubehash(&[
        "node",
        "plan",
        "--to",
        "1.31",
        "--from",
        "1.30",
        "--cri",
        &ep,
        "-i",
        &pods_file.display().to_string(),
        "-o",
        "json",
    ]);
    assert!(planned.status.success(), "{}", text(&planned.stderr));
    std::fs::write(&plan, &planned.stdout).unwrap();
    let snap = kubehash(&[
        "audit",
        "snapshot",
        "--cri",
        &ep,
        "--out",
        &snapshot.display().to_string(),
    ]);
    assert!(snap.status.success(), "{}", text(&snap.stderr));
    let recorded: Value = serde_json::from_slice(&std::fs::read(&snapshot).unwrap()).unwrap();
    assert_eq!(recorded["kind"], "AuditSnapshot");
    assert_eq!(recorded["containers"].as_array().unwrap().len(), 2);

    // The simulated upgrade: containerd restarts; the containers keep running.
    ctrd.restart();
    let (s, p) = (snapshot.display().to_string(), plan.display().to_string());
    let (code, report) = compare(&ep, &s, &p);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["kind"], "AuditReport");
    assert_eq!(
        report["counts"],
        json!({"kept": 2, "restarted": 0, "recreated": 0, "gone": 0})
    );
    assert_eq!(
        report["mispredicted"], 0,
        "both were planned as rewrite: kept, as predicted"
    );
    assert!(report["containers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["as_predicted"] == true));

    // One container is replaced by another instance in the same pod.
    let mut cri = Cri::connect(&ep).await.unwrap();
    let again = restart_in_shop_pod(&mut cri, &ctrd, &ids[0], &specs[0], "web-1-again").await;
    let (code, report) = compare(&ep, &s, &p);
    assert_eq!(code, Some(3), "{report}");
    assert_eq!(report["counts"]["restarted"], 1, "{report}");
    let web = report["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["container"] == "web")
        .unwrap();
    assert_eq!(web["fate"], "restarted");
    assert_eq!(web["now"], again.as_str());
    assert_eq!(web["ended"], "removed from the runtime");
    assert_eq!(
        web["as_predicted"], false,
        "kubehash predicted it kept: the audit says so"
    );
    assert_eq!(report["mispredicted"], 1);
}

/// A container that ran before and runs no more, with nothing in its place (the new kubelet
/// killed it and could not start another): no proof of a restart-free upgrade, so exit 3, as
/// for a restart, with the container `gone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_gone_is_no_all_clear() {
    let specs = [
        json!({"name": "web", "image": "i:1"}),
        json!({"name": "log", "image": "i:1"}),
    ];
    let (ctrd, ids, _) = made_by_1_30(&specs).await;
    let ep = ctrd.endpoint();
    let snapshot = ctrd.dir.join("before.json").display().to_string();
    let snap = kubehash(&["audit", "snapshot", "--cri", &ep, "--out", &snapshot]);
    assert!(snap.status.success(), "{}", text(&snap.stderr));
    let mut cri = Cri::connect(&ep).await.unwrap();
    cri.stop_container(&ids[1], 0).await.unwrap();
    let out = kubehash(&[
        "audit",
        "compare",
        "--cri",
        &ep,
        "--snapshot",
        &snapshot,
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(3), "{report}");
    assert_eq!(
        report["counts"],
        json!({"kept": 1, "restarted": 0, "recreated": 0, "gone": 1})
    );
    assert_eq!(
        harness::audit_report_schema_errors(&report),
        Vec::<String>::new()
    );
    let log = report["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["container"] == "log")
        .unwrap();
    let ended = log["ended"].as_str().unwrap_or_default();
    assert!(ended.starts_with("exited with code "), "{log}");
    assert!(ended.contains(" at 20"), "the time it ended: {log}");
    // The table says it too; a kept container ended nothing.
    let table = kubehash(&["audit", "compare", "--cri", &ep, "--snapshot", &snapshot]);
    let rows = text(&table.stdout);
    assert!(rows.contains(ended), "{rows}");
    assert!(
        rows.lines()
            .any(|l| l.contains(" web ") && l.trim_end().ends_with(" -")),
        "{rows}"
    );
}

/// `node apply` records, beside its journal, what ran when it began and its plan, so that after
/// the upgrade `kubehash audit compare` needs no snapshot of the operator's own: the latest
/// journal's are found and used. A journal without them is one clear line, exit 1.
/// The shop pod's two containers as kubelet 1.30 made them on a real containerd, and the
/// `node apply` 1.30 → 1.31 of them, with its journals in `journals`.
struct ToApply {
    ctrd: Containerd,
    ids: Vec<String>,
    specs: [Value; 2],
    journals: std::path::PathBuf,
    /// The arguments of `node apply`.
    apply: Vec<String>,
}

impl ToApply {
    async fn new() -> Self {
        let specs = [
            json!({"name": "web", "image": "i:1"}),
            json!({"name": "log", "image": "i:1", "args": ["--to=stdout"]}),
        ];
        let (ctrd, ids, pods_file) = made_by_1_30(&specs).await;
        let ep = ctrd.endpoint();
        let journals = ctrd.dir.join("journals");
        let apply = [
            "node",
            "apply",
            "--to",
            "1.31",
            "--from",
            "1.30",
            "--cri",
            &ep,
            "--containerd",
            &ep,
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            "-i".into(),
            pods_file.display().to_string(),
            "--journal-dir".into(),
            journals.display().to_string(),
        ])
        .collect();
        ToApply {
            ctrd,
            ids,
            specs,
            journals,
            apply,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_records_what_audit_compare_needs() {
    let ToApply {
        mut ctrd,
        ids,
        specs,
        journals,
        apply,
    } = ToApply::new().await;
    let apply: Vec<&str> = apply.iter().map(String::as_str).collect();
    let applied = kubehash(&[&apply[..], &["-o", "json"]].concat());
    let ep = ctrd.endpoint();
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let before: Value =
        serde_json::from_slice(&std::fs::read(journals.join("1.30-to-1.31.before.json")).unwrap())
            .unwrap();
    assert_eq!(before["kind"], "AuditSnapshot");
    assert_eq!(before["containers"].as_array().unwrap().len(), 2);

    // The upgrade: containerd restarts (the new kubelet keeps both).
    ctrd.restart();
    let journal_dir = journals.display().to_string();
    let audit = |extra: &[&str]| {
        let mut args = vec!["audit", "compare", "--cri", &ep, "-o", "json"];
        args.extend_from_slice(extra);
        kubehash(&args)
    };
    let out = audit(&["--journal-dir", &journal_dir]);
    both_kept_as_planned(&out, "apply");

    // One of them restarted after all: exit 3, and not as predicted.
    let mut cri = Cri::connect(&ep).await.unwrap();
    restart_in_shop_pod(&mut cri, &ctrd, &ids[1], &specs[1], "web-1-again").await;
    let journal = journals.join("1.30-to-1.31.jsonl").display().to_string();
    let out = audit(&["--journal", &journal]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        harness::audit_report_schema_errors(&report),
        Vec::<String>::new()
    );
    assert_eq!(report["counts"]["restarted"], 1, "{report}");
    assert_eq!(report["mispredicted"], 1, "{report}");

    // The upgrade is rolled back (the old kubelet will run): apply's plan was for kubelet 1.31,
    // so the audit of that journal gives fates without predictions, and says why.
    let rb = kubehash(&[
        "node",
        "rollback",
        "--containerd",
        &ep,
        "--journal",
        &journal,
    ]);
    assert_ne!(rb.status.code(), Some(1), "{}", text(&rb.stderr));
    let out = audit(&["--journal", &journal]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("was rolled back after its last apply"),
        "{}",
        text(&out.stderr)
    );
    let after_rollback: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(after_rollback["counts"]["restarted"], 1, "{after_rollback}");
    assert_eq!(after_rollback["mispredicted"], 0, "{after_rollback}");
    assert!(
        after_rollback["containers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["predicted"].is_null()),
        "{after_rollback}"
    );

    // The schema is strict: an unknown key, a fate it does not know, a count below zero.
    for (pointer, bad) in [
        ("/extra", json!(1)),
        ("/containers/0/fate", json!("moved")),
        ("/counts/kept", json!(-1)),
    ] {
        let mut broken = report.clone();
        match broken.pointer_mut(pointer) {
            Some(v) => *v = bad,
            None => {
                broken["extra"] = bad;
            }
        }
        assert!(
            !harness::audit_report_schema_errors(&broken).is_empty(),
            "{pointer} broken passes the schema"
        );
    }

    // A journal with nothing beside it (an older kubehash wrote it): one line, exit 1.
    std::fs::remove_file(journals.join("1.30-to-1.31.before.json")).unwrap();
    let out = audit(&["--journal-dir", &journal_dir]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no snapshot beside it") && err.contains("--snapshot"),
        "{err}"
    );
}

/// `node apply --force` with a kubelet running makes no record for the audit, and removes an
/// earlier run's: the kubelet may be the new one, and have restarted containers already; a
/// snapshot taken then lists their replacements, and the audit would call them kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_forced_past_a_running_kubelet_records_nothing_for_the_audit() {
    let ToApply {
        mut ctrd,
        ids,
        specs,
        journals,
        apply,
    } = ToApply::new().await;
    let apply: Vec<&str> = apply.iter().map(String::as_str).collect();
    let (ep, journal_dir) = (ctrd.endpoint(), journals.display().to_string());
    let applied = kubehash(&apply);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let before = journals.join("1.30-to-1.31.before.json");
    assert!(before.exists());

    // Kubelet 1.31 starts, before containerd was restarted: it restarts `log`.
    ctrd.restart();
    let mut cri = Cri::connect(&ep).await.unwrap();
    restart_in_shop_pod(&mut cri, &ctrd, &ids[1], &specs[1], "web-1-again").await;
    // apply is run again, forced past the running kubelet.
    let forced = harness::kubehash_beside_process(
        "kubelet",
        &ctrd.dir,
        &[&apply[..], &["--force"]].concat(),
    );
    let err = text(&forced.stderr);
    assert!(forced.status.success(), "{err}");
    assert!(err.contains("no record for the audit"), "{err}");
    assert!(
        !before.exists(),
        "a record made with a kubelet running, or an old one, is left"
    );
    // The audit cannot be made from the journal: it says so, rather than calling `log` kept.
    let out = kubehash(&[
        "audit",
        "compare",
        "--cri",
        &ep,
        "--journal-dir",
        &journal_dir,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("no snapshot beside it"),
        "{}",
        text(&out.stderr)
    );
}

/// A run of `node apply` after the new kubelet has made a container (started too early, and
/// stopped again) records nothing for the audit and removes the earlier record: the container
/// carries kubelet 1.31's hash, which kubelet 1.30's is not, and the journal did not write it,
/// so the upgrade began before this run and a record would call the new instance kept. Records
/// the journal rewrote itself are no such evidence: a run after an interrupted one records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_records_nothing_once_the_new_kubelet_has_made_a_container() {
    let ToApply {
        mut ctrd,
        ids,
        specs,
        journals,
        apply,
    } = ToApply::new().await;
    let apply: Vec<&str> = apply.iter().map(String::as_str).collect();
    let ep = ctrd.endpoint();
    let before = journals.join("1.30-to-1.31.before.json");
    for run in ["first", "again"] {
        let out = kubehash(&apply);
        assert!(out.status.success(), "{run}: {}", text(&out.stderr));
        assert!(before.exists(), "{run}: {}", text(&out.stderr));
    }

    ctrd.restart();
    let mut cri = Cri::connect(&ep).await.unwrap();
    restart_in_shop_pod(&mut cri, &ctrd, &ids[1], &specs[1], "web-1-again").await;
    let out = kubehash(&apply);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!before.exists(), "{err}");
    assert!(
        err.contains("no record for the audit: container shop/web-1-again/log carries the new kubelet's hash of its spec, which kubelet 1.30's is not, and this journal did not write it"),
        "{err}"
    );
}

/// An upgrade made through `kubehash shim` writes nothing to the runtime, but the shim records,
/// when it plans before serving, what runs and its plan beside its state, so that `audit compare
/// --shim-state` needs no snapshot of the operator's own. A shim that served before it could
/// plan (pass-through while the runtime or API server was away) records nothing, and removes an
/// earlier plan's record: by the time it plans, the new kubelet may already have restarted
/// containers on untranslated hashes, and a snapshot taken then would call them kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shim_records_what_audit_compare_needs_only_before_it_serves() {
    let specs = [
        json!({"name": "web", "image": "i:1"}),
        json!({"name": "log", "image": "i:1", "args": ["--to=stdout"]}),
    ];
    let (ctrd, ids, pods_file) = made_by_1_30(&specs).await;
    let ep = ctrd.endpoint();
    let dir = ctrd.dir.clone();
    let pods = pods_file.display().to_string();
    let plan_args = ["--to", "1.31", "--from", "1.30", "-i", pods.as_str()];
    let (mut shim, _) = harness::start_shim(&dir, &ep, &plan_args);
    let (before, plan) = (
        dir.join("shim-state.before.json"),
        dir.join("shim-state.plan.json"),
    );
    let recorded: Value = serde_json::from_slice(&std::fs::read(&before).unwrap()).unwrap();
    assert_eq!(recorded["kind"], "AuditSnapshot");
    assert_eq!(recorded["containers"].as_array().unwrap().len(), 2);
    assert!(plan.exists(), "the plan the translations came from");
    let log = std::fs::read_to_string(dir.join("shim.log")).unwrap();
    assert!(log.contains("audit compare --shim-state"), "{log}");

    // The new kubelet, on the shim, keeps both: kept, as predicted.
    let state = dir.join("shim-state.json").display().to_string();
    let audit = || {
        kubehash(&[
            "audit",
            "compare",
            "--cri",
            &ep,
            "--shim-state",
            &state,
            "-o",
            "json",
        ])
    };
    let out = audit();
    both_kept_as_planned(&out, "the shim");
    let status = || {
        text(
            &kubehash(&[
                "shim",
                "--status",
                "--runtime-endpoint",
                &ep,
                "--state",
                &state,
            ])
            .stdout,
        )
    };
    let said = status();
    assert!(
        said.contains(&format!("kubehash audit compare --shim-state {state}")),
        "{said}"
    );
    let _ = shim.kill();
    let _ = shim.wait();
    let _ = std::fs::remove_file(dir.join("shim.sock"));

    // The shim planned again from scratch, but its runtime is not there at first: it serves
    // pass-through, the new kubelet restarts a container on its untranslated hash, then the
    // runtime appears and the shim plans.
    std::fs::remove_file(dir.join("shim-state.json")).unwrap();
    let later = dir.join("later.sock");
    let mut args = plan_args.to_vec();
    args.extend(["--plan-retry-seconds", "1"]);
    let (mut shim, via) = harness::start_shim(&dir, &format!("unix://{}", later.display()), &args);
    assert!(
        !before.exists() && !plan.exists(),
        "the earlier plan's record is no record of this upgrade"
    );
    let mut cri = Cri::connect(&ep).await.unwrap();
    restart_in_shop_pod(&mut cri, &ctrd, &ids[0], &specs[0], "web-1-again").await;
    std::os::unix::fs::symlink(ctrd.socket(), &later).unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !dir.join("shim-state.json").exists() {
        assert!(std::time::Instant::now() < end, "the shim never planned");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut through = Cri::connect(&via).await.unwrap();
    assert_eq!(through.list_containers().await.unwrap().len(), 2);
    assert!(
        !before.exists(),
        "a snapshot taken now would call the restarted container kept"
    );
    let out = audit();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("no snapshot beside it") && err.contains("--snapshot"),
        "{err}"
    );
    let said = status();
    assert!(
        said.contains("The shim recorded nothing for the audit"),
        "{said}"
    );
    let _ = shim.kill();
    let _ = shim.wait();
}
