//! Files that must survive a crash whole: written to a temporary file, synced, renamed over the
//! old one, and the directory synced, so a reader sees the old content or the new, never half.
//! The temporary file is dot-named in the same directory (the kubelet's file source ignores dot
//! files, so a manifest being replaced is never read half-made), and the replaced file's mode is
//! kept; new files get mode 0600.

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
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // Owner only for new files: plans, pod specs and states are the node's business.
        let mode = std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o7777);
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io)?;
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
