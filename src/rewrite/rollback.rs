//! `rollback`: restores every journaled container's original value, each only if the record still
//! holds exactly what kubehash wrote (compare-and-swap), and only a value proved as strictly as
//! apply proves its writes: it loads, belongs to the same container, and is byte for byte the
//! written value with the hash annotations set back to the original's. The whole journal is read
//! and validated first; a line that does not decode or validate stops rollback before any write.
//! Pinned static pod manifests are restored last, byte for byte, on the same terms.
//!
//! An original is also proved against the container's spec, as apply proved it: kubelet T's hash
//! of the spec must be the written hash (the container runs the spec apply proved) and kubelet
//! F's hash of it the original's. Given the pods ([`NodeSpecs`]), that is the pod's spec as it is
//! now; without them, the spec apply journaled with the write, so a forged or corrupted original
//! hash still fails against a value the journal does not hold (the written hash in the record).
//! A write journaled without its spec (by kubehash before apply kept them, or with the spec
//! stripped) is restored only given the pods: its values prove only each other, and an original
//! whose hash a forger chose would pass them.

use std::path::Path;

use tracing::{info, warn};

use crate::analysis::created_with::contradiction;
use crate::analysis::plan::NodeSpecs;
use crate::error::{Error, Problem, Result};
use crate::kubelet::hash::hash_container;
use crate::kubelet::sink::format_hash;
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::durable::write_atomically_dated;
use crate::rewrite::gate::WriteGate;
use crate::rewrite::journal::{
    Contents, Journal, JournaledPin, JournaledWrite, Record, ALREADY_ORIGINAL,
    ALREADY_ORIGINAL_TEXT, RESTORED,
};
use crate::rewrite::outcome::CheckOutcome;
use crate::rewrite::pin::check_pin;
use crate::runtime::record::{RecordFormat, RecordStore};
use crate::source::manifests::link_target;

/// How many containers' records rollback put back: what containerd must reload (a restart)
/// before CRI reports their original hashes.
pub fn records_restored(outcomes: &[CheckOutcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| o.manifest.is_none() && o.detail == RESTORED)
        .count()
}

/// Undoes the writes of one journal, newest first; with `specs`, only originals proved against
/// them (see the module).
pub async fn rollback(
    store: &impl RecordStore,
    journal_path: &Path,
    contents: Contents,
    gate: &mut impl WriteGate,
    specs: Option<&NodeSpecs>,
) -> Result<Vec<CheckOutcome>> {
    gate.check().await.map_err(|e| Error::Unsafe {
        what: "rollback".into(),
        reason: e.0,
    })?;
    let writes = contents.writes();
    let (mut journal, torn) = Journal::continue_from(journal_path, &contents)?;
    if let Some(torn) = torn {
        warn!(journal = %journal_path.display(), %torn, "the journal's last line was torn by a crash; moved it to .torn (no write followed it)");
    }
    let mut out = Vec::new();
    for w in writes.into_iter().rev() {
        let (ok, detail) = match store.read(&w.id).await {
            Err(e) => match w.undone {
                Some(line) => (true, left_original(line, format!("it cannot be read: {e}"))),
                None => (false, format!("skipped: {e}")),
            },
            Ok(v) if v == w.original => (true, ALREADY_ORIGINAL.to_string()),
            Ok(v) if v == w.written => match restorable(store.format(), &w) {
                Err(e) => (
                    false,
                    format!(
                        "not restored: the journaled original (line {}) {e}",
                        w.first_line
                    ),
                ),
                Ok(()) => match proof(specs, store.format(), &w) {
                    Err(e) => (false, format!("not restored: {e}")),
                    Ok(()) => match store.replace(&w.id, &w.written, &w.original).await {
                        Ok(()) => (true, RESTORED.to_string()),
                        Err(e) => (false, format!("not restored: {e}")),
                    },
                },
            },
            Ok(_) => match w.undone {
                Some(line) => (true, left_original(line, "it changed since".into())),
                None => (
                    false,
                    "skipped: the record changed since kubehash wrote it".to_string(),
                ),
            },
        };
        journal.append(&Record::Rollback {
            container_id: w.id.clone(),
            result: detail.clone(),
        })?;
        info!(container = %w.id, result = %detail, "rollback");
        out.push(CheckOutcome {
            manifest: None,
            container_id: w.id,
            name: w.name,
            ok,
            detail,
        });
    }
    for pin in contents.pins().into_iter().rev() {
        let (ok, detail) = unpin(&pin);
        journal.append(&Record::Unpinned {
            path: pin.path.clone(),
            result: detail.clone(),
        })?;
        info!(manifest = %pin.path, result = %detail, "rollback");
        out.push(CheckOutcome {
            container_id: String::new(),
            name: format!("manifest {}", pin.path),
            manifest: Some(pin.path),
            ok,
            detail,
        });
    }
    Ok(out)
}

/// Restores a pinned manifest's original text, only while it holds exactly the pinned text, and
/// only an original that [`check_pin`] proves (the journal was validated the same way).
fn unpin(pin: &JournaledPin) -> (bool, String) {
    let path = Path::new(&pin.path);
    match std::fs::read(path) {
        Err(e) => match pin.undone {
            Some(line) => (true, left_original(line, format!("it cannot be read: {e}"))),
            None => (false, format!("skipped: {e}")),
        },
        Ok(now) if now == pin.original => (true, ALREADY_ORIGINAL_TEXT.into()),
        Ok(now) if now == pin.written => {
            if let Err(e) = check_pin(&pin.original, &pin.written, &pin.uid) {
                return (
                    false,
                    format!(
                        "not restored: the journaled original (line {}) {e}",
                        pin.line
                    ),
                );
            }
            if let Some(to) = link_target(path) {
                return (
                    false,
                    format!(
                        "not restored: it is now a symbolic link (to {}), which kubehash does not replace",
                        to.display()
                    ),
                );
            }
            // Dated as it was before the pin, so that it reads as the file its pod started from.
            match write_atomically_dated(path, &pin.original, pin.original_modified) {
                Ok(()) => (true, RESTORED.to_string()),
                Err(e) => (false, format!("not restored: {e}")),
            }
        }
        Ok(_) => match pin.undone {
            Some(line) => (true, left_original(line, "it changed since".into())),
            None => (
                false,
                "skipped: the manifest changed since kubehash pinned it".into(),
            ),
        },
    }
}

/// The result for a record or manifest an earlier rollback (journal line `line`) left holding
/// its original, which kubehash has not written since, and which is no longer as it left it
/// (`now`): nothing of kubehash's is there to restore. The old kubelet has run since, and may
/// have removed the container, or the runtime re-serialized its record.
fn left_original(line: usize, now: String) -> String {
    format!(
        "nothing to restore: the rollback at journal line {line} left it original, and kubehash has not written it since ({now})"
    )
}

/// Proves that the journaled original may replace the value kubehash wrote: it is exactly the
/// written value with the hash annotations set back to the original's, and passes the same
/// checks as an edit made by apply.
fn restorable(format: &dyn RecordFormat, w: &JournaledWrite) -> Result<(), Problem> {
    let original = format
        .stored_hashes(&w.id, &w.original)
        .map_err(|e| Problem(format!("does not load: {e}")))?;
    let hash = original.hash.ok_or("has no hash annotation")?;
    let written = format.stored_hashes(&w.id, &w.written)?;
    if original.without_resources.is_some() != written.without_resources.is_some() {
        return Err("differs in which hash annotations it holds".into());
    }
    let expected = format.set_hashes(
        &w.id,
        &w.written,
        &hash,
        original.without_resources.as_deref(),
    )?;
    if expected != w.original {
        return Err("differs from the written value in more than the hash annotations".into());
    }
    format.check_edit(&w.id, &w.written, &w.original)
}

/// Proves the journaled original of `w` against the pods' specs when given, else against the
/// specs apply journaled; a write journaled without its spec (before apply kept them) is not
/// proved, and not restored, without the pods.
fn proof(
    specs: Option<&NodeSpecs>,
    format: &dyn RecordFormat,
    w: &JournaledWrite,
) -> Result<(), Problem> {
    match (specs, &w.original_spec, &w.written_spec) {
        (Some(specs), _, _) => {
            let spec = specs.get(&w.id).ok_or(
                "no spec of the container's pod in the pods given, to prove the original against",
            )?;
            proven(spec, spec, Against::Pods, format, w)
        }
        (None, Some(then), Some(last)) => proven(then, last, Against::Journal, format, w),
        // Never restored on the values' word alone: they prove only each other.
        (None, _, _) => Err(Problem(format!(
            "the journal holds no spec of the write (line {}) to prove the original against (kubehash before 2026-11-28 kept none): give the pods (--cluster or -i PODS)",
            w.first_line
        ))),
    }
}

/// Where the specs an original is proved against come from.
#[derive(Clone, Copy)]
enum Against {
    /// The pods given, as they are now.
    Pods,
    /// The journal's write records, as apply proved them.
    Journal,
}

impl Against {
    fn what(self) -> &'static str {
        match self {
            Against::Pods => "the pod's spec",
            Against::Journal => "the spec apply journaled",
        }
    }

    /// Why kubelet T's hash of the spec would not be the hash in the record.
    fn not_written(self) -> &'static str {
        match self {
            Against::Pods => "the spec changed since apply",
            Against::Journal => "the journal does not hold the spec apply wrote from",
        }
    }
}

/// Proves the journaled original of `w`: kubelet T's hash of `last` (the spec of the last write)
/// is the written hash, and kubelet F's hash of `then` (the spec of the first) is the original's
/// (and F's hashWithoutResources, where F writes one and the original holds one).
fn proven(
    then: &serde_json::Value,
    last: &serde_json::Value,
    against: Against,
    format: &dyn RecordFormat,
    w: &JournaledWrite,
) -> Result<(), Problem> {
    let what = against.what();
    let version = |v: &str, which: &str| {
        v.parse::<KubeletVersion>()
            .map_err(|e| Problem(format!("the journal's {which} kubelet: {e}")))
    };
    let from = version(
        w.from
            .as_deref()
            .ok_or("the journal does not name the kubelet whose hash the original holds")?,
        "old",
    )?;
    let to = version(&w.to, "new")?;
    let hashes = |spec, v| {
        hash_container(spec, &[v], &w.name)
            .map_err(|e| Problem(format!("{what} does not hash: {e}")))
    };
    let (of_then, of_last) = (hashes(then, from)?, hashes(last, to)?);
    let original = format.stored_hashes(&w.id, &w.original)?;
    let written = format.stored_hashes(&w.id, &w.written)?;
    let hash_to = of_last.get(to).map(format_hash).unwrap_or_default();
    if written.hash.as_deref() != Some(hash_to.as_str()) {
        return Err(Problem(format!(
            "kubelet {to}'s hash of {what} is {hash_to}, not the written {} (line {}): {}",
            written.hash.unwrap_or_default(),
            w.last_line,
            against.not_written()
        )));
    }
    let hash_from = of_then.get(from).map(format_hash).unwrap_or_default();
    if original.hash.as_deref() != Some(hash_from.as_str()) {
        return Err(Problem(format!(
            "kubelet {from}'s hash of {what} is {hash_from}, not the journaled original's {} (line {})",
            original.hash.unwrap_or_default(),
            w.first_line
        )));
    }
    if let (Some(want), Some(held)) = (
        of_then.get_without_resources(from).map(format_hash),
        original.without_resources,
    ) {
        if want != held {
            return Err(Problem(format!(
                "kubelet {from}'s hashWithoutResources of {what} is {want}, not the journaled original's {held} (line {})",
                w.first_line
            )));
        }
    }
    // Kubelet T's hash may cover less than F's (name and image, from 1.31), so the hashes alone
    // let an original hold F's hash of a spec changed since apply in what T does not hash. The
    // record, which holds what the container was created with, tells them apart.
    let created = format.created_with(&w.id, &w.written)?;
    for spec in [then, last] {
        if let Some(why) = contradiction(spec, &created) {
            return Err(Problem(format!(
                "{why} ({what}): the original would hide that from kubelet {from}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::rewrite::gate::Open;
    use crate::rewrite::journal::read;
    use crate::rewrite::journal::tests::{begin, with_spec, write_record, BEFORE, ID};
    use crate::runtime::containerd::METADATA;

    /// Records in memory, replaced only while they hold what is expected, as containerd's are.
    pub(crate) struct Records(Mutex<HashMap<String, Vec<u8>>>);

    impl Records {
        /// Container [`ID`]'s record holding `value`.
        pub(crate) fn holding(value: &[u8]) -> Self {
            Records(Mutex::new(HashMap::from([(
                ID.to_string(),
                value.to_vec(),
            )])))
        }
        /// What container [`ID`]'s record holds now.
        pub(crate) fn now(&self) -> Option<Vec<u8>> {
            self.0.lock().unwrap().get(ID).cloned()
        }
    }

    impl RecordStore for Records {
        fn format(&self) -> &dyn RecordFormat {
            &METADATA
        }
        fn runtime(&self) -> String {
            "containerd 1.7.0".into()
        }
        async fn read(&self, id: &str) -> Result<Vec<u8>> {
            let now = self.0.lock().unwrap().get(id).cloned();
            now.ok_or_else(|| Error::record(id, "not found".into()))
        }
        async fn replace(&self, id: &str, expected: &[u8], new: &[u8]) -> Result<()> {
            let mut records = self.0.lock().unwrap();
            match records.get(id) {
                Some(v) if v == expected => {
                    records.insert(id.to_string(), new.to_vec());
                    Ok(())
                }
                _ => Err(Error::record(id, "changed".into())),
            }
        }
    }

    /// A record of the container as kubelet `v` created it from `spec`; `extra` re-serializes
    /// it with one more key, as a newer containerd may.
    fn record(spec: &serde_json::Value, v: &str, extra: bool) -> Vec<u8> {
        let v: KubeletVersion = v.parse().unwrap();
        let h = format_hash(hash_container(spec, &[v], "p").unwrap().get(v).unwrap());
        let base = match extra {
            false => BEFORE.trim_end().to_string(),
            true => BEFORE.trim_end().replacen(
                r#""Metadata":{"#,
                r#""Metadata":{"ImageDigest":"sha256:1","#,
                1,
            ),
        };
        METADATA.set_hashes(ID, base.as_bytes(), &h, None).unwrap()
    }

    fn write(old: &[u8], new: &[u8], spec: &serde_json::Value) -> Record {
        let text = |v: &[u8]| String::from_utf8(v.to_vec()).unwrap();
        with_spec(write_record(&text(old), &text(new)), spec.clone())
    }

    fn restored() -> Record {
        Record::Rollback {
            container_id: ID.into(),
            result: RESTORED.into(),
        }
    }

    async fn roll_back(records: &[Record], store: &Records) -> CheckOutcome {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let lines: String = records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect();
        std::fs::write(&path, lines).unwrap();
        let contents = read(&path).unwrap();
        let mut out = rollback(store, &path, contents, &mut Open, None)
            .await
            .unwrap();
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    /// A try rolled back, then another: rollback restores what the record held before the
    /// latest try's write, ends nothing it must still restore, and has nothing to restore in a
    /// container an earlier rollback left original that is gone or changed since.
    #[tokio::test]
    async fn rollback_after_a_second_try_restores_that_try_and_leaves_the_first_alone() {
        let spec = json!({"name": "app", "image": "docker.io/local/app:1"});
        let (o1, n1) = (record(&spec, "1.30", false), record(&spec, "1.31", false));
        // Between the tries, a newer containerd re-serialized the record.
        let (o2, n2) = (record(&spec, "1.30", true), record(&spec, "1.31", true));
        let two_tries = [
            begin(),
            write(&o1, &n1, &spec),
            restored(),
            begin(),
            write(&o2, &n2, &spec),
        ];
        let store = Records::holding(&n2);
        let out = roll_back(&two_tries, &store).await;
        assert!(out.ok && out.detail == RESTORED, "{out:?}");
        assert_eq!(
            store.now(),
            Some(o2.clone()),
            "what it held before the second try's write"
        );

        let first_try = [begin(), write(&o1, &n1, &spec), restored(), begin()];
        // Gone since (the old kubelet removed it), or changed since: nothing to restore.
        let gone = Records(Mutex::new(HashMap::new()));
        let out = roll_back(&first_try, &gone).await;
        assert!(
            out.ok && out.detail.starts_with("nothing to restore"),
            "{out:?}"
        );
        assert_eq!(gone.now(), None);
        let changed = Records::holding(&o2);
        let out = roll_back(&first_try, &changed).await;
        assert!(
            out.ok && out.detail.starts_with("nothing to restore"),
            "{out:?}"
        );
        assert_eq!(changed.now(), Some(o2.clone()), "written nothing");
        // A line claiming a restore that never was (forged, say) hides nothing: the record
        // holding kubehash's value is restored, proved as ever.
        let forged = Records::holding(&n1);
        let out = roll_back(&first_try, &forged).await;
        assert!(out.ok && out.detail == RESTORED, "{out:?}");
        assert_eq!(forged.now(), Some(o1.clone()));
        // Never restored, then gone: still a failure, as before.
        let gone = Records(Mutex::new(HashMap::new()));
        let out = roll_back(&[begin(), write(&o1, &n1, &spec)], &gone).await;
        assert!(!out.ok && out.detail.starts_with("skipped"), "{out:?}");
    }

    /// The same for a pinned manifest: one an earlier rollback left original, gone or changed
    /// since, has nothing to restore; one still holding the pinned text is restored.
    #[test]
    fn a_manifest_an_earlier_rollback_left_original_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.yaml");
        let original = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: m\n".to_vec();
        let written = crate::rewrite::pin::pin_text(&original, "u-1").unwrap();
        let pin = |undone| JournaledPin {
            path: path.display().to_string(),
            uid: "u-1".into(),
            original: original.clone(),
            written: written.clone(),
            line: 2,
            original_modified: None,
            undone,
        };
        let (ok, detail) = unpin(&pin(Some(3)));
        assert!(ok && detail.starts_with("nothing to restore"), "{detail}");
        std::fs::write(&path, b"edited since").unwrap();
        let (ok, detail) = unpin(&pin(Some(3)));
        assert!(ok && detail.starts_with("nothing to restore"), "{detail}");
        assert_eq!(std::fs::read(&path).unwrap(), b"edited since");
        let (ok, detail) = unpin(&pin(None));
        assert!(!ok && detail.starts_with("skipped"), "{detail}");
        std::fs::write(&path, &written).unwrap();
        let (ok, detail) = unpin(&pin(Some(3)));
        assert!(ok && detail == RESTORED, "{detail}");
        assert_eq!(std::fs::read(&path).unwrap(), original);
    }
}
