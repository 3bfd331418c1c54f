//! The node agent's write path (design §6): `apply` rewrites the stored hash of every `rewrite`
//! container in containerd's records, `verify` checks the result over CRI, `rollback` undoes it.
//!
//! `apply` writes only where the plan proved the container runs its current spec, validates every
//! new value before writing (see [`crate::containerd`]), journals the full old and new values
//! (fsync) before each write, reads each record back, and is idempotent: a record that already
//! holds the new hash is left alone, so an interrupted run can simply be run again.
//! `rollback` restores a record only if it still holds exactly what kubehash wrote.

use std::path::Path;

use serde::Serialize;
use tracing::{info, warn};

use crate::containerd::{
    extension, parse_metadata, rewrite_hashes, stored_hashes, Store, EXTENSION,
};
use crate::cri::{keys, Cri};
use crate::error::{Error, Result};
use crate::journal::{self, decode, encode, Journal, Record};
use crate::plan::{plan, ContainerPlan, PodIndex, Verdict};
use crate::version::KubeletVersion;

/// What happened to one container in `apply`.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyOutcome {
    pub container_id: String,
    pub pod: String,
    pub container: String,
    pub verdict: Verdict,
    /// `written`, `already-rewritten`, `left-alone` or `error`.
    pub result: String,
    pub detail: String,
}

/// The result of an `apply` run.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub to: String,
    pub containerd: String,
    pub journal: String,
    pub outcomes: Vec<ApplyOutcome>,
}

impl ApplyReport {
    pub fn count(&self, result: &str) -> usize {
        self.outcomes.iter().filter(|o| o.result == result).count()
    }
}

/// How `apply` checks that no kubelet runs: a process named `kubelet` in /proc.
pub fn running_kubelet() -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) {
            if comm.trim() == "kubelet" {
                return Some(pid);
            }
        }
    }
    None
}

/// Test hook: milliseconds to sleep after each completed write (to kill `apply` mid-way).
const PAUSE_ENV: &str = "KUBEHASH_TEST_PAUSE_AFTER_WRITE_MS";

/// Rewrites the stored hash of every `rewrite` container on this node to kubelet `to`'s hash.
#[allow(clippy::too_many_arguments)]
pub async fn apply(
    cri_endpoint: &str,
    containerd_endpoint: &str,
    pods: &PodIndex,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
    journal_path: &Path,
    force: bool,
) -> Result<ApplyReport> {
    if let Some(pid) = running_kubelet() {
        if !force {
            return Err(Error::Input {
                source_name: "node".into(),
                reason: format!(
                    "a kubelet is running (pid {pid}, found by its name in /proc): stop it first, so that it \
                     never sees rewritten hashes, or pass --force"
                ),
            });
        }
        warn!(pid, "a kubelet is running; going on because of --force");
    }
    let store = Store::connect(containerd_endpoint).await?;
    store.check_known_version()?;
    let mut cri = Cri::connect(cri_endpoint).await?;
    let containers = cri.list_containers().await?;
    let plans = plan(&containers, pods, to, from);

    let mut journal = Journal::open(journal_path)?;
    journal.append(&Record::Begin {
        at_unix: journal::now_unix(),
        to: to.to_string(),
        from: from.map(|f| f.to_string()),
        containerd: store.version().to_string(),
    })?;
    info!(journal = %journal_path.display(), containerd = store.version(), containers = plans.len(), "apply started");

    let pause = std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let mut outcomes = Vec::new();
    for p in &plans {
        let mut out = ApplyOutcome {
            container_id: p.id.clone(),
            pod: format!("{}/{}", p.namespace, p.pod),
            container: p.container.clone(),
            verdict: p.verdict,
            result: "left-alone".into(),
            detail: p.reason.clone(),
        };
        if p.verdict == Verdict::Rewrite {
            match rewrite_one(&store, &mut journal, p, to).await {
                Ok((result, detail)) => {
                    out.result = result.into();
                    out.detail = detail;
                    if result == "written" {
                        if let Some(ms) = pause {
                            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                        }
                    }
                }
                Err(e) => {
                    warn!(container = %p.id, error = %e, "not written");
                    out.result = "error".into();
                    out.detail = e.to_string();
                }
            }
        }
        outcomes.push(out);
    }
    Ok(ApplyReport {
        to: to.to_string(),
        containerd: store.version().to_string(),
        journal: journal_path.display().to_string(),
        outcomes,
    })
}

async fn rewrite_one(
    store: &Store,
    journal: &mut Journal,
    p: &ContainerPlan,
    to: KubeletVersion,
) -> Result<(&'static str, String)> {
    let bad = |reason: String| Error::Containerd {
        endpoint: "record".into(),
        reason: format!("container {}: {reason}", p.id),
    };
    let new_hash = p
        .new_hash
        .clone()
        .ok_or_else(|| bad("no target hash".into()))?;
    let record = store.get(&p.id).await?;
    let raw = extension(&record)
        .map_err(|e| bad(format!("{EXTENSION}: {e}; not written")))?
        .to_vec();
    let meta = parse_metadata(&raw, &p.id).map_err(bad)?;
    let (stored, _) = stored_hashes(&meta);
    if stored.as_deref() == Some(new_hash.as_str()) {
        return Ok((
            "already-rewritten",
            format!("the record already holds {new_hash}"),
        ));
    }
    if stored != p.stored_hash {
        return Err(bad(format!(
            "the record holds hash {:?} but CRI reports {:?}: changed behind kubehash's back; not written",
            stored, p.stored_hash
        )));
    }
    let new_without = if to.has_hash_without_resources() {
        p.new_hash_without_resources.as_deref()
    } else {
        None
    };
    let new = rewrite_hashes(&raw, &p.id, &new_hash, new_without)
        .map_err(|e| bad(format!("{e}; not written")))?;
    journal.append(&Record::Write {
        at_unix: journal::now_unix(),
        container_id: p.id.clone(),
        pod: format!("{}/{}", p.namespace, p.pod),
        container: p.container.clone(),
        verdict: p.verdict.as_str().into(),
        old_hash: stored.unwrap_or_default(),
        new_hash: new_hash.clone(),
        old_value: encode(&raw),
        new_value: encode(&new),
    })?;
    store.write(&p.id, &new).await?;
    journal.append(&Record::Written {
        container_id: p.id.clone(),
    })?;
    info!(container = %p.id, pod = %format!("{}/{}", p.namespace, p.pod), name = %p.container, new_hash = %new_hash, "rewritten");
    Ok((
        "written",
        format!("{} → {new_hash}", p.stored_hash.clone().unwrap_or_default()),
    ))
}

/// What a journal says about one container.
struct Journaled {
    id: String,
    /// `namespace/pod/container`
    name: String,
    /// The value before kubehash's first write.
    original: Vec<u8>,
    /// The value of kubehash's last write.
    written: Vec<u8>,
    new_hash: String,
}

/// Per container of a journal, in order of first write.
fn journaled(records: &[Record]) -> Vec<Journaled> {
    let mut out: Vec<Journaled> = Vec::new();
    for r in records {
        let Record::Write {
            container_id,
            pod,
            container,
            old_value,
            new_value,
            new_hash,
            ..
        } = r
        else {
            continue;
        };
        let (Ok(original), Ok(written)) = (decode(old_value), decode(new_value)) else {
            continue;
        };
        match out.iter_mut().find(|j| &j.id == container_id) {
            Some(j) => {
                j.written = written;
                j.new_hash = new_hash.clone();
            }
            None => out.push(Journaled {
                id: container_id.clone(),
                name: format!("{pod}/{container}"),
                original,
                written,
                new_hash: new_hash.clone(),
            }),
        }
    }
    out
}

/// One line of `verify` or `rollback`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckOutcome {
    pub container_id: String,
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// Checks every journaled container: containerd's record still holds exactly the value written,
/// and CRI reports the new hash (after containerd restarted).
pub async fn verify(
    cri_endpoint: &str,
    containerd_endpoint: &str,
    journal_path: &Path,
) -> Result<Vec<CheckOutcome>> {
    let records = journal::read(journal_path)?;
    let store = Store::connect(containerd_endpoint).await?;
    let mut cri = Cri::connect(cri_endpoint).await?;
    let listed = cri.list_containers().await?;
    let mut out = Vec::new();
    for Journaled {
        id,
        name,
        written: new,
        new_hash,
        ..
    } in journaled(&records)
    {
        let mut problems = Vec::new();
        match store.get(&id).await {
            Ok(rec) => match rec.extensions.get(EXTENSION) {
                Some(a) if a.value == new => {}
                Some(_) => problems.push(
                    "containerd's record no longer holds the value kubehash wrote".to_string(),
                ),
                None => problems.push("containerd's record lost its CRI metadata".to_string()),
            },
            Err(e) => problems.push(e.to_string()),
        }
        match listed.iter().find(|c| c.id == id) {
            None => problems.push("CRI does not list the container".to_string()),
            Some(c) => match c.annotations.get(keys::HASH) {
                Some(h) if *h == new_hash => {}
                Some(h) => problems.push(format!(
                    "CRI reports hash {h}, expected {new_hash} (has containerd been restarted?)"
                )),
                None => problems.push("CRI reports no hash".to_string()),
            },
        }
        out.push(CheckOutcome {
            ok: problems.is_empty(),
            detail: if problems.is_empty() {
                format!("CRI reports {new_hash}; record as written")
            } else {
                problems.join("; ")
            },
            container_id: id,
            name,
        });
    }
    Ok(out)
}

/// Restores every journaled container's original value, each only if the record still holds
/// exactly what kubehash wrote (compare-and-swap); reports what it skipped and why.
pub async fn rollback(containerd_endpoint: &str, journal_path: &Path) -> Result<Vec<CheckOutcome>> {
    let records = journal::read(journal_path)?;
    let store = Store::connect(containerd_endpoint).await?;
    store.check_known_version()?;
    let mut journal = Journal::open(journal_path)?;
    let mut out = Vec::new();
    for Journaled {
        id,
        name,
        original: old,
        written: new,
        ..
    } in journaled(&records).into_iter().rev()
    {
        let (ok, detail) = match store.get(&id).await {
            Err(e) => (false, format!("skipped: {e}")),
            Ok(rec) => match rec.extensions.get(EXTENSION) {
                Some(a) if a.value == old => (true, "already holds the original value".to_string()),
                Some(a) if a.value == new => match parse_metadata(&old, &id) {
                    Err(e) => (
                        false,
                        format!("skipped: the journaled original does not validate: {e}"),
                    ),
                    Ok(_) => match store.write(&id, &old).await {
                        Ok(_) => (true, "restored".to_string()),
                        Err(e) => (false, format!("not restored: {e}")),
                    },
                },
                Some(_) => (
                    false,
                    "skipped: the record changed since kubehash wrote it".to_string(),
                ),
                None => (false, "skipped: the record has no CRI metadata".to_string()),
            },
        };
        journal.append(&Record::Rollback {
            container_id: id.clone(),
            result: detail.clone(),
        })?;
        info!(container = %id, result = %detail, "rollback");
        out.push(CheckOutcome {
            container_id: id,
            name,
            ok,
            detail,
        });
    }
    Ok(out)
}
