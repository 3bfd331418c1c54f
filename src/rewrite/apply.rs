//! `apply`: rewrites the stored hash of every container the plan proved (design §6).
//!
//! It writes only where the plan proved the container runs its current spec, checks the gate
//! before every write, validates every new value before writing (the runtime's
//! [`RecordFormat::set_hashes`]), journals the full old and new values (fsync) before each write,
//! replaces with compare-and-swap and reads back, and is idempotent: a record that already holds
//! the new hash is left alone, so an interrupted run can simply be run again. A record that says
//! the container was created from another spec than the one proved (image, command, args,
//! environment, working directory, stdin, tty, security context) is not written, whatever the
//! hashes say ([`crate::analysis::created_with`]).

use std::collections::HashSet;
use std::path::Path;

use tracing::{info, warn};

use crate::analysis::created_with::contradiction;
use crate::analysis::plan::{made_for_the_target, plan_node, ContainerPlan, PodIndex, Verdict};
use crate::analysis::statics::{PinAction, StaticPod};
use crate::clock::now_unix;
use crate::error::{Error, Result};
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::audit_record;
use crate::rewrite::durable::write_atomically;
use crate::rewrite::gate::WriteGate;
use crate::rewrite::journal::{encode, Contents, Journal, Record};
use crate::rewrite::outcome::{Applied, ApplyOutcome, ApplyReport, PinOutcome};
use crate::rewrite::pin::pin_text;
use crate::runtime::cri::Cri;
use crate::runtime::record::{RecordFormat, RecordStore};
use crate::source::manifests::{link_target, Manifests};

/// Test hook: milliseconds to sleep after each completed write (to kill `apply` mid-way).
const PAUSE_ENV: &str = "KUBEHASH_TEST_PAUSE_AFTER_WRITE_MS";
/// Test hook: milliseconds to sleep between journaling a pin and putting it in place.
const PIN_PAUSE_ENV: &str = "KUBEHASH_TEST_PAUSE_BEFORE_PIN_MS";
/// Test hook: milliseconds to sleep after recording for the audit, before the first write.
const RECORD_PAUSE_ENV: &str = "KUBEHASH_TEST_PAUSE_AFTER_RECORD_MS";

/// What one `apply` run works on.
pub struct Target<'a> {
    pub pods: &'a mut PodIndex,
    pub manifests: &'a Manifests,
    /// This node's name, to find its static pods' sandboxes (`<name>-<node>`).
    pub node: Option<&'a str>,
    pub to: KubeletVersion,
    pub from: Option<KubeletVersion>,
    pub journal: &'a Path,
    /// Pin static pods' manifests only; write no container record.
    pub pins_only: bool,
}

/// Rewrites the stored hash of every `rewrite` container on this node to kubelet `to`'s hash.
pub async fn apply(
    cri: &mut Cri,
    store: &impl RecordStore,
    t: Target<'_>,
    gate: &mut impl WriteGate,
) -> Result<ApplyReport> {
    gate.check().await.map_err(|e| Error::Unsafe {
        what: "apply".into(),
        reason: e.0,
    })?;
    let view = plan_node(cri, t.pods, t.manifests, t.node, t.to, t.from).await?;
    let plans = view.containers;

    let (mut journal, held) = Journal::open_read(t.journal)?;
    if let Some(torn) = held.torn.as_ref().map(|t| &t.text) {
        warn!(journal = %t.journal.display(), %torn, "the journal's last line was torn by a crash; moved it to .torn (no write followed it) and planning every container again");
    }
    let runtime = store.runtime();
    journal.append(&Record::Begin {
        at_unix: now_unix(),
        to: t.to.to_string(),
        from: t.from.map(|f| f.to_string()),
        runtime: runtime.clone(),
    })?;
    info!(journal = %t.journal.display(), %runtime, containers = plans.len(), "apply started");
    // The gate was checked just before planning; the first write goes on that check unless
    // recording for the audit took time since, and then the gate is asked again.
    let mut first = true;
    let mut unaudited = None;
    if !t.pins_only {
        // What runs now may be what the new kubelet restarted: recorded as "before", the audit
        // would call those containers kept. An earlier run's record goes too: it may be an
        // earlier try's.
        let begun = match gate.overridden() {
            Some(kubelet) => Some(format!("a kubelet runs ({kubelet}; --force), and what runs now may already include its restarts")),
            None => begun_before(&plans, &held, t.from),
        };
        unaudited = match begun {
            None => record_for_audit(cri, t.journal, &plans).await,
            Some(why) => {
                audit_record::forget(t.journal);
                warn!("no record for the audit: {why}; to audit this upgrade, compare against a snapshot taken before any kubelet {} ran", t.to);
                Some(why)
            }
        };
        if let Some(ms) = std::env::var(RECORD_PAUSE_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        first = false;
    }

    let pause = std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let mut stopped: Option<String> = None;
    // Static pods' UIDs first: a container is rewritten only once its pod keeps its UID.
    let mut pins = Vec::new();
    let mut unpinned: Vec<&str> = Vec::new();
    for s in view.statics.iter().filter(|s| s.action == PinAction::Pin) {
        let mut out = PinOutcome {
            path: s.path.clone(),
            uid: s.uid.clone(),
            result: Applied::Stopped,
            detail: String::new(),
        };
        if stopped.is_none() && !first {
            if let Err(why) = gate.check().await {
                warn!(reason = %why, "stopped writing");
                stopped = Some(why.0);
            }
        }
        first = false;
        if let Some(why) = &stopped {
            out.detail = format!("not written: {why}");
        } else {
            match pin_one(&mut journal, s, t.manifests) {
                Ok(detail) => {
                    out.result = Applied::Written;
                    out.detail = detail;
                }
                Err(e) => {
                    warn!(manifest = %s.path, error = %e, "not pinned");
                    out.result = Applied::Error;
                    out.detail = e.to_string();
                }
            }
        }
        if out.result != Applied::Written {
            unpinned.push(&s.uid);
        }
        pins.push(out);
    }
    let mut outcomes = Vec::new();
    for p in &plans {
        let mut out = ApplyOutcome {
            container_id: p.id.clone(),
            pod: format!("{}/{}", p.namespace, p.pod),
            container: p.container.clone(),
            verdict: p.verdict,
            result: Applied::LeftAlone,
            detail: p.reason.clone(),
        };
        if p.verdict == Verdict::Rewrite && t.pins_only {
            out.result = Applied::LeftAlone;
            out.detail = "not written: --pins-only".into();
            outcomes.push(out);
            continue;
        }
        if p.verdict == Verdict::Rewrite && unpinned.contains(&p.pod_uid.as_str()) {
            out.result = Applied::LeftAlone;
            out.detail = "not written: its static pod's manifest was not pinned".into();
            outcomes.push(out);
            continue;
        }
        if p.verdict == Verdict::Rewrite && stopped.is_none() && !first {
            // The evidence that made writing safe is checked again before every write.
            if let Err(why) = gate.check().await {
                warn!(reason = %why, "stopped writing");
                stopped = Some(why.0);
            }
        }
        if p.verdict == Verdict::Rewrite {
            if let Some(why) = &stopped {
                out.result = Applied::Stopped;
                out.detail = format!("not written: {why}");
            } else {
                first = false;
                let spec = t.pods.find(&p.pod_uid, &p.namespace, &p.pod, &p.container);
                match rewrite_one(store, &mut journal, p, spec).await {
                    Ok((result, detail)) => {
                        out.result = result;
                        out.detail = detail;
                        if let (Applied::Written, Some(ms)) = (result, pause) {
                            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                        }
                    }
                    Err(e) => {
                        warn!(container = %p.id, error = %e, "not written");
                        out.result = Applied::Error;
                        out.detail = e.to_string();
                    }
                }
            }
        }
        outcomes.push(out);
    }
    Ok(ApplyReport {
        to: t.to.to_string(),
        runtime,
        journal: t.journal.display().to_string(),
        pins,
        outcomes,
        stopped,
        unaudited,
    })
}

/// What `audit compare` needs once the new kubelet runs, beside the journal
/// ([`audit_record::audit_files`]): every container running now (apply runs with no kubelet, so
/// nothing restarts before the new one starts) and the plan. A record for people, never a
/// condition of writing: what cannot be recorded is logged, and that upgrade is audited only by
/// hand.
async fn record_for_audit(
    cri: &mut Cri,
    journal: &Path,
    plans: &[ContainerPlan],
) -> Option<String> {
    match audit_record::record(cri, journal, plans).await {
        Ok(before) => {
            info!(snapshot = %before.display(), "recorded the running containers for the audit");
            None
        }
        Err(e) => {
            warn!(error = %e, "cannot record the running containers; audit this upgrade with a snapshot of your own");
            Some(format!("the running containers could not be recorded: {e}"))
        }
    }
}

/// Why the upgrade may have begun before this run, with no kubelet running now: a container
/// carries kubelet T's hash where F's differs, and the journal (`held` before this run) did not
/// write it ([`made_for_the_target`]). Without F, nothing says so.
fn begun_before(
    plans: &[ContainerPlan],
    held: &Contents,
    from: Option<KubeletVersion>,
) -> Option<String> {
    let from = from?;
    let ours: HashSet<String> = held.writes().into_iter().map(|w| w.id).collect();
    let p = made_for_the_target(plans, from, |id| ours.contains(id))?;
    Some(format!(
        "container {}/{}/{} carries the new kubelet's hash of its spec, which kubelet {from}'s is not, and this journal did not write it: a kubelet hashing as the new one does made it (or a run with another journal rewrote it), so the upgrade may have begun before this run",
        p.namespace, p.pod, p.container
    ))
}

/// Pins one static pod's manifest: the file must still hold what the plan read, the pinned text
/// is proven ([`pin_text`]), journaled, then put in place atomically.
fn pin_one(journal: &mut Journal, s: &StaticPod, manifests: &Manifests) -> Result<String> {
    let refuse = |reason: String| Error::Input {
        source_name: s.path.clone(),
        reason: format!("{reason}; not pinned"),
    };
    let path = Path::new(&s.path);
    let read = manifests
        .get(&s.namespace, &s.name)
        .ok_or_else(|| refuse("no longer among the manifests read".into()))?;
    let now = std::fs::read(path).map_err(|e| refuse(e.to_string()))?;
    if now != read.bytes {
        return Err(refuse("the manifest changed since kubehash read it".into()));
    }

    let new = pin_text(&now, &s.uid).map_err(|e| refuse(e.0))?;
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_nanos()).ok());
    journal.append(&Record::Pin {
        at_unix: now_unix(),
        path: s.path.clone(),
        uid: s.uid.clone(),
        old_value: encode(&now),
        new_value: encode(&new),
        old_modified_ns: modified,
    })?;
    if let Some(ms) = std::env::var(PIN_PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    // Replaced in place, a link would become a copy, and the file it points to stay unpinned
    // (the plan refuses a link; this is one made since). The journaled pin is left undone, as
    // after a crash here: rollback finds the original in place.
    if let Some(to) = link_target(path) {
        return Err(refuse(format!(
            "it is now a symbolic link (to {}), which kubehash does not replace",
            to.display()
        )));
    }
    write_atomically(path, &new)?;
    journal.append(&Record::Pinned {
        path: s.path.clone(),
    })?;
    info!(manifest = %s.path, uid = %s.uid, "pinned");
    Ok(format!("metadata.uid: {}", s.uid))
}

/// Rewrites one container's record, journaling the old and new values and `spec`, the spec the
/// plan proved the write against (for rollback to prove the original against).
async fn rewrite_one(
    store: &impl RecordStore,
    journal: &mut Journal,
    p: &ContainerPlan,
    spec: Option<&serde_json::Value>,
) -> Result<(Applied, String)> {
    let refuse = |reason: String| Error::Record {
        id: p.id.clone(),
        reason: format!("{reason}; not written"),
    };
    let new_hash = p
        .new_hash
        .clone()
        .ok_or_else(|| refuse("no target hash".into()))?;
    let raw = store.read(&p.id).await.map_err(|e| match e {
        Error::Record { reason, .. } => refuse(reason),
        other => other,
    })?;
    let format: &dyn RecordFormat = store.format();
    let stored = format
        .stored_hashes(&p.id, &raw)
        .map_err(|e| refuse(e.0))?
        .hash;
    if stored.as_deref() == Some(new_hash.as_str()) {
        return Ok((
            Applied::AlreadyRewritten,
            format!("the record already holds {new_hash}"),
        ));
    }
    if stored != p.stored_hash {
        return Err(refuse(format!(
            "the record holds hash {:?} but CRI reports {:?}: changed behind kubehash's back",
            stored, p.stored_hash
        )));
    }
    // The plan proved the write against this spec; without it there is nothing to check the
    // record against, nor for rollback to prove the original against.
    let spec = spec.ok_or_else(|| refuse("no current spec for it among the pods".into()))?;
    // What the runtime recorded at create time overrules the hashes: a stored hash that proves
    // a spec the container was not created from collides with it.
    let created = format.created_with(&p.id, &raw).map_err(|e| refuse(e.0))?;
    if let Some(why) = contradiction(spec, &created) {
        return Err(refuse(format!(
            "{why}, though the stored hash proves that spec (the two collide): the new kubelet restarts it, and should"
        )));
    }
    // Set only for targets that read it (1.27 – 1.31), and written only where the record has it.
    let new = format
        .set_hashes(
            &p.id,
            &raw,
            &new_hash,
            p.new_hash_without_resources.as_deref(),
        )
        .map_err(|e| refuse(e.0))?;
    let pod = format!("{}/{}", p.namespace, p.pod);
    journal.append(&Record::Write {
        at_unix: now_unix(),
        container_id: p.id.clone(),
        pod: pod.clone(),
        container: p.container.clone(),
        verdict: p.verdict.as_str().into(),
        old_hash: stored.unwrap_or_default(),
        new_hash: new_hash.clone(),
        old_value: encode(&raw),
        new_value: encode(&new),
        spec: Some(spec.clone()),
    })?;
    store.replace(&p.id, &raw, &new).await?;
    journal.append(&Record::Written {
        container_id: p.id.clone(),
    })?;
    info!(container = %p.id, %pod, name = %p.container, %new_hash, "rewritten");
    Ok((
        Applied::Written,
        format!("{} → {new_hash}", p.stored_hash.clone().unwrap_or_default()),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kubelet::hash::hash_container;
    use crate::kubelet::sink::format_hash;
    use crate::rewrite::journal::tests::{BEFORE, ID};
    use crate::rewrite::rollback::tests::Records;
    use crate::runtime::containerd::METADATA;

    /// A `rewrite` plan for container [`ID`] whose record holds `stored`.
    fn planned(stored: &str, new_hash: &str) -> ContainerPlan {
        ContainerPlan {
            id: ID.into(),
            sandbox_id: "s".into(),
            namespace: "shop".into(),
            pod: "web-1".into(),
            pod_uid: "uid-web-1".into(),
            container: "app".into(),
            state: "running".into(),
            stored_hash: Some(stored.into()),
            stored_hash_without_resources: None,
            verdict: Verdict::Rewrite,
            provenance: vec![],
            new_hash: Some(new_hash.into()),
            new_hash_without_resources: None,
            reason: String::new(),
            runs_another_spec: None,
        }
    }

    fn hash_of(spec: &serde_json::Value, v: &str) -> String {
        let v: KubeletVersion = v.parse().unwrap();
        format_hash(hash_container(spec, &[v], "app").unwrap().get(v).unwrap())
    }

    /// The record check alone, as a runtime that does not tell its configs over CRI leaves it:
    /// the plan proved the spec by its hashes, but the record says the container was created with
    /// other args. Nothing is written, and the journal holds no write.
    #[tokio::test]
    async fn a_spec_the_record_contradicts_is_not_written() {
        let created = BEFORE
            .trim_end()
            .replace("\"log_path\"", "\"args\":[\"--v1\"],\"log_path\"");
        // The record, created with `--v1`, holding `hash`.
        let holding = |hash: &str| {
            let record = METADATA
                .set_hashes(ID, created.as_bytes(), hash, None)
                .unwrap();
            (Records::holding(&record), record)
        };
        let now = json!({"name":"app","image":"docker.io/local/app:1","args":["--v2"]});
        let collided = hash_of(&now, "1.30");
        let (store, record) = holding(&collided);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let (mut journal, _) = Journal::open(&path).unwrap();
        let p = planned(&collided, &hash_of(&now, "1.31"));
        let err = rewrite_one(&store, &mut journal, &p, Some(&now))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("created with args [\"--v1\"], and the spec now says [\"--v2\"]"),
            "{err}"
        );
        assert_eq!(store.now(), Some(record.clone()));
        assert!(!std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("\"write\""));
        // The spec it was created from is written, and only with that spec in hand.
        let then = json!({"name":"app","image":"docker.io/local/app:1","args":["--v1"]});
        let stored = hash_of(&then, "1.30");
        let (store, record) = holding(&stored);
        let p = planned(&stored, &hash_of(&then, "1.31"));
        let err = rewrite_one(&store, &mut journal, &p, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no current spec for it"), "{err}");
        assert_eq!(store.now(), Some(record));
        assert!(!std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("\"write\""));
        let (result, _) = rewrite_one(&store, &mut journal, &p, Some(&then))
            .await
            .unwrap();
        assert_eq!(result, Applied::Written);
    }
}
