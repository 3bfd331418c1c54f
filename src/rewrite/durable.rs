//! Files that must survive a crash whole: written to a temporary file, synced, renamed over the
//! old one, and the directory synced, so a reader sees the old content or the new, never half.
//! The temporary file is dot-named in the same directory (the kubelet's file source ignores dot
//! files, so a manifest being replaced is never read half-made, and is removed if anything fails),
//! and the replaced file's mode, owner, group and extended attributes (an SELinux label, an ACL)
//! are kept; new files get mode 0600. Writers in one directory take turns (a `flock` on it).

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
    // One writer at a time in the directory: the temporary file's name is fixed (a killed
    // writer's is removed by the next), so two writers of one file would otherwise remove and
    // rename each other's half-written copies.
    let held = lock_dir(dir).map_err(io)?;
    let old = std::fs::metadata(path).ok();
    let _ = std::fs::remove_file(&tmp);
    // Whatever goes wrong after the temporary file exists, it is removed: nothing is left beside
    // the file (a full disk leaves no half-written copy in a manifests directory).
    let made =
        fill(&tmp, old.as_ref(), path, bytes, modified).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = made {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    match &held {
        Some(d) => d.sync_all(),
        None => std::fs::File::open(dir).and_then(|d| d.sync_all()),
    }
    .map_err(io)
}

/// `e` with what was being done when it happened.
fn doing(what: String, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// How long a writer waits for another one in the same directory to finish.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Takes `file`'s `flock` for this process, waiting up to `wait` for a holder that may be a
/// process exiting: `Ok(false)` when it is still held then.
pub fn lock_within(file: &std::fs::File, wait: std::time::Duration) -> std::io::Result<bool> {
    let until = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Locks directory `dir` (`flock`) for the caller's writes, released when the returned file is
/// dropped or the process ends, however it ends. On a file system that takes no lock on a
/// directory (some network ones), writes go unlocked, as they did before there was a lock.
fn lock_dir(dir: &Path) -> std::io::Result<Option<std::fs::File>> {
    let d = std::fs::File::open(dir)?;
    match lock_within(&d, LOCK_WAIT) {
        Ok(true) => Ok(Some(d)),
        Ok(false) => {
            let why = format!(
                "another process has held a lock on the directory {} for {} s",
                dir.display(),
                LOCK_WAIT.as_secs()
            );
            Err(std::io::Error::new(std::io::ErrorKind::WouldBlock, why))
        }
        Err(_) => Ok(None),
    }
}

/// Makes `tmp` the replacement of `path` (whose metadata was `old`): `bytes`, and the replaced
/// file's owner, group, extended attributes and mode (0600 for a new file), dated `modified`.
fn fill(
    tmp: &Path,
    old: Option<&std::fs::Metadata>,
    path: &Path,
    bytes: &[u8],
    modified: Option<std::time::SystemTime>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    // Owner only for new files: plans, pod specs and states are the node's business.
    let mode = old.map_or(0o600, |m| m.permissions().mode() & 0o7777);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)?;
    // A replaced file keeps its owner and group (a manifest someone else owns stays theirs).
    if let (Some(o), Ok(n)) = (old, f.metadata()) {
        if (o.uid(), o.gid()) != (n.uid(), n.gid()) {
            std::os::unix::fs::fchown(&f, Some(o.uid()), Some(o.gid())).map_err(|e| {
                doing(
                    "cannot give the new file the old one's owner and group".into(),
                    e,
                )
            })?;
        }
    }
    f.write_all(bytes)?;
    // After the owner and the bytes, which clear a file capability, and before the mode, whose
    // set-id bits a change of owner clears.
    if old.is_some() {
        keep_xattrs(path, &f)?;
    }
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    if let Some(m) = modified {
        f.set_modified(m)?;
    }
    f.sync_all()
}

/// Attributes that describe the old file's bytes, not the file (IMA/EVM).
const CONTENT_DERIVED: [&str; 2] = ["security.ima", "security.evm"];

const EOPNOTSUPP: i32 = 95; // Linux: the file system has no extended attributes

/// Gives `new` every extended attribute `path` has but those derived from its bytes (an SELinux
/// label, an ACL, a user's attribute), and no other but a security label. One the system will
/// not set is fine only if `new` already has it alike (an SELinux label the directory gave);
/// otherwise the replacement is refused.
fn keep_xattrs(path: &Path, new: &std::fs::File) -> std::io::Result<()> {
    use xattr::FileExt;
    let names = match xattr::list_deref(path) {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(EOPNOTSUPP) => return Ok(()), // none to keep
        Err(e) => {
            return Err(doing(
                "cannot read the old file's extended attributes".into(),
                e,
            ))
        }
    };
    let names: Vec<std::ffi::OsString> = names.collect();
    // What the directory gave the new file and the old one did not have (a default ACL the
    // directory passes on) goes: the file stays as open as it was. A security label the system
    // gives every file, it cannot lose.
    for name in new.list_xattr()? {
        if !names.contains(&name) && !name.as_encoded_bytes().starts_with(b"security.") {
            new.remove_xattr(&name).map_err(|e| {
                let name = name.to_string_lossy();
                let what = format!(
                    "cannot take from the new file the extended attribute {name}, which the old \
                     one did not have"
                );
                doing(what, e)
            })?;
        }
    }
    for name in names {
        // The integrity subsystem's hash and signature of the old bytes: wrong for the new ones,
        // which the kernel measures itself.
        if CONTENT_DERIVED
            .iter()
            .any(|c| name.as_encoded_bytes() == c.as_bytes())
        {
            continue;
        }
        let Some(value) = xattr::get_deref(path, &name)? else {
            continue; // removed since it was listed
        };
        if let Err(e) = new.set_xattr(&name, &value) {
            if new.get_xattr(&name).ok().flatten().as_deref() != Some(&value[..]) {
                let name = name.to_string_lossy();
                return Err(doing(
                    format!("cannot give the new file the old one's extended attribute {name}"),
                    e,
                ));
            }
        }
    }
    Ok(())
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

    /// An access ACL in its extended attribute form (`setfacl -m u:1234:rw`): owner rw, user
    /// 1234 rw, group r, mask rw, other none.
    const ACL: &[u8] = &[
        2, 0, 0, 0, // version
        1, 0, 6, 0, 255, 255, 255, 255, // user::rw-
        2, 0, 6, 0, 210, 4, 0, 0, // user:1234:rw-
        4, 0, 4, 0, 255, 255, 255, 255, // group::r--
        16, 0, 6, 0, 255, 255, 255, 255, // mask::rw-
        32, 0, 0, 0, 255, 255, 255, 255, // other::---
    ];

    /// A replaced file keeps every extended attribute: a user's, and as root (CI) an SELinux
    /// label, a trusted one and an ACL, whatever the directory would give a new file.
    #[test]
    fn a_replaced_file_keeps_its_extended_attributes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.yaml");
        std::fs::write(&path, b"old").unwrap();
        let mut kept = vec![("user.kubehash-test", &b"someone's\0value"[..])];
        if std::fs::metadata(&path).unwrap().uid() == 0 {
            kept.push(("security.selinux", b"system_u:object_r:kubelet_file_t:s0\0"));
            kept.push(("trusted.kubehash-test", b"x"));
            kept.push(("system.posix_acl_access", ACL));
        }
        for (name, value) in &kept {
            xattr::set(&path, name, value).unwrap();
        }
        let mode_of = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        let before = mode_of(&path);
        if std::fs::metadata(&path).unwrap().uid() == 0 {
            xattr::set(&path, "security.ima", b"\x03\x02old").unwrap();
        }
        write_atomically(&path, b"pinned").unwrap();
        assert_eq!(
            xattr::get(&path, "security.ima").unwrap(),
            None,
            "the old bytes' measurement is not the new ones'"
        );
        for (name, value) in &kept {
            assert_eq!(
                xattr::get(&path, name).unwrap().as_deref(),
                Some(*value),
                "{name}"
            );
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"pinned");
        assert_eq!(mode_of(&path), before, "the mode the ACL's mask is part of");
        // A default ACL the directory gained since gives the replacement nothing the old file
        // did not have.
        if std::fs::metadata(&path).unwrap().uid() == 0 {
            let bare = dir.path().join("bare.yaml");
            std::fs::write(&bare, b"old").unwrap();
            xattr::set(dir.path(), "system.posix_acl_default", ACL).unwrap();
            write_atomically(&bare, b"pinned").unwrap();
            assert_eq!(
                xattr::get(&bare, "system.posix_acl_access").unwrap(),
                None,
                "an ACL the old file did not have"
            );
            xattr::remove(dir.path(), "system.posix_acl_default").unwrap();
        }
        // A new file gets none.
        let new = dir.path().join("new.yaml");
        write_atomically(&new, b"x").unwrap();
        assert!(xattr::get(&new, "user.kubehash-test").unwrap().is_none());
    }

    /// Writers racing on one file (two kubehash processes with different journals pinning one
    /// manifest): a reader only ever sees one writer's text whole, every write either lands
    /// whole or fails, and nothing is left beside the file.
    #[test]
    fn racing_writers_never_leave_a_torn_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.yaml");
        let texts: Vec<Vec<u8>> = (0..4u8).map(|i| vec![b'a' + i; 1 << 16]).collect();
        std::fs::write(&path, &texts[0]).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let writers: Vec<_> = texts
                .iter()
                .map(|text| {
                    let path = &path;
                    s.spawn(move || {
                        (0..200)
                            .filter(|_| write_atomically(path, text).is_err())
                            .count()
                    })
                })
                .collect();
            let reader = s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let now = std::fs::read(&path).unwrap();
                    assert!(texts.contains(&now), "a torn file of {} bytes", now.len());
                }
            });
            let failed: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap();
            assert_eq!(failed, 0, "writes that failed");
        });
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "nothing beside the file");
    }

    /// A write that fails after the temporary file exists leaves nothing beside the file, and the
    /// file as it was.
    #[test]
    fn a_failed_write_leaves_the_file_and_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.yaml");
        std::fs::write(&path, b"old").unwrap();
        // The rename fails: the path is a directory, which a file cannot replace.
        let target = dir.path().join("manifests");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"k").unwrap();
        assert!(write_atomically(&target, b"new").is_err());
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["etcd.yaml", "manifests"]);
        assert_eq!(std::fs::read(target.join("keep")).unwrap(), b"k");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
    }
}
