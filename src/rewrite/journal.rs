//! The node agent's journal: an append-only JSON Lines file, fsync'd before every write to the
//! runtime, holding the full old and new values of each record kubehash changes, so that an
//! interrupted `apply` can be resumed, `verify` can compare, and `rollback` can restore every
//! record byte for byte.
//!
//! There is one journal per node and upgrade (`<dir>/<from>-to-<to>.jsonl`), continued by every
//! `apply` run for that upgrade, so `verify` and `rollback` see every write of it, whatever was
//! interrupted and re-run. Records, one per line:
//! * `{"kind":"begin", …}` first in the file, and once per `apply` run (versions, runtime, time);
//! * `{"kind":"write", "container_id", "old_value", "new_value", "spec", …}` just before a write
//!   (values base64, exactly as stored; `spec` the container spec apply proved the write
//!   against, absent from journals before 2026-11-28);
//! * `{"kind":"written", "container_id"}` once the record was read back holding the new value;
//! * `{"kind":"rollback", "container_id", "result"}` for each container `rollback` handled;
//! * `{"kind":"pin", "path", "uid", "old_value", "new_value", "old_modified_ns"}` just before a
//!   static pod's manifest is replaced with its pinned text (the last, the file's modification
//!   time, absent from journals before 2026-11-28), `{"kind":"pinned", "path"}` once it is in
//!   place, and `{"kind":"unpinned", "path", "result"}` for each manifest `rollback` handled.
//!
//! Reading is strict, because rollback writes what the journal says: a file whose first line is
//! not a `begin` record is not a journal; a complete line that does not parse, bad base64, or a
//! `write` whose two values differ in more than the hash annotations is an error naming the line.
//! Only a last line without its newline (a crash during an append) is tolerated: no write to the
//! runtime follows an append that did not reach the disk. [`Journal::open`] moves such a torn
//! tail aside (to `<journal>.torn`) before appending, so the next record starts on a line of its
//! own; the next `apply` plans every container again, so the torn record's container is checked
//! anew.
//!
//! An upgrade tried again after a rollback continues the journal. A `rollback` record that found
//! or put back a container's original ends that container's history: a later `write` starts
//! afresh, and one not written again after the next `begin` belongs to the earlier try
//! ([`Contents::attempt_writes`]). Manifests alike.
//!
//! One process writes a journal at a time: [`Journal::open`] and [`Journal::continue_from`] lock
//! the file (`flock`), so apply, rollback and the agent never append, or cut a torn tail, while
//! another does.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Problem, Result};
use crate::rewrite::durable::make_dir;
use crate::runtime::record::{format_named, RecordFormat};

/// Where journals go by default.
pub const DEFAULT_DIR: &str = "/var/lib/kubehash/journal";

/// One journal line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Record {
    Begin {
        at_unix: u64,
        to: String,
        from: Option<String>,
        /// The runtime's name and version (`containerd 1.7.24`). Journals of kubehash 0.1 call it
        /// `containerd` and hold the version alone.
        #[serde(alias = "containerd")]
        runtime: String,
    },
    Write {
        at_unix: u64,
        container_id: String,
        pod: String,
        container: String,
        verdict: String,
        old_hash: String,
        new_hash: String,
        /// base64 of the extension value before the write.
        old_value: String,
        /// base64 of the extension value written.
        new_value: String,
        /// The container's spec apply proved the write against (absent from journals before
        /// 2026-11-28): rollback without the pods proves the original against it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<serde_json::Value>,
    },
    Written {
        container_id: String,
    },
    Rollback {
        container_id: String,
        result: String,
    },
    /// Just before a static pod's manifest is replaced by its pinned text.
    Pin {
        at_unix: u64,
        path: String,
        uid: String,
        /// base64 of the manifest before and after.
        old_value: String,
        new_value: String,
        /// When the manifest was last modified before the pin (nanoseconds since the epoch),
        /// which rollback gives it back: a manifest modified well after its pod's sandbox was
        /// created is not pinned.
        /// Journals before 2026-11-28 do not hold it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old_modified_ns: Option<u64>,
    },
    /// The pinned manifest is in place (renamed and synced).
    Pinned {
        path: String,
    },
    /// What rollback did with a pinned manifest.
    Unpinned {
        path: String,
        result: String,
    },
}

pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn decode(s: &str) -> std::result::Result<Vec<u8>, Problem> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| Problem(format!("bad base64 in journal: {e}")))
}

/// The journal of the upgrade `from` → `to` in `dir`.
pub fn path_for(dir: &Path, from: Option<&str>, to: &str) -> PathBuf {
    dir.join(format!("{}-to-{to}.jsonl", from.unwrap_or("unknown")))
}

/// An open journal, appended to and synced record by record.
pub struct Journal {
    path: PathBuf,
    file: File,
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        source_name: format!("journal {}", path.display()),
        source: e,
    }
}

fn bad_journal(path: &Path, reason: String) -> Error {
    Error::Journal {
        path: path.display().to_string(),
        reason,
    }
}

fn sync_dir(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(path, e))?;
    }
    Ok(())
}

impl Journal {
    /// Opens a journal for appending, creating it (mode 0600, its directory 0700) if needed. An
    /// existing file must be a kubehash journal; a torn last line is moved to `<journal>.torn`
    /// first, and returned. The journal is this process's until the [`Journal`] is dropped
    /// (a `flock`, see `lock`).
    pub fn open(path: &Path) -> Result<(Journal, Option<String>)> {
        let (journal, held) = Journal::open_read(path)?;
        Ok((journal, held.torn.map(|t| t.text)))
    }

    /// [`Journal::open`], also giving what the journal held when this process took it (nothing
    /// for a new one; its torn tail, if any, is the one set aside), so that the caller need
    /// not read it again.
    pub fn open_read(path: &Path) -> Result<(Journal, Contents)> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            make_dir(dir, 0o700).map_err(|e| Error::Io {
                source_name: format!("journal directory {}", dir.display()),
                source: e,
            })?;
        }
        let file = lock(path, true)?;
        // Judged once it is ours: another process may have made it since this one looked.
        if file.metadata().map_err(|e| io_error(path, e))?.len() == 0 {
            // New, or left empty by a run that died before its first record: nothing to keep.
            // Make the file's directory entry durable too.
            sync_dir(path)?;
            let (journal, _) = Journal::continue_after(path, file, None)?;
            return Ok((journal, Contents::default()));
        }
        // Read once it is ours: what another process appended before is seen.
        let contents = read(path)?;
        let (journal, _) = Journal::continue_after(path, file, Some(&contents))?;
        Ok((journal, contents))
    }

    /// [`Journal::open`] for a journal whose `contents` were just read (rollback reads it whole
    /// before it writes): the torn tail they found is set aside, and the file is not read again,
    /// but it must still be as long as it was when read: what another process appended since
    /// was not seen.
    pub fn continue_from(path: &Path, contents: &Contents) -> Result<(Journal, Option<String>)> {
        let file = lock(path, false)?;
        let now = file.metadata().map_err(|e| io_error(path, e))?.len();
        if now != contents.len {
            return Err(bad_journal(
                path,
                "it changed since kubehash read it (another process wrote to it); run again".into(),
            ));
        }
        Journal::continue_after(path, file, Some(contents))
    }

    /// `contents` is `None` for a journal that did not exist.
    fn continue_after(
        path: &Path,
        file: File,
        contents: Option<&Contents>,
    ) -> Result<(Journal, Option<String>)> {
        let torn = match contents.and_then(|c| c.torn.as_ref()) {
            Some(t) => {
                set_aside(path, t)?;
                Some(t.text.clone())
            }
            None => None,
        };
        Ok((
            Journal {
                path: path.to_path_buf(),
                file,
            },
            torn,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record and waits until it is on disk.
    pub fn append(&mut self, r: &Record) -> Result<()> {
        let mut line = serde_json::to_vec(r).map_err(|e| io_error(&self.path, e.into()))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.sync_all())
            .map_err(|e| io_error(&self.path, e))
    }
}

/// The journal at `path` opened for appending (made if `create`) and locked (`flock`) for this
/// process alone: `apply`, `rollback` and the agent each append and cut torn tails on the
/// assumption that nobody else does, so a second one refuses instead of interleaving with the
/// first. The lock goes with the file when it is closed, or when the process dies; a process
/// killed a moment ago may still be exiting, so a held lock is waited for [`LOCK_WAIT`] first.
fn lock(path: &Path, create: bool) -> Result<File> {
    let file = OpenOptions::new()
        .create(create)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    match crate::rewrite::durable::lock_within(&file, LOCK_WAIT) {
        Ok(true) => Ok(file),
        Ok(false) => Err(Error::Input {
            source_name: path.display().to_string(),
            reason: "another kubehash process (apply, rollback or the agent) is writing this \
                     journal; run again once it has finished"
                .into(),
        }),
        Err(e) => Err(io_error(path, e)),
    }
}

/// How long a journal held by another process is waited for.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Copies a torn tail to `<journal>.torn` (appending, synced), then cuts it from the journal.
fn set_aside(path: &Path, torn: &Torn) -> Result<()> {
    let mut aside_name = path.as_os_str().to_owned();
    aside_name.push(".torn");
    let aside = PathBuf::from(aside_name);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&aside)
        .map_err(|e| io_error(&aside, e))?;
    f.write_all(torn.text.as_bytes())
        .and_then(|_| f.write_all(b"\n"))
        .and_then(|_| f.sync_all())
        .map_err(|e| io_error(&aside, e))?;
    let j = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    j.set_len(torn.offset)
        .and_then(|_| j.sync_all())
        .map_err(|e| io_error(path, e))?;
    sync_dir(&aside)
}

/// A last line without its newline: an append that a crash cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    /// 1-based line number.
    pub line: usize,
    /// Where it starts in the file.
    pub offset: u64,
    pub text: String,
}

/// A journal as read: its records, each with its line number, and a torn last line if any.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    pub records: Vec<(usize, Record)>,
    pub torn: Option<Torn>,
    /// The file's length when read, in bytes.
    pub len: u64,
}

impl Contents {
    /// The time of the last `begin` record (the last `apply` run).
    pub fn last_begin(&self) -> Option<u64> {
        self.records.iter().rev().find_map(|(_, r)| match r {
            Record::Begin { at_unix, .. } => Some(*at_unix),
            _ => None,
        })
    }

    /// Whether rollback ran after the last `begin` (restoring or not): that apply's plan then
    /// predicted what a kubelet that did not stay would do.
    pub fn rolled_back(&self) -> bool {
        self.records
            .iter()
            .rev()
            .take_while(|(_, r)| !matches!(r, Record::Begin { .. }))
            .any(|(_, r)| matches!(r, Record::Rollback { .. } | Record::Unpinned { .. }))
    }

    /// The line of the last `begin` record (the first line is one).
    fn last_begin_line(&self) -> usize {
        self.records
            .iter()
            .rev()
            .find(|(_, r)| matches!(r, Record::Begin { .. }))
            .map_or(0, |(line, _)| *line)
    }

    /// Per container, in order of first write: the value before kubehash's first write and the
    /// value of its last one (both validated when read). A write after a rollback that found or
    /// put back the original starts afresh: its own old value is the original (the record may
    /// have changed in between, e.g. re-serialized by a newer containerd). [`JournaledWrite::undone`]
    /// marks a container such a rollback ended and kubehash has not written since.
    pub fn writes(&self) -> Vec<JournaledWrite> {
        let mut out: Vec<JournaledWrite> = Vec::new();
        // The upgrade of the run each write belongs to: the begin record before it.
        let mut upgrade: (Option<&String>, &str) = (None, "");
        for (line, r) in &self.records {
            match r {
                Record::Begin { from, to, .. } => upgrade = (from.as_ref(), to),
                Record::Rollback {
                    container_id,
                    result,
                } if holds_original(result) => {
                    if let Some(j) = out.iter_mut().find(|j| &j.id == container_id) {
                        j.undone = Some(*line);
                    }
                }
                _ => {}
            }
            let Record::Write {
                container_id,
                pod,
                container,
                old_value,
                new_value,
                new_hash,
                spec,
                ..
            } = r
            else {
                continue;
            };
            // Validated by `read`.
            let (original, written) = (
                decode(old_value).unwrap_or_default(),
                decode(new_value).unwrap_or_default(),
            );
            let first = JournaledWrite {
                id: container_id.clone(),
                name: format!("{pod}/{container}"),
                original,
                written: written.clone(),
                new_hash: new_hash.clone(),
                first_line: *line,
                last_line: *line,
                from: upgrade.0.cloned(),
                to: upgrade.1.to_string(),
                original_spec: spec.clone(),
                written_spec: spec.clone(),
                undone: None,
            };
            match out.iter_mut().find(|j| &j.id == container_id) {
                Some(j) if j.undone.is_some() => *j = first,
                Some(j) => {
                    j.written = written;
                    j.new_hash = new_hash.clone();
                    j.last_line = *line;
                    j.to = upgrade.1.to_string();
                    j.written_spec = spec.clone();
                }
                None => out.push(first),
            }
        }
        out
    }

    /// What the upgrade attempt the last `begin` belongs to wrote: [`Contents::writes`] without
    /// the containers a rollback before it ended, which kubehash has not written since. Those
    /// belong to an earlier attempt on this journal, rolled back; the old kubelet has run them
    /// since, and may have removed them.
    pub fn attempt_writes(&self) -> Vec<JournaledWrite> {
        let begin = self.last_begin_line();
        let mut writes = self.writes();
        writes.retain(|w| after(w.undone, begin));
        writes
    }
}

/// Whether what a rollback at line `undone` ended (if one did) is still the attempt begun at line
/// `begin`: that rollback came after it.
fn after(undone: Option<usize>, begin: usize) -> bool {
    undone.is_none_or(|line| line > begin)
}

/// Whether a rollback record's result says the record (or manifest) held its original after
/// it: put back, or found so.
fn holds_original(result: &str) -> bool {
    [RESTORED, ALREADY_ORIGINAL, ALREADY_ORIGINAL_TEXT].contains(&result)
}

/// The results of a rollback record after which the record or manifest holds its original.
pub const RESTORED: &str = "restored";
pub const ALREADY_ORIGINAL: &str = "already holds the original value";
pub const ALREADY_ORIGINAL_TEXT: &str = "already holds the original text";

impl Contents {
    /// Per manifest, in order of first pin: the text before kubehash's pin and the pinned text
    /// (both validated when read). A pin after a rollback that found or put back the original
    /// starts afresh, as a write does ([`Contents::writes`]).
    pub fn pins(&self) -> Vec<JournaledPin> {
        let mut out: Vec<JournaledPin> = Vec::new();
        for (line, r) in &self.records {
            if let Record::Unpinned { path, result } = r {
                if let Some(p) = out.iter_mut().find(|p| &p.path == path) {
                    if holds_original(result) {
                        p.undone = Some(*line);
                    }
                }
            }
            let Record::Pin {
                path,
                uid,
                old_value,
                new_value,
                old_modified_ns,
                ..
            } = r
            else {
                continue;
            };
            let pin = JournaledPin {
                path: path.clone(),
                uid: uid.clone(),
                original: decode(old_value).unwrap_or_default(),
                written: decode(new_value).unwrap_or_default(),
                line: *line,
                original_modified: old_modified_ns
                    .map(|ns| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns)),
                undone: None,
            };
            match out.iter_mut().find(|p| &p.path == path) {
                Some(p) if p.undone.is_some() => *p = pin,
                // Pinned again after a crash before the rename: the same texts.
                Some(_) => {}
                None => out.push(pin),
            }
        }
        out
    }

    /// What the upgrade attempt the last `begin` belongs to pinned, as
    /// [`Contents::attempt_writes`].
    pub fn attempt_pins(&self) -> Vec<JournaledPin> {
        let begin = self.last_begin_line();
        let mut pins = self.pins();
        pins.retain(|p| after(p.undone, begin));
        pins
    }
}

/// What a journal says about one manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournaledPin {
    pub path: String,
    pub uid: String,
    pub original: Vec<u8>,
    pub written: Vec<u8>,
    /// The journal line of its `pin` record.
    pub line: usize,
    /// When the original was last modified, where the journal says.
    pub original_modified: Option<std::time::SystemTime>,
    /// The line of the rollback record that found or put back the original, when kubehash has
    /// not pinned the manifest since.
    pub undone: Option<usize>,
}

/// What a journal says about one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournaledWrite {
    pub id: String,
    /// `namespace/pod/container`
    pub name: String,
    /// The value before kubehash's first write.
    pub original: Vec<u8>,
    /// The value of kubehash's last write.
    pub written: Vec<u8>,
    pub new_hash: String,
    /// Journal lines of the first and last `write` record.
    pub first_line: usize,
    pub last_line: usize,
    /// The old kubelet of the run that made the first write, whose hash the original holds
    /// (`None`: that run did not name it).
    pub from: Option<String>,
    /// The new kubelet of the run that made the last write, whose hash the written value holds.
    pub to: String,
    /// The specs apply proved the first and the last write against, where the journal holds
    /// them: kubelet `from`'s hash of the first is the original's, `to`'s of the last the
    /// written hash.
    pub original_spec: Option<serde_json::Value>,
    pub written_spec: Option<serde_json::Value>,
    /// The line of the rollback record that found or put back the original, when kubehash has
    /// not written the container since.
    pub undone: Option<usize>,
}

/// Reads and validates a whole journal (see the module notes). Any error names the line.
pub fn read(path: &Path) -> Result<Contents> {
    let bytes = std::fs::read(path).map_err(|e| io_error(path, e))?;
    let mut out = Contents {
        len: bytes.len() as u64,
        ..Contents::default()
    };
    let mut offset = 0usize;
    let mut line_no = 0usize;
    // Set by each begin line; the first line must be one.
    let mut format: &dyn RecordFormat = &crate::runtime::containerd::METADATA;
    while offset < bytes.len() {
        line_no += 1;
        let (line, complete) = match bytes[offset..].iter().position(|&b| b == b'\n') {
            Some(n) => (&bytes[offset..offset + n], true),
            None => (&bytes[offset..], false),
        };
        let start = offset;
        offset += line.len() + usize::from(complete);
        if !complete {
            out.torn = Some(Torn {
                line: line_no,
                offset: start as u64,
                text: String::from_utf8_lossy(line).into_owned(),
            });
            break;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let at = |reason: String| bad_journal(path, format!("line {line_no}: {reason}"));
        let record: Record = serde_json::from_slice(line).map_err(|e| {
            if out.records.is_empty() {
                bad_journal(
                    path,
                    format!(
                        "not a kubehash journal (line {line_no} is not a kubehash record: {e})"
                    ),
                )
            } else {
                at(format!("not a journal record: {e}"))
            }
        })?;
        if out.records.is_empty() && !matches!(record, Record::Begin { .. }) {
            return Err(bad_journal(
                path,
                format!("not a kubehash journal (line {line_no} is not a begin record)"),
            ));
        }
        if let Record::Begin { runtime, .. } = &record {
            format = format_named(runtime)
                .ok_or_else(|| at(format!("kubehash knows no runtime named {runtime:?}")))?;
        }
        if let Record::Write {
            container_id,
            old_value,
            new_value,
            old_hash,
            new_hash,
            ..
        } = &record
        {
            let old = decode(old_value).map_err(|e| at(format!("old_value: {e}")))?;
            let new = decode(new_value).map_err(|e| at(format!("new_value: {e}")))?;
            format
                .check_edit(container_id, &old, &new)
                .map_err(|e| at(format!("container {container_id}: {e}")))?;
            let stored = |v: &[u8]| {
                format
                    .stored_hashes(container_id, v)
                    .map(|h| h.hash.unwrap_or_default())
                    .unwrap_or_default()
            };
            if stored(&old) != *old_hash || stored(&new) != *new_hash {
                return Err(at(format!(
                    "container {container_id}: the values do not hold the hashes the record names"
                )));
            }
        }
        if let Record::Pin {
            path: manifest,
            uid,
            old_value,
            new_value,
            ..
        } = &record
        {
            let old = decode(old_value).map_err(|e| at(format!("old_value: {e}")))?;
            let new = decode(new_value).map_err(|e| at(format!("new_value: {e}")))?;
            crate::rewrite::pin::check_pin(&old, &new, uid)
                .map_err(|e| at(format!("manifest {manifest}: {e}")))?;
        }
        out.records.push((line_no, record));
    }
    if out.records.is_empty() {
        return Err(bad_journal(
            path,
            "not a kubehash journal (it holds no record)".into(),
        ));
    }
    Ok(out)
}

/// The journal `named`, or else the latest in `dir` ([`latest`]), with what it holds.
pub fn named_or_latest(named: Option<&Path>, dir: &Path) -> Result<(PathBuf, Contents)> {
    match named {
        Some(j) => Ok((j.to_path_buf(), read(j)?)),
        None => latest(dir),
    }
}

/// The journal of the latest upgrade in a directory: the one whose last `apply` run began last,
/// with what it holds (every journal there is read, and must validate).
pub fn latest(dir: &Path) -> Result<(PathBuf, Contents)> {
    let mut best: Option<(u64, PathBuf, Contents)> = None;
    let entries = match std::fs::read_dir(dir) {
        // No directory: `node apply` never ran here with it (it makes it).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Input {
                source_name: dir.display().to_string(),
                reason: "no such directory, so no journal (node apply makes it); pass --journal"
                    .into(),
            });
        }
        r => r.map_err(|e| io_error(dir, e))?,
    };
    for e in entries {
        let p = e.map_err(|e| io_error(dir, e))?.path();
        // An empty one was left by an apply that died before its first record: no upgrade.
        let empty = std::fs::metadata(&p).is_ok_and(|m| m.len() == 0);
        if p.extension().is_none_or(|x| x != "jsonl") || empty {
            continue;
        }
        let contents = read(&p)?;
        let began = contents.last_begin().unwrap_or(0);
        if best.as_ref().is_none_or(|(t, q, _)| (began, &p) > (*t, q)) {
            best = Some((began, p, contents));
        }
    }
    best.map(|(_, p, c)| (p, c)).ok_or_else(|| Error::Input {
        source_name: dir.display().to_string(),
        reason: "no journal (*.jsonl) here; pass --journal".into(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const BEFORE: &str =
        include_str!("../../testdata/containerd/container_metadata_before.json");
    pub(crate) const ID: &str = "b30e6d77791dfde103e24c06d51931ab0ffd3d978f98c6ede1a6ddadc4a683ef";

    /// The begin record of an upgrade 1.30 → 1.31.
    pub(crate) fn begin() -> Record {
        Record::Begin {
            at_unix: 7,
            to: "1.31".into(),
            from: Some("1.30".into()),
            runtime: "containerd 1.7.0".into(),
        }
    }

    /// The write record of `old` → `new` in container [`ID`]'s record, without a spec.
    pub(crate) fn write_record(old: &str, new: &str) -> Record {
        let hash = |v: &str| {
            let m = crate::runtime::containerd::parse_metadata(v.as_bytes(), ID).unwrap();
            crate::runtime::containerd::stored_hashes(&m).0.unwrap()
        };
        Record::Write {
            at_unix: 8,
            container_id: ID.into(),
            pod: "ns/p".into(),
            container: "app".into(),
            verdict: "rewrite".into(),
            old_hash: hash(old),
            new_hash: hash(new),
            old_value: encode(old.as_bytes()),
            new_value: encode(new.as_bytes()),
            spec: None,
        }
    }

    pub(crate) fn with_spec(mut r: Record, with: serde_json::Value) -> Record {
        if let Record::Write { spec, .. } = &mut r {
            *spec = Some(with);
        }
        r
    }

    fn good() -> (String, String) {
        let old = BEFORE.trim_end().to_string();
        let new = String::from_utf8(
            crate::runtime::containerd::rewrite_hashes(old.as_bytes(), ID, "8e45cbd0", None)
                .unwrap(),
        )
        .unwrap();
        (old, new)
    }

    fn lines(records: &[Record]) -> String {
        records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect()
    }

    /// A rollback that found or put back the original ends a container's (or manifest's)
    /// history: the next write starts afresh, and the upgrade attempt begun after it does not
    /// own what it does not write again.
    #[test]
    fn a_rollback_ends_what_the_next_attempt_does_not_write_again() {
        let (old, new) = good();
        let other = |h: &str| {
            String::from_utf8(
                crate::runtime::containerd::rewrite_hashes(old.as_bytes(), ID, h, None).unwrap(),
            )
            .unwrap()
        };
        let rollback = |result: &str| Record::Rollback {
            container_id: ID.into(),
            result: result.into(),
        };
        let contents = |records: Vec<Record>| Contents {
            records: records.into_iter().zip(1..).map(|(r, l)| (l, r)).collect(),
            ..Contents::default()
        };
        let write = write_record(&old, &new);
        // Written, restored, then the next attempt writes it over another original.
        let (old2, new2) = (other("11111111"), other("22222222"));
        let c = contents(vec![
            begin(),
            write.clone(),
            rollback(RESTORED),
            begin(),
            write_record(&old2, &new2),
        ]);
        let w = &c.writes()[0];
        assert_eq!(
            (&w.original, &w.written),
            (&old2.clone().into_bytes(), &new2.clone().into_bytes())
        );
        assert_eq!((w.first_line, w.last_line, w.undone), (5, 5, None));
        assert_eq!(c.attempt_writes(), c.writes());
        // Restored (or found original), then not written again: no part of the next attempt.
        for done in [RESTORED, ALREADY_ORIGINAL] {
            let c = contents(vec![begin(), write.clone(), rollback(done), begin()]);
            assert_eq!(c.writes()[0].undone, Some(3));
            assert!(c.attempt_writes().is_empty());
            // Still this attempt's before another begin: verify after the rollback checks it.
            let c = contents(vec![begin(), write.clone(), rollback(done)]);
            assert_eq!(c.attempt_writes().len(), 1);
        }
        // A rollback that did not restore ends nothing: the record may hold what was written.
        let c = contents(vec![
            begin(),
            write.clone(),
            rollback("not restored: no"),
            begin(),
        ]);
        assert_eq!(c.writes()[0].undone, None);
        assert_eq!(c.attempt_writes().len(), 1);
        // Written again without a rollback in between: the first original stays.
        let c = contents(vec![
            begin(),
            write.clone(),
            begin(),
            write_record(&new, &new2),
        ]);
        let w = &c.writes()[0];
        assert_eq!(
            (&w.original, w.first_line, w.last_line),
            (&old.clone().into_bytes(), 2, 4)
        );

        // Manifests alike.
        let pin = |old: &str, new: &str| Record::Pin {
            at_unix: 9,
            path: "/m.yaml".into(),
            uid: "u".into(),
            old_value: encode(old.as_bytes()),
            new_value: encode(new.as_bytes()),
            old_modified_ns: None,
        };
        let unpinned = |result: &str| Record::Unpinned {
            path: "/m.yaml".into(),
            result: result.into(),
        };
        let c = contents(vec![
            begin(),
            pin("a", "b"),
            unpinned(ALREADY_ORIGINAL_TEXT),
            begin(),
            pin("c", "d"),
        ]);
        let p = &c.pins()[0];
        assert_eq!(
            (&p.original[..], &p.written[..], p.line, p.undone),
            (&b"c"[..], &b"d"[..], 5, None)
        );
        let c = contents(vec![begin(), pin("a", "b"), unpinned(RESTORED), begin()]);
        assert_eq!(c.pins()[0].undone, Some(3));
        assert!(c.attempt_pins().is_empty());
        let c = contents(vec![
            begin(),
            pin("a", "b"),
            unpinned("skipped: x"),
            begin(),
            pin("a", "b"),
        ]);
        assert_eq!((c.pins()[0].line, c.attempt_pins().len()), (2, 1));
    }

    /// Someone's one-line file without a final newline, given as the journal: refused and left
    /// as it was, never taken for a journal whose last line was torn and cut away.
    #[test]
    fn a_lone_unfinished_line_is_no_journal_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("settings.json");
        let begin_cut = serde_json::to_vec(&begin()).unwrap()[..20].to_vec();
        for text in [
            &b"{\"a\":1}"[..],
            b"hello",
            b"{\"kind\":\"write\"",
            &begin_cut,
        ] {
            std::fs::write(&file, text).unwrap();
            let err = Journal::open(&file).err().unwrap().to_string();
            assert!(err.contains("not a kubehash journal"), "{err}");
            assert_eq!(std::fs::read(&file).unwrap(), text);
            assert!(!dir.path().join("settings.json.torn").exists());
        }
    }

    /// A file where the journal's directory should be: one line saying so, and nothing made.
    #[test]
    fn a_file_in_place_of_the_journal_directory_is_said_so() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("journal");
        std::fs::write(&file, b"x").unwrap();
        let err = Journal::open(&file.join("1.30-to-1.31.jsonl"))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            format!(
                "journal directory {}: a file is there, not a directory",
                file.display()
            )
        );
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
    }

    #[test]
    fn round_trip_torn_tail_set_aside_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(&dir.path().join("j"), Some("1.30"), "1.31");
        assert!(path.ends_with("j/1.30-to-1.31.jsonl"));
        let (mut j, torn) = Journal::open(&path).unwrap();
        assert_eq!(torn, None);
        let (old, new) = good();
        let w = write_record(&old, &new);
        j.append(&begin()).unwrap();
        j.append(&w).unwrap();
        drop(j);
        // A crash in the middle of the next append.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"kind\":\"wri")
            .unwrap();
        let got = read(&path).unwrap();
        assert_eq!(got.records, vec![(1, begin()), (2, w.clone())]);
        assert_eq!(got.torn.as_ref().map(|t| t.line), Some(3));
        // The next run sets the torn tail aside and starts its records on a line of their own.
        let (mut j, torn) = Journal::open(&path).unwrap();
        assert_eq!(torn.as_deref(), Some("{\"kind\":\"wri"));
        j.append(&Record::Written {
            container_id: ID.into(),
        })
        .unwrap();
        let got = read(&path).unwrap();
        assert_eq!(got.records.len(), 3);
        assert!(got.torn.is_none());
        let aside = std::fs::read_to_string(dir.path().join("j/1.30-to-1.31.jsonl.torn")).unwrap();
        assert_eq!(aside, "{\"kind\":\"wri\n");
        assert_eq!(got.writes()[0].original, old.as_bytes());
        assert_eq!(got.writes()[0].written, new.as_bytes());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    /// Each write knows the upgrade whose proof it carries: the original the old kubelet of the
    /// run that first wrote it, the written value the new kubelet of the run that last did. A
    /// pin's modification time is read back, and a pin without one (older journals) reads too.
    #[test]
    fn writes_know_their_upgrade_and_pins_their_date() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let (old, new) = good();
        let later = Record::Begin {
            at_unix: 8,
            to: "1.32".into(),
            from: Some("1.31".into()),
            runtime: "containerd 1.7.0".into(),
        };
        let pin = |modified: Option<u64>| Record::Pin {
            at_unix: 9,
            path: "/m/etcd.yaml".into(),
            uid: "u".into(),
            old_value: encode(b"kind: Pod\nmetadata:\n  name: etcd\n"),
            new_value: encode(b"kind: Pod\nmetadata:\n  uid: \"u\"\n  name: etcd\n"),
            old_modified_ns: modified,
        };
        let records = [
            begin(),
            write_record(&old, &new),
            later,
            write_record(&new, &new),
            pin(Some(1_795_827_775_535_005_840)),
        ];
        std::fs::write(&path, lines(&records)).unwrap();
        let got = read(&path).unwrap();
        let w = &got.writes()[0];
        assert_eq!((w.from.as_deref(), w.to.as_str()), (Some("1.30"), "1.32"));
        assert_eq!((w.first_line, w.last_line), (2, 4));
        let p = &got.pins()[0];
        assert_eq!(
            p.original_modified,
            Some(
                std::time::UNIX_EPOCH + std::time::Duration::from_nanos(1_795_827_775_535_005_840)
            )
        );
        std::fs::write(&path, lines(&[begin(), pin(None)])).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("old_modified_ns"), "{text}");
        assert_eq!(read(&path).unwrap().pins()[0].original_modified, None);
    }

    /// A write carries the spec apply proved it against; the first write's is the original's,
    /// the last one's the written value's. A journal from before specs were kept still reads.
    #[test]
    fn writes_carry_the_specs_apply_proved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let (old, new) = good();
        let then =
            serde_json::json!({"name":"app","image":"a:1","resources":{"limits":{"cpu":"500m"}}});
        let last = serde_json::json!({"name":"app","image":"a:1"});
        let records = [
            begin(),
            with_spec(write_record(&old, &new), then.clone()),
            with_spec(write_record(&new, &new), last.clone()),
        ];
        std::fs::write(&path, lines(&records)).unwrap();
        let got = read(&path).unwrap();
        assert_eq!(got.records[1].1, records[1]);
        let w = &got.writes()[0];
        assert_eq!(
            (w.original_spec.as_ref(), w.written_spec.as_ref()),
            (Some(&then), Some(&last))
        );
        std::fs::write(&path, lines(&[begin(), write_record(&old, &new)])).unwrap();
        assert!(!std::fs::read_to_string(&path).unwrap().contains("\"spec\""));
        assert_eq!(read(&path).unwrap().writes()[0].original_spec, None);
    }

    /// One writer at a time: while a journal is open for appending, apply (open) and rollback
    /// (continue_from) elsewhere refuse, saying why, and write nothing; once it is closed they
    /// go on. Rollback also refuses a journal that grew since it read it.
    #[test]
    fn a_journal_has_one_writer_and_rollback_sees_all_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.30-to-1.31.jsonl");
        let (old, new) = good();
        let (mut first, _) = Journal::open(&path).unwrap();
        first.append(&begin()).unwrap();
        let read_before = read(&path).unwrap();
        let busy = |e: Error| {
            let e = e.to_string();
            assert!(e.contains("another kubehash process"), "{e}");
        };
        busy(Journal::open(&path).err().unwrap());
        busy(Journal::continue_from(&path, &read_before).err().unwrap());
        first.append(&write_record(&old, &new)).unwrap();
        drop(first);
        assert_eq!(
            read(&path).unwrap().records.len(),
            2,
            "nothing written by the refused"
        );
        let e = Journal::continue_from(&path, &read_before).err().unwrap();
        assert!(
            e.to_string().contains("changed since kubehash read it"),
            "{e}"
        );
        let (again, torn) = Journal::continue_from(&path, &read(&path).unwrap()).unwrap();
        assert_eq!(torn, None);
        // A holder that lets go within the wait (a killed process exiting) is waited for.
        let holder = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(again);
        });
        assert!(Journal::open(&path).is_ok());
        holder.join().unwrap();
    }

    /// Rolled back means a rollback record after the last apply's `begin`: one before it was
    /// of an earlier apply, whose plan is not the last one's.
    #[test]
    fn rolled_back_is_about_the_last_apply() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.30-to-1.31.jsonl");
        let (old, new) = good();
        let rollback = Record::Rollback {
            container_id: ID.into(),
            result: "restored".into(),
        };
        let rolled_back = |records: &[Record]| {
            std::fs::write(&path, lines(records)).unwrap();
            read(&path).unwrap().rolled_back()
        };
        let w = write_record(&old, &new);
        assert!(!rolled_back(&[begin(), w.clone()]));
        assert!(rolled_back(&[begin(), w.clone(), rollback.clone()]));
        assert!(!rolled_back(&[begin(), w.clone(), rollback, begin()]));
    }

    #[test]
    fn journals_of_kubehash_0_1_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1700000000-to-1.31.jsonl");
        let (old, new) = good();
        let mut text = r#"{"kind":"begin","at_unix":1700000000,"to":"1.31","from":"1.30","containerd":"1.6.20~ds1"}"#.to_string();
        text.push('\n');
        text.push_str(&lines(&[write_record(&old, &new)]));
        std::fs::write(&path, text).unwrap();
        let got = read(&path).unwrap();
        assert!(
            matches!(&got.records[0].1, Record::Begin { runtime, .. } if runtime == "1.6.20~ds1")
        );
        assert_eq!(got.writes().len(), 1);
    }

    #[test]
    fn what_is_not_a_valid_journal_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let (old, new) = good();
        let check = |text: String, want: &str| {
            std::fs::write(&path, text).unwrap();
            let e = read(&path).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} not in {e}");
            // Appending refuses as well: nothing is written to a file that is not a journal.
            assert!(Journal::open(&path).is_err());
        };
        // An empty file is not a journal to read, but one to start: it holds nothing to keep.
        std::fs::write(&path, "").unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("not a kubehash journal"));
        assert!(Journal::open(&path).is_ok());
        check("hello\n".into(), "not a kubehash journal");
        check(lines(&[write_record(&old, &new)]), "not a begin record");
        // One corrupted base64 character.
        let mut w = lines(&[begin(), write_record(&old, &new)]);
        let at = w.find("\"old_value\":\"").unwrap() + 20;
        w.replace_range(at..at + 1, "*");
        check(w, "line 2: old_value: bad base64");
        // An "original" that is another container's record, or a skeleton.
        let other = old.replace("\"Name\":\"", "\"Name\":\"x");
        check(
            lines(&[begin(), write_record(&other, &new)]),
            "line 2: container",
        );
        // A complete line that does not parse, even the last one.
        check(lines(&[begin()]) + "{\"kind\":\"begin\"}\n", "line 2");
        // An "original" that repeats a key: containerd's decoder would merge the two values,
        // so rollback could not prove what it restores (the same check as apply's).
        let mut twice = write_record(&old, &new);
        if let Record::Write { old_value, .. } = &mut twice {
            let repeated = old.replacen("\"Config\":{", "\"Config\":{\"annotations\":{},", 1);
            assert_ne!(repeated, old);
            *old_value = encode(repeated.as_bytes());
        }
        check(lines(&[begin(), twice]), "is repeated in one object");
        // Hashes that the values do not hold.
        let mut forged = write_record(&old, &new);
        if let Record::Write { new_hash, .. } = &mut forged {
            *new_hash = "ffff".into();
        }
        check(lines(&[begin(), forged]), "line 2");
    }

    #[test]
    fn latest_is_the_upgrade_applied_last_not_the_last_name() {
        let dir = tempfile::tempdir().unwrap();
        let at = |t: u64| Record::Begin {
            at_unix: t,
            to: "1.31".into(),
            from: None,
            runtime: String::new(),
        };
        std::fs::write(
            dir.path().join("1.30-to-1.31.jsonl"),
            lines(&[at(5), at(50)]),
        )
        .unwrap();
        std::fs::write(dir.path().join("1.31-to-1.30.jsonl"), lines(&[at(20)])).unwrap();
        assert!(latest(dir.path())
            .unwrap()
            .0
            .ends_with("1.30-to-1.31.jsonl"));
        // One left empty by an apply that died before its first record is no upgrade.
        std::fs::write(dir.path().join("1.31-to-1.32.jsonl"), "").unwrap();
        assert!(latest(dir.path())
            .unwrap()
            .0
            .ends_with("1.30-to-1.31.jsonl"));
        std::fs::write(dir.path().join("junk.jsonl"), "junk\n").unwrap();
        assert!(
            latest(dir.path()).is_err(),
            "a file that is not a journal is an error"
        );
    }
}
