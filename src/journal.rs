//! The node agent's journal: an append-only JSON Lines file, fsync'd before every write to
//! containerd, holding the full old and new extension values, so that an interrupted `apply` can be
//! resumed, `verify` can compare, and `rollback` can restore every record byte for byte.
//!
//! Records, one per line:
//! * `{"kind":"begin", …}` once per `apply` run (target version, containerd version, time);
//! * `{"kind":"write", "container_id", "old_value", "new_value", …}` just before a write (values
//!   base64, exactly as stored);
//! * `{"kind":"written", "container_id"}` once the record was read back holding the new value;
//! * `{"kind":"rollback", "container_id", "result"}` for each container `rollback` handled.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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
        containerd: String,
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
    },
    Written {
        container_id: String,
    },
    Rollback {
        container_id: String,
        result: String,
    },
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn decode(s: &str) -> std::result::Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("bad base64 in journal: {e}"))
}

/// An open journal, appended to and synced record by record.
pub struct Journal {
    path: PathBuf,
    file: File,
}

impl Journal {
    fn io(path: &Path, e: std::io::Error) -> Error {
        Error::Io {
            source_name: format!("journal {}", path.display()),
            source: e,
        }
    }

    /// Opens (creating it, mode 0600, and its directory, mode 0700) a journal for appending.
    pub fn open(path: &Path) -> Result<Journal> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| Journal::io(path, e))?;
        }
        let existed = path.exists();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Journal::io(path, e))?;
        if !existed {
            // Make the new file's directory entry durable too.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| Journal::io(path, e))?;
            }
        }
        Ok(Journal {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record and waits until it is on disk.
    pub fn append(&mut self, r: &Record) -> Result<()> {
        let mut line = serde_json::to_vec(r).map_err(|e| Journal::io(&self.path, e.into()))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.sync_all())
            .map_err(|e| Journal::io(&self.path, e))
    }
}

/// Reads every record of a journal. A torn last line (a crash during the append) is ignored;
/// any other unreadable line is an error naming it.
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let file = File::open(path).map_err(|e| Journal::io(path, e))?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<std::io::Result<_>>()
        .map_err(|e| Journal::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => out.push(r),
            Err(_) if i + 1 == lines.len() => {} // torn final append
            Err(e) => {
                return Err(Error::Input {
                    source_name: format!("journal {}", path.display()),
                    reason: format!("line {}: {e}", i + 1),
                })
            }
        }
    }
    Ok(out)
}

/// The newest journal in a directory (by name, which starts with the time).
pub fn latest(dir: &Path) -> Result<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Journal::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files.pop().ok_or_else(|| Error::Input {
        source_name: dir.display().to_string(),
        reason: "no journal (*.jsonl) here; pass --journal".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j/1.jsonl");
        let mut j = Journal::open(&path).unwrap();
        let w = Record::Write {
            at_unix: 1,
            container_id: "c".into(),
            pod: "ns/p".into(),
            container: "app".into(),
            verdict: "rewrite".into(),
            old_hash: "a".into(),
            new_hash: "b".into(),
            old_value: encode(b"{\"x\":1}"),
            new_value: encode(b"{\"x\":2}"),
        };
        j.append(&w).unwrap();
        j.append(&Record::Written {
            container_id: "c".into(),
        })
        .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"kind\":\"wri")
            .unwrap();
        let got = read(&path).unwrap();
        assert_eq!(
            got,
            vec![
                w,
                Record::Written {
                    container_id: "c".into()
                }
            ]
        );
        assert_eq!(latest(&dir.path().join("j")).unwrap(), path);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
