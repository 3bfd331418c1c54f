//! Files that must survive a crash whole: written to a temporary file, synced, renamed over the
//! old one, and the directory synced, so a reader sees the old content or the new, never half.
//! The temporary file is dot-named in the same directory (the kubelet's file source ignores dot
//! files, so a manifest being replaced is never read half-made), and the replaced file's mode,
//! owner and group are kept; new files get mode 0600.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Makes directory `dir` and its missing parents (new ones with `mode`); a file where a directory
/// should be is said so, not as the bare "File exists" the system call gives.
pub fn make_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
    {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(std::io::Error::new(
            e.kind(),
            "a file is there, not a directory",
        )),
        done => done,
    }
}

/// Replaces `path` with `bytes` atomically and durably (creating its directory if needed).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically_dated(path, bytes, None)
}

/// [`write_atomically`], the file dated `modified` when given (set before the rename, so the file
/// appears with its date).
pub fn write_atomically_dated(
    path: &Path,
    bytes: &[u8],
    modified: Option<std::time::SystemTime>,
) -> Result<()> {
    let io = |e| Error::Io {
        source_name: path.display().to_string(),
        source: e,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    make_dir(dir, 0o777).map_err(io)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.kubehash-tmp"));
    {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
        // Owner only for new files: plans, pod specs and states are the node's business.
        let old = std::fs::metadata(path).ok();
        let mode = old
            .as_ref()
            .map_or(0o600, |m| m.permissions().mode() & 0o7777);
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io)?;
        // A replaced file keeps its owner and group (a manifest someone else owns stays theirs),
        // set before the mode, whose set-id bits a change of owner may clear.
        if let (Some(o), Ok(n)) = (&old, f.metadata()) {
            if (o.uid(), o.gid()) != (n.uid(), n.gid()) {
                std::os::unix::fs::fchown(&f, Some(o.uid()), Some(o.gid())).map_err(|e| {
                    let _ = std::fs::remove_file(&tmp);
                    io(std::io::Error::new(
                        e.kind(),
                        format!("cannot give the new file the old one's owner and group: {e}"),
                    ))
                })?;
            }
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .and_then(|_| f.write_all(bytes))
            .and_then(|_| modified.map_or(Ok(()), |m| f.set_modified(m)))
            .and_then(|_| f.sync_all())
            .map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

/// [`write_atomically`] of a value as pretty JSON.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Io {
        source_name: path.display().to_string(),
        source: e.into(),
    })?;
    write_atomically(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A replaced file keeps its mode, owner and group; a new one is 0600 and ours.
    #[test]
    fn a_replaced_file_keeps_its_mode_owner_and_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.yaml");
        write_atomically(&path, b"new").unwrap();
        let made = std::fs::metadata(&path).unwrap();
        assert_eq!(made.permissions().mode() & 0o7777, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        // As root (CI), someone else's file; otherwise our own, which must stay ours.
        let (uid, gid) = if made.uid() == 0 {
            (1234, 5678)
        } else {
            (made.uid(), made.gid())
        };
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        write_atomically(&path, b"pinned").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.permissions().mode() & 0o7777),
            (uid, gid, 0o640)
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"pinned");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "nothing beside the file");
    }
}
