//! The node agent's write path (design §6): `apply` rewrites the stored hash of every `rewrite`
//! container in containerd's records, `verify` checks the result over CRI, `rollback` undoes it.
//!
//! `apply` writes only where the plan proved the container runs its current spec, validates every
//! new value before writing (see [`crate::runtime::containerd`]), journals the full old and new values
//! (fsync) before each write, reads each record back, and is idempotent: a record that already
//! holds the new hash is left alone, so an interrupted run can simply be run again.
//! `rollback` restores a record only if it still holds exactly what kubehash wrote.

use std::path::Path;

use serde::Serialize;
use tracing::{info, warn};

use crate::analysis::plan::{plan, ContainerPlan, PodIndex, Verdict};
use crate::error::{Error, Result};
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::journal::{self, encode, Journal, JournaledWrite, Record};
use crate::runtime::containerd::{
    extension, parse_metadata, rewrite_hashes, stored_hashes, validate_edit, Store, EXTENSION,
    TYPE_URL,
};
use crate::runtime::cri::{keys, Cri};
use crate::source::manifests::Manifests;

/// What happened to one container in `apply`.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyOutcome {
    pub container_id: String,
    pub pod: String,
    pub container: String,
    pub verdict: Verdict,
    /// `written`, `already-rewritten`, `left-alone`, `stopped` (the gate closed before this
    /// write) or `error`.
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
    /// Why apply stopped before writing everything it planned (the gate's reason).
    pub stopped: Option<String>,
}

impl ApplyReport {
    pub fn count(&self, result: &str) -> usize {
        self.outcomes.iter().filter(|o| o.result == result).count()
    }
}

/// What stops `apply` and `rollback` while a kubelet runs: a rewritten hash seen by the old
/// kubelet restarts the very container it was meant to keep.
#[derive(Debug, Clone)]
pub struct KubeletGuard {
    /// The kubelet's healthz URL (`http://127.0.0.1:10248/healthz`); anything accepting a
    /// connection there counts as a running kubelet, whatever PID namespace it runs in. `None`
    /// where the caller has judged the healthz itself (the agent's state machine).
    pub healthz: Option<String>,
    /// Go on anyway (`--force`).
    pub force: bool,
}

/// What must hold before `apply` writes, checked before the first write and again before every
/// other one: the moment it fails, apply stops writing and reports the rest as `stopped`.
pub trait WriteGate {
    /// `Err(why)` when writing is no longer safe.
    fn check(&mut self) -> impl std::future::Future<Output = std::result::Result<(), String>>;
}

impl WriteGate for KubeletGuard {
    async fn check(&mut self) -> std::result::Result<(), String> {
        KubeletGuard::check(self, "apply")
            .await
            .map_err(|e| match e {
                Error::Input { reason, .. } => reason,
                other => other.to_string(),
            })
    }
}

impl KubeletGuard {
    /// An error naming the running kubelet, unless none runs or `force` is set.
    pub async fn check(&self, what: &str) -> Result<()> {
        let Some(found) = running_kubelet(self.healthz.as_deref()).await else {
            return Ok(());
        };
        if self.force {
            warn!(kubelet = %found, "a kubelet is running; going on because of --force");
            return Ok(());
        }
        Err(Error::Input {
            source_name: what.into(),
            reason: format!(
                "a kubelet is running ({found}): stop it first, so that it never sees the hashes \
                 {what} writes, or pass --force"
            ),
        })
    }
}

/// A running kubelet, described: a process whose name starts with `kubelet` (`kubelet`,
/// `kubelet-1.30`, by `/proc/PID/comm` or the program name in `/proc/PID/cmdline`), or anything
/// accepting connections on the kubelet's healthz address (which also finds a kubelet in another
/// PID namespace).
pub async fn running_kubelet(healthz: Option<&str>) -> Option<String> {
    if let Some(found) = crate::agent::kubelet_health::kubelet_process() {
        return Some(found);
    }
    let addr = healthz_address(healthz?)?;
    let connect = tokio::net::TcpStream::connect(addr.as_str());
    match tokio::time::timeout(std::time::Duration::from_secs(2), connect).await {
        Ok(Ok(_)) => Some(format!(
            "something answers on the kubelet's healthz address {addr}"
        )),
        _ => None,
    }
}

/// `http://127.0.0.1:10248/healthz` → `127.0.0.1:10248` (port 80 or 443 by scheme if absent).
pub fn healthz_address(url: &str) -> Option<String> {
    let (rest, port) = if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else {
        (url.strip_prefix("http://").unwrap_or(url), 80)
    };
    let authority = rest.split('/').next().filter(|a| !a.is_empty())?;
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    Some(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{port}")
    })
}

/// Test hook: milliseconds to sleep after each completed write (to kill `apply` mid-way).
const PAUSE_ENV: &str = "KUBEHASH_TEST_PAUSE_AFTER_WRITE_MS";

/// Rewrites the stored hash of every `rewrite` container on this node to kubelet `to`'s hash.
#[allow(clippy::too_many_arguments)]
pub async fn apply(
    cri_endpoint: &str,
    containerd_endpoint: &str,
    pods: &PodIndex,
    manifests: &Manifests,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
    journal_path: &Path,
    gate: &mut impl WriteGate,
) -> Result<ApplyReport> {
    gate.check().await.map_err(|reason| Error::Input {
        source_name: "apply".into(),
        reason,
    })?;
    let store = Store::connect(containerd_endpoint).await?;
    let mut cri = Cri::connect(cri_endpoint).await?;
    let containers = cri.list_containers().await?;
    let plans = plan(&containers, pods, manifests, to, from);

    let (mut journal, torn) = Journal::open(journal_path)?;
    if let Some(t) = torn {
        warn!(journal = %journal_path.display(), torn = %t, "the journal's last line was torn by a crash; moved it to .torn (no write followed it) and planning every container again");
    }
    journal.append(&Record::Begin {
        at_unix: journal::now_unix(),
        to: to.to_string(),
        from: from.map(|f| f.to_string()),
        runtime: format!("containerd {}", store.version()),
    })?;
    info!(journal = %journal_path.display(), containerd = store.version(), containers = plans.len(), "apply started");

    let pause = std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let mut outcomes = Vec::new();
    let mut stopped: Option<String> = None;
    let mut first = true;
    for p in &plans {
        let mut out = ApplyOutcome {
            container_id: p.id.clone(),
            pod: format!("{}/{}", p.namespace, p.pod),
            container: p.container.clone(),
            verdict: p.verdict,
            result: "left-alone".into(),
            detail: p.reason.clone(),
        };
        if p.verdict == Verdict::Rewrite && stopped.is_none() && !first {
            // The evidence that made writing safe is checked again before every write.
            if let Err(reason) = gate.check().await {
                warn!(%reason, "stopped writing");
                stopped = Some(reason);
            }
        }
        if p.verdict == Verdict::Rewrite && stopped.is_some() {
            out.result = "stopped".into();
            out.detail = format!("not written: {}", stopped.as_deref().unwrap_or_default());
        } else if p.verdict == Verdict::Rewrite {
            first = false;
            match rewrite_one(&store, &mut journal, p).await {
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
        stopped,
    })
}

async fn rewrite_one(
    store: &Store,
    journal: &mut Journal,
    p: &ContainerPlan,
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
    // Set only for targets that read it (1.27 – 1.31), and written only where the record has it.
    let new_without = p.new_hash_without_resources.as_deref();
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
    let contents = journal::read(journal_path)?;
    let store = Store::connect(containerd_endpoint).await?;
    let mut cri = Cri::connect(cri_endpoint).await?;
    let listed = cri.list_containers().await?;
    let mut out = Vec::new();
    for JournaledWrite {
        id,
        name,
        written: new,
        new_hash,
        ..
    } in contents.writes()
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
/// exactly what kubehash wrote (compare-and-swap), and only a value that rollback proves as
/// strictly as apply proves its writes: it parses, keeps ID/Name/SandboxID, and is byte for byte
/// the current record with the hash annotations set back to the original's. The whole journal is
/// read and validated first; a line that does not decode or validate stops rollback before any
/// write.
pub async fn rollback(
    containerd_endpoint: &str,
    journal_path: &Path,
    guard: &KubeletGuard,
) -> Result<Vec<CheckOutcome>> {
    let contents = journal::read(journal_path)?;
    guard.check("rollback").await?;
    let writes = contents.writes();
    let store = Store::connect(containerd_endpoint).await?;
    let (mut journal, torn) = Journal::continue_from(journal_path, &contents)?;
    if let Some(t) = torn {
        warn!(journal = %journal_path.display(), torn = %t, "the journal's last line was torn by a crash; moved it to .torn (no write followed it)");
    }
    let mut out = Vec::new();
    for w in writes.into_iter().rev() {
        let (ok, detail) = match store.get(&w.id).await {
            Err(e) => (false, format!("skipped: {e}")),
            Ok(rec) => match rec.extensions.get(EXTENSION) {
                Some(a) if a.type_url != TYPE_URL => (
                    false,
                    format!("skipped: the extension's type URL is {:?}", a.type_url),
                ),
                Some(a) if a.value == w.original => {
                    (true, "already holds the original value".to_string())
                }
                Some(a) if a.value == w.written => match rollback_value(&w) {
                    Err(e) => (
                        false,
                        format!(
                            "not restored: the journaled original (line {}) {e}",
                            w.first_line
                        ),
                    ),
                    Ok(()) => match store.write(&w.id, &w.original).await {
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
            container_id: w.id.clone(),
            result: detail.clone(),
        })?;
        info!(container = %w.id, result = %detail, "rollback");
        out.push(CheckOutcome {
            container_id: w.id,
            name: w.name,
            ok,
            detail,
        });
    }
    Ok(out)
}

/// Proves that the journaled original may replace the value kubehash wrote: it is exactly the
/// written value with the hash annotations set back to the original's, and passes the same
/// checks as an edit made by apply.
fn rollback_value(w: &JournaledWrite) -> std::result::Result<(), String> {
    let meta = parse_metadata(&w.original, &w.id).map_err(|e| format!("does not load: {e}"))?;
    let (hash, without) = stored_hashes(&meta);
    let hash = hash.ok_or("has no hash annotation")?;
    let (_, written_without) = stored_hashes(&parse_metadata(&w.written, &w.id)?);
    if without.is_some() != written_without.is_some() {
        return Err("differs in which hash annotations it holds".into());
    }
    let expected = rewrite_hashes(&w.written, &w.id, &hash, without.as_deref())?;
    if expected != w.original {
        return Err("differs from the written value in more than the hash annotations".into());
    }
    validate_edit(&w.written, &w.original, &w.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_addresses() {
        assert_eq!(
            healthz_address("http://127.0.0.1:10248/healthz").as_deref(),
            Some("127.0.0.1:10248")
        );
        assert_eq!(
            healthz_address("https://localhost/healthz").as_deref(),
            Some("localhost:443")
        );
        assert_eq!(
            healthz_address("http://[::1]/x").as_deref(),
            Some("[::1]:80")
        );
        assert_eq!(
            healthz_address("http://[::1]:9/").as_deref(),
            Some("[::1]:9")
        );
        assert_eq!(healthz_address("http:///x"), None);
    }
}
