//! The audit: proof, after an upgrade, of which containers restarted. A snapshot taken before it
//! (per running container: id, pod, restart count, start time, over CRI) is compared with one
//! taken after: a container is **kept** when the same container still runs from the same start,
//! **restarted** when its pod runs another instance of it, **recreated** when the pod came back
//! under another UID, and **gone** when neither is there. With the node plan made before the
//! upgrade, each is also checked against what kubehash predicted.

use serde::{Deserialize, Serialize};

use crate::analysis::plan::{ContainerPlan, Verdict};
use crate::analysis::report::API_VERSION;
use crate::error::Result;
use crate::runtime::cri::{keys, proto, Cri};

/// The kubelet's annotation counting a container's restarts.
pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

/// One running container, as seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub id: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    pub restart_count: u32,
    /// Start time, nanoseconds (CRI `ContainerStatus.started_at`).
    pub started_at: i64,
}

/// The running containers of a node at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub taken_at_unix: u64,
    pub containers: Vec<Seen>,
}

/// A snapshot as a file holds it (`audit snapshot --out`, and `node apply` beside its journal):
/// `apiVersion`, `kind: AuditSnapshot`, then the snapshot's fields.
pub fn snapshot_document(s: &Snapshot) -> serde_json::Value {
    typed("AuditSnapshot", serde_json::to_value(s).unwrap_or_default())
}

/// `apiVersion` and `kind`, then the fields of `doc`.
fn typed(kind: &str, doc: serde_json::Value) -> serde_json::Value {
    let mut typed = serde_json::Map::new();
    typed.insert("apiVersion".into(), API_VERSION.into());
    typed.insert("kind".into(), kind.into());
    if let serde_json::Value::Object(fields) = doc {
        typed.extend(fields);
    }
    serde_json::Value::Object(typed)
}

/// Takes a snapshot over CRI.
pub async fn snapshot(cri: &mut Cri) -> Result<Snapshot> {
    let running = proto::ContainerState::ContainerRunning as i32;
    let mut containers = Vec::new();
    for c in cri.list_containers().await? {
        if c.state != running {
            continue;
        }
        let status = cri
            .container_status(&c.id)
            .await?
            .status
            .unwrap_or_default();
        let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
        containers.push(Seen {
            id: c.id.clone(),
            namespace: label(keys::POD_NAMESPACE),
            pod: label(keys::POD_NAME),
            pod_uid: label(keys::POD_UID),
            container: label(keys::CONTAINER_NAME),
            restart_count: c
                .annotations
                .get(RESTART_COUNT)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            started_at: status.started_at,
        });
    }
    containers.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Snapshot {
        taken_at_unix: crate::clock::now_unix(),
        containers,
    })
}

/// What became of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    Kept,
    Restarted,
    Recreated,
    Gone,
}

impl Fate {
    /// As JSON and people have it.
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Kept => "kept",
            Fate::Restarted => "restarted",
            Fate::Recreated => "recreated",
            Fate::Gone => "gone",
        }
    }
}

/// One container of the first snapshot, audited.
#[derive(Debug, Clone, Serialize)]
pub struct Audited {
    #[serde(flatten)]
    pub before: Seen,
    pub fate: Fate,
    /// The container running in its place now, if another.
    pub now: Option<String>,
    /// What the plan said (when one was given and it had a verdict for the container).
    pub predicted: Option<Verdict>,
    /// Whether the fate is what the plan predicted (`None`: no prediction).
    pub as_predicted: Option<bool>,
    /// For a container not kept, how it ended as the runtime tells it ([`how_they_ended`]):
    /// for people looking for why, never part of the fate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// How many containers of an audit met each fate, and how many not as predicted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub kept: usize,
    pub restarted: usize,
    pub recreated: usize,
    pub gone: usize,
    /// Fates other than the plan's prediction.
    pub mispredicted: usize,
}

impl Tally {
    pub fn of(audited: &[Audited]) -> Tally {
        let mut t = Tally::default();
        for a in audited {
            *match a.fate {
                Fate::Kept => &mut t.kept,
                Fate::Restarted => &mut t.restarted,
                Fate::Recreated => &mut t.recreated,
                Fate::Gone => &mut t.gone,
            } += 1;
            t.mispredicted += usize::from(a.as_predicted == Some(false));
        }
        t
    }

    /// The counts fate by fate, in the order people read them (the report's `counts`, the
    /// agent's metric labels).
    pub fn by_fate(&self) -> [(Fate, usize); 4] {
        [
            (Fate::Kept, self.kept),
            (Fate::Restarted, self.restarted),
            (Fate::Recreated, self.recreated),
            (Fate::Gone, self.gone),
        ]
    }

    /// One line for people: "N containers ran before: K kept, R restarted, …".
    pub fn summary(&self) -> String {
        format!(
            "{} containers ran before: {} kept, {} restarted, {} recreated with their pod, {} gone",
            self.kept + self.restarted + self.recreated + self.gone,
            self.kept,
            self.restarted,
            self.recreated,
            self.gone
        )
    }
}

/// An audit as JSON (`audit compare -o json` and the agent's `audit-<T>.json`, the CLI adding
/// `apiVersion` and `kind`): counts by fate, how many not as predicted, and every container.
pub fn report(audited: &[Audited]) -> serde_json::Value {
    let t = Tally::of(audited);
    let counts: serde_json::Map<String, serde_json::Value> = t
        .by_fate()
        .into_iter()
        .map(|(fate, n)| (fate.as_str().to_string(), n.into()))
        .collect();
    serde_json::json!({
        "counts": counts,
        "mispredicted": t.mispredicted,
        "containers": audited,
    })
}

/// [`report`] as a file holds it (the agent's `audit-<T>.json`), as `audit compare -o json`
/// prints it: `apiVersion`, `kind: AuditReport`, then the report
/// (`docs/schema/audit-report.schema.json`).
pub fn report_document(audited: &[Audited]) -> serde_json::Value {
    typed("AuditReport", report(audited))
}

/// The plan a node plan document holds (`node plan -o json`, or the one `node apply` records
/// beside its journal): its `containers`, read in place.
pub fn plan_of(doc: &serde_json::Value) -> serde_json::Result<Vec<ContainerPlan>> {
    Vec::<ContainerPlan>::deserialize(&doc["containers"])
}

/// Compares two snapshots, with the plan made before the upgrade if given.
pub fn compare(
    before: &Snapshot,
    after: &Snapshot,
    plan: Option<&[ContainerPlan]>,
) -> Vec<Audited> {
    before
        .containers
        .iter()
        .map(|b| {
            let same = after
                .containers
                .iter()
                .find(|a| a.id == b.id && a.started_at == b.started_at);
            let sibling = || {
                after
                    .containers
                    .iter()
                    .find(|a| a.pod_uid == b.pod_uid && a.container == b.container)
            };
            let successor = || {
                after.containers.iter().find(|a| {
                    a.namespace == b.namespace && a.pod == b.pod && a.container == b.container
                })
            };
            let (fate, now) = match (same, sibling(), successor()) {
                (Some(_), _, _) => (Fate::Kept, None),
                (None, Some(a), _) => (Fate::Restarted, Some(a.id.clone())),
                (None, None, Some(a)) => (Fate::Recreated, Some(a.id.clone())),
                _ => (Fate::Gone, None),
            };
            let predicted = plan
                .and_then(|p| p.iter().find(|p| p.id == b.id))
                .map(|p| p.verdict);
            let expected = predicted.and_then(|v| match v {
                Verdict::Unchanged | Verdict::Rewrite => Some(Fate::Kept),
                Verdict::WillRestart | Verdict::Unprovable => Some(Fate::Restarted),
                Verdict::Recreated => Some(Fate::Recreated),
                Verdict::Killed => Some(Fate::Gone),
                Verdict::NotRunning | Verdict::NoPod | Verdict::Error => None,
            });
            Audited {
                before: b.clone(),
                fate,
                now,
                predicted,
                as_predicted: expected.map(|e| e == fate),
                ended: None,
            }
        })
        .collect()
}

/// Says of each container not kept how it ended, as the runtime tells it now: "exited with code
/// 137 (Error) at …", or "removed from the runtime" when it no longer has the container (the
/// kubelet removes dead containers it replaced). What the runtime cannot say is left unsaid:
/// this is diagnosis for people, and the fates stand without it.
pub async fn how_they_ended(cri: &mut Cri, audited: &mut [Audited]) {
    if audited.iter().all(|a| a.fate == Fate::Kept) {
        return;
    }
    let Ok(all) = cri.list_containers().await else {
        return;
    };
    use proto::ContainerState as State;
    for a in audited.iter_mut().filter(|a| a.fate != Fate::Kept) {
        a.ended = match all.iter().find(|c| c.id == a.before.id).map(|c| c.state()) {
            None => Some("removed from the runtime".into()),
            Some(State::ContainerRunning) => Some("running, started again".into()),
            Some(State::ContainerExited) => match cri.container_status(&a.before.id).await {
                Ok(r) => r.status.map(|s| exited(&s)),
                Err(_) => None,
            },
            Some(other) => Some(format!("the runtime says {}", other.as_str_name())),
        };
    }
}

/// "exited with code N (reason) at time" of a container's status.
fn exited(s: &proto::ContainerStatus) -> String {
    let reason = if s.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", s.reason)
    };
    // To the second, as kubectl shows a container's times.
    let at = Some(s.finished_at / 1_000_000_000)
        .filter(|&secs| secs > 0)
        .and_then(|secs| k8s_openapi::jiff::Timestamp::from_second(secs).ok())
        .map(|t| format!(" at {t}"))
        .unwrap_or_default();
    format!("exited with code {}{reason}{at}", s.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: &str, uid: &str, started: i64) -> Seen {
        Seen {
            id: id.into(),
            namespace: "ns".into(),
            pod: "p".into(),
            pod_uid: uid.into(),
            container: "c".into(),
            restart_count: 0,
            started_at: started,
        }
    }

    fn snap(c: Vec<Seen>) -> Snapshot {
        Snapshot {
            taken_at_unix: 0,
            containers: c,
        }
    }

    #[test]
    fn fates() {
        let before = snap(vec![seen("a", "u", 1)]);
        let fate = |after: Vec<Seen>| compare(&before, &snap(after), None)[0].fate;
        assert_eq!(fate(vec![seen("a", "u", 1)]), Fate::Kept);
        assert_eq!(fate(vec![seen("b", "u", 2)]), Fate::Restarted);
        // Same id, started again (restarted in place): not kept.
        assert_eq!(fate(vec![seen("a", "u", 5)]), Fate::Restarted);
        assert_eq!(fate(vec![seen("b", "v", 2)]), Fate::Recreated);
        assert_eq!(fate(vec![]), Fate::Gone);
        // A static pod whose manifest the new kubelet refuses is gone, as predicted.
        let killed: ContainerPlan = serde_json::from_value(serde_json::json!({
            "id": "a", "sandbox_id": "s", "namespace": "ns", "pod": "p", "pod_uid": "u",
            "container": "c", "state": "running", "stored_hash": "1",
            "stored_hash_without_resources": null, "verdict": "killed", "provenance": [],
            "new_hash": null, "new_hash_without_resources": null, "reason": ""
        }))
        .unwrap();
        let a = &compare(&before, &snap(vec![]), Some(&[killed]))[0];
        assert_eq!((a.fate, a.as_predicted), (Fate::Gone, Some(true)));
    }

    #[test]
    fn how_a_container_ended_reads() {
        let mut s = proto::ContainerStatus {
            exit_code: 137,
            reason: "Error".into(),
            finished_at: 1_764_356_754_997_876_918,
            ..Default::default()
        };
        assert_eq!(
            exited(&s),
            "exited with code 137 (Error) at 2025-11-28T19:05:54Z"
        );
        (s.reason, s.finished_at) = (String::new(), 0);
        assert_eq!(exited(&s), "exited with code 137");
    }

    #[test]
    fn a_fate_reads_as_it_serializes() {
        for f in [Fate::Kept, Fate::Restarted, Fate::Recreated, Fate::Gone] {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
    }

    #[test]
    fn a_tally_counts_fates_and_what_the_plan_did_not_predict() {
        let audited = |fate, as_predicted| Audited {
            before: seen("a", "u", 1),
            fate,
            now: None,
            predicted: None,
            as_predicted,
            ended: None,
        };
        let t = Tally::of(&[
            audited(Fate::Kept, Some(true)),
            audited(Fate::Kept, None),
            audited(Fate::Restarted, Some(true)),
            audited(Fate::Restarted, Some(false)),
            audited(Fate::Recreated, Some(false)),
            audited(Fate::Gone, None),
        ]);
        assert_eq!(
            t,
            Tally {
                kept: 2,
                restarted: 2,
                recreated: 1,
                gone: 1,
                mispredicted: 2
            }
        );
        assert_eq!(
            t.summary(),
            "6 containers ran before: 2 kept, 2 restarted, 1 recreated with their pod, 1 gone"
        );
    }
}
