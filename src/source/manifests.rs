//! A node's static pod manifests (`--manifests`, default `/etc/kubernetes/manifests`), read to
//! know which static pods keep their UID across a kubelet upgrade.
//!
//! The kubelet derives a static pod's UID in `pkg/kubelet/config/common.go` (`applyDefaults`)
//! from a hash of its *internal* Pod object plus the node and the file, unless the manifest sets
//! `metadata.uid` (`if len(pod.UID) == 0`). The internal Pod type gains fields in nearly every
//! minor release, so a new kubelet derives a new UID and recreates the pod, whatever its container
//! hashes say — unless the manifest pins the UID the pod runs under. Like the kubelet's file
//! source, files whose names start with a dot are ignored.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Problem, Result};
use crate::kubelet::spelling::pod_value_from_slice;
use crate::kubelet::static_refs::GATE;
use crate::source::encoding;
use crate::source::goread::clean;
use crate::source::goyaml::GoYaml;
use crate::source::host::{Host, HostPaths};

/// Where kubeadm and most distributions keep static pod manifests.
pub const DEFAULT_DIR: &str = "/etc/kubernetes/manifests";

/// One manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub path: PathBuf,
    pub namespace: String,
    /// `metadata.name`: the static pod runs as `<name>-<node>`.
    pub name: String,
    /// `metadata.uid`, if the manifest sets it.
    pub uid: Option<String>,
    /// The file holds more than one document (the kubelet reads only the first pod of it).
    pub several: bool,
    /// Other files of the directory that declare the same pod (namespace and name), before this
    /// one by name: a backup (`etcd.yaml.orig`) left beside the manifest. The kubelet keeps one
    /// pod per name, whichever file it read last, so which one runs is not this file's to say.
    pub others: Vec<PathBuf>,
    /// The file as read.
    pub bytes: Vec<u8>,
    /// The pod of its first document.
    pub pod: Value,
    /// When the file was last modified, if the file system says.
    pub modified: Option<std::time::SystemTime>,
    /// Where the path points, when it is a symbolic link (the kubelet follows it).
    pub link: Option<PathBuf>,
}

/// The static pod manifests of a node, by (namespace, name).
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    /// The directory read, if any.
    pub dir: Option<PathBuf>,
    by_name: HashMap<(String, String), Manifest>,
    /// Files that could not be read as a pod, with why.
    pub problems: Vec<String>,
    /// The kubelet's `PreventStaticPodAPIReferences` feature gate as its flags and config set it
    /// (`None`: not set, the release's default): whether it refuses a manifest that references
    /// an API object ([`crate::kubelet::static_refs`]).
    pub prevent_api_references: Option<bool>,
}

impl Manifests {
    /// No manifests known: every static pod is taken as unpinned.
    pub fn none() -> Manifests {
        Manifests::default()
    }

    /// Reads every manifest in `dir`. A directory that does not exist holds no manifests (a
    /// worker node without static pods); one that cannot be listed is an error.
    pub fn read(dir: &Path) -> Result<Manifests> {
        let mut out = Manifests {
            dir: Some(dir.to_path_buf()),
            ..Manifests::default()
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => {
                return Err(Error::Io {
                    source_name: format!("manifests {}", dir.display()),
                    source: e,
                })
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        paths.sort();
        for path in paths {
            match read_manifest(&path) {
                Ok(mut m) => {
                    let key = (m.namespace.clone(), m.name.clone());
                    if let Some(before) = out.by_name.remove(&key) {
                        m.others = before.others;
                        m.others.push(before.path);
                    }
                    out.by_name.insert(key, m);
                }
                Err(why) => out.problems.push(format!("{}: {why}", path.display())),
            }
        }
        Ok(out)
    }

    /// [`Manifests::read`], with what the kubelet's flags and config (`host`, when given) say
    /// of the manifests it refuses ([`Manifests::prevent_api_references`]).
    pub fn read_for_kubelet(dir: &Path, host: Option<&HostPaths>) -> Result<Manifests> {
        let mut m = Manifests::read(dir)?;
        m.prevent_api_references = host.and_then(|h| Host::kubelet_feature_gate(h, GATE));
        Ok(m)
    }

    /// Every manifest, by path.
    pub fn all(&self) -> impl Iterator<Item = &Manifest> {
        let mut all: Vec<&Manifest> = self.by_name.values().collect();
        all.sort_by(|a, b| a.path.cmp(&b.path));
        all.into_iter()
    }

    /// The manifest of the static pod `namespace/name` (its name without the `-<node>` suffix).
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Manifest> {
        self.by_name.get(&(namespace.to_string(), name.to_string()))
    }

    /// `Ok` when the static pod `namespace/name`, running under `uid`, keeps that UID under any
    /// kubelet (its manifest pins it); otherwise why the new kubelet recreates it.
    pub fn pinned(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> std::result::Result<(), Problem> {
        let Some(dir) = &self.dir else {
            return Err("no manifests directory was read (--manifests)".into());
        };
        match self.get(namespace, name) {
            None => Err(format!("no manifest for {namespace}/{name} in {}", dir.display()).into()),
            Some(m) if m.several => {
                Err(format!("{} holds several documents", m.path.display()).into())
            }
            Some(m) if !m.others.is_empty() => Err(Problem(m.declared_twice())),
            Some(Manifest {
                uid: None, path, ..
            }) => Err(format!("{} does not set metadata.uid", path.display()).into()),
            Some(Manifest {
                uid: Some(u), path, ..
            }) if u != uid => Err(format!(
                "{} pins metadata.uid {u}, but the pod runs as {uid}",
                path.display()
            )
            .into()),
            Some(_) => Ok(()),
        }
    }
}

impl Manifest {
    /// Why a pod that several files declare is not pinned.
    pub fn declared_twice(&self) -> String {
        let mut all: Vec<String> = self
            .others
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        all.push(self.path.display().to_string());
        format!(
            "{} files declare the pod {}/{} ({}): the kubelet runs one of them, whichever it read last, so kubehash pins none; move the others out of the directory",
            all.len(),
            self.namespace,
            self.name,
            all.join(", ")
        )
    }
}

/// The documents of a manifest's text (YAML or JSON), empty ones left out, as the kubelet's file
/// source reads them: text that starts with `{` after white space goes to its JSON decoder as it
/// is (`utilyaml.ToJSON`), with Go's byte rules and one value, and no key repeated in an object
/// ([`crate::kubelet::once_keys`]); the rest to its YAML reader.
pub fn documents(bytes: &[u8]) -> std::result::Result<Vec<Value>, Problem> {
    if String::from_utf8_lossy(bytes).trim_start().starts_with('{') {
        let mut text = Vec::with_capacity(bytes.len());
        clean(bytes, true, &mut text);
        let value = pod_value_from_slice(&text).map_err(|e| Problem(format!("not JSON: {e}")))?;
        return Ok(vec![value]);
    }
    // go-yaml reads the text as its byte order mark says (see `encoding`).
    let bytes = encoding::decoded(bytes).map_err(|e| Problem(e.to_string()))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| Problem::from("not UTF-8"))?;
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v = GoYaml {
            text: text.as_bytes(),
        }
        .document(doc)
        .map_err(|e| Problem(format!("not YAML or JSON: {e}")))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

fn read_manifest(path: &Path) -> std::result::Result<Manifest, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let docs = documents(&bytes).map_err(|e| e.0)?;
    let several = docs.len() > 1;
    let first = docs.into_iter().next().ok_or("an empty file")?;
    if first.get("kind").and_then(Value::as_str) != Some("Pod") {
        return Err("not a Pod".into());
    }
    let meta = |k: &str| {
        first
            .pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let name = meta("name").ok_or("a pod without metadata.name")?;
    let (namespace, uid) = (
        meta("namespace").unwrap_or_else(|| "default".into()),
        meta("uid"),
    );
    Ok(Manifest {
        path: path.to_path_buf(),
        namespace,
        name,
        uid,
        several,
        others: Vec::new(),
        bytes,
        pod: first,
        modified: std::fs::metadata(path).and_then(|m| m.modified()).ok(),
        link: link_target(path),
    })
}

/// Where `path` points, if it is a symbolic link.
pub fn link_target(path: &Path) -> Option<PathBuf> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_symlink())
        .map(|_| std::fs::read_link(path).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_manifests_are_read_as_json_and_yaml_ones_as_yaml() {
        // Text that starts with `{` (after white space, Go's `unicode.IsSpace`) is JSON: Go's
        // byte rules, one value, no repeated key.
        let docs = documents(b"\r\n {\"kind\":\"Pod\",\"x\":\"a\xffb\"}").unwrap();
        assert_eq!(
            docs,
            [serde_json::json!({"kind": "Pod", "x": "a\u{fffd}b"})]
        );
        // A vertical tab is white space to that test but not to JSON, so Go fails on it too.
        let err = documents(b"\x0b{\"kind\":\"Pod\"}").unwrap_err().0;
        assert!(err.starts_with("not JSON: expected value"), "{err}");
        let err = documents(br#"{"kind":"Pod","spec":{"containers":[]},"spec":{}}"#).unwrap_err();
        assert!(
            err.0.starts_with("not JSON: the key \"spec\" is repeated"),
            "{}",
            err.0
        );
        assert!(documents(br#"{"kind":"Pod"} {"kind":"Pod"}"#).is_err());
        // YAML keeps a repeated key's last value, as Go's YAML reader (yaml.v2, not strict) does.
        let docs = documents(b"kind: Pod\nx: 1\nx: 2\n---\nkind: Pod\n").unwrap();
        assert_eq!(docs[0]["x"], 2);
        assert_eq!(docs.len(), 2);
        assert_eq!(
            documents(b"- {").unwrap_err().0.split(':').next(),
            Some("not YAML or JSON")
        );
        // A UTF-8 BOM is no white space to Go's JSON test, so such text goes to the YAML reader,
        // which drops it (go-yaml's reader): YAML and JSON text alike read as without it.
        let bom = |t: &[u8]| [encoding::UTF8_BOM, t].concat();
        let yaml = b"kind: Pod\nmetadata:\n  name: p\n";
        assert_eq!(documents(&bom(yaml)).unwrap(), documents(yaml).unwrap());
        let json = br#"{"kind":"Pod","metadata":{"name":"p"}}"#;
        assert_eq!(documents(&bom(json)).unwrap(), documents(json).unwrap());
        // UTF-16 after its mark is transcoded, as go-yaml does; malformed UTF-16 is refused.
        let utf16le = |t: &[u8]| -> Vec<u8> {
            let units = std::str::from_utf8(t).unwrap().encode_utf16();
            [0xFF, 0xFE]
                .into_iter()
                .chain(units.flat_map(u16::to_le_bytes))
                .collect()
        };
        assert_eq!(documents(&utf16le(yaml)).unwrap(), documents(yaml).unwrap());
        assert_eq!(documents(&utf16le(json)).unwrap(), documents(json).unwrap());
        let broken = [utf16le(yaml), vec![0x00, 0xDC]].concat();
        assert!(documents(&broken).unwrap_err().0.contains("not UTF-16"));
    }

    #[test]
    fn pinned_unpinned_several_hidden_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let w = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        w(
            "etcd.yaml",
            "# etcd\napiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n  uid: u-etcd\nspec: {}\n",
        );
        w(
            "haproxy.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: haproxy, namespace: kube-system}\n",
        );
        w(
            "two.yaml",
            "kind: Pod\nmetadata: {name: two, uid: u2}\n---\nkind: Pod\nmetadata: {name: three}\n",
        );
        w(
            ".hidden.yaml",
            "kind: Pod\nmetadata: {name: hidden, uid: h}\n",
        );
        w("junk.yaml", "{{{");
        // A backup left beside a manifest declares the same pod: neither is taken as pinned.
        w(
            "sched.yaml",
            "kind: Pod\nmetadata: {name: sched2, namespace: kube-system, uid: u-s2}\n",
        );
        w(
            "sched.yaml.bak",
            "kind: Pod\nmetadata: {name: sched2, namespace: kube-system, uid: u-s2}\n",
        );
        // JSON manifests: read as the kubelet's JSON decoder would, and refused when a key
        // repeats (Go would merge the two `metadata`s; which UID would the pod get?).
        w(
            "api.json",
            r#"{"kind":"Pod","metadata":{"name":"api","namespace":"kube-system","uid":"u-api"}}"#,
        );
        w(
            "sched.json",
            r#"{"kind":"Pod","metadata":{"name":"sched","namespace":"kube-system"},"metadata":{"name":"sched","namespace":"kube-system","uid":"u-s"}}"#,
        );
        let m = Manifests::read(dir.path()).unwrap();
        assert_eq!(m.pinned("kube-system", "api", "u-api"), Ok(()));
        assert!(m.get("kube-system", "sched").is_none());
        assert!(
            m.problems
                .iter()
                .any(|p| p.contains("sched.json: not JSON: the key \"metadata\" is repeated")),
            "{:?}",
            m.problems
        );
        assert_eq!(m.pinned("kube-system", "etcd", "u-etcd"), Ok(()));
        let twice = m.pinned("kube-system", "sched2", "u-s2").unwrap_err().0;
        assert!(
            twice.starts_with("2 files declare the pod kube-system/sched2 (")
                && twice.contains("sched.yaml, ")
                && twice.ends_with("sched.yaml.bak): the kubelet runs one of them, whichever it read last, so kubehash pins none; move the others out of the directory"),
            "{twice}"
        );
        assert!(m
            .pinned("kube-system", "etcd", "other")
            .unwrap_err()
            .contains("but the pod runs as other"));
        assert!(m
            .pinned("kube-system", "haproxy", "x")
            .unwrap_err()
            .contains("does not set metadata.uid"));
        assert!(m
            .pinned("default", "two", "u2")
            .unwrap_err()
            .contains("several documents"));
        assert!(
            m.get("default", "hidden").is_none(),
            "dot files are ignored"
        );
        assert_eq!(m.problems.len(), 2, "{:?}", m.problems);
        assert!(Manifests::read(&dir.path().join("absent"))
            .unwrap()
            .pinned("default", "x", "u")
            .unwrap_err()
            .contains("no manifest"));
        assert!(Manifests::none().pinned("a", "b", "c").is_err());
    }
}
