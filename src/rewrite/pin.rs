//! Pinning a static pod's UID: `metadata.uid: "<uid>"` written into its manifest, and nothing else.
//!
//! The kubelet keeps a UID the manifest sets (`pkg/kubelet/config/common.go` `applyDefaults`:
//! `if len(pod.UID) == 0` it derives one from a hash of its internal Pod type, which changes
//! between minors). Pinning the UID the pod runs under therefore keeps the pod across an upgrade,
//! and changes nothing for the running kubelet, which derives that very UID.
//!
//! The edit is textual, so comments, key order and formatting stay: one line
//! `  uid: "<uid>" # <`[`PIN_COMMENT`]`>` under a block `metadata:`, or `"uid": "<uid>", ` at the
//! start of a flow or JSON `metadata` mapping (where no comment can go). [`check_pin`] proves
//! every edit before it is written (and every pin a journal asks rollback to undo): both texts
//! parse as one pod, the new one sets `metadata.uid` to the UID, and without it the two are
//! equal.

use serde_json::Value;

use crate::error::Problem;
use crate::source::manifests::documents;

/// Said beside a pinned UID, for whoever edits the manifest next: a manifest that sets its UID
/// keeps its pod when the file changes (the UID is the kubelet's key for the pod, and the mirror
/// pod's `kubernetes.io/config.hash`), and from kubelet 1.31 a container restarts for a changed
/// spec only when its name or image changed, so an edit is applied only if the line goes with it.
pub const PIN_COMMENT: &str = "pinned by kubehash for a kubelet upgrade: delete this line in any later edit of this file, or the kubelet keeps the running pod and may not apply the edit";

/// The manifest text with `metadata.uid` set to `uid`, every other byte kept, proven by
/// [`check_pin`].
pub fn pin_text(old: &[u8], uid: &str) -> Result<Vec<u8>, Problem> {
    if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(format!("{uid:?} is not a pod UID kubehash writes").into());
    }
    let text = std::str::from_utf8(old).map_err(|_| Problem::from("not UTF-8"))?;
    let at = flow_metadata(text)
        .map(|open| (open + 1, flow_entry(text, open, uid)))
        .or_else(|| block_metadata(text, uid))
        .ok_or("no metadata mapping kubehash can add a uid to")?;
    let mut new = String::with_capacity(text.len() + 64);
    new.push_str(&text[..at.0]);
    new.push_str(&at.1);
    new.push_str(&text[at.0..]);
    check_pin(old, new.as_bytes(), uid)?;
    Ok(new.into_bytes())
}

/// `"uid": "<uid>"` for a flow mapping opening at `open`, with a comma unless it is empty.
fn flow_entry(text: &str, open: usize, uid: &str) -> String {
    let empty = text[open + 1..].trim_start().starts_with('}');
    format!("\"uid\": \"{uid}\"{}", if empty { "" } else { ", " })
}

/// The offset of the `{` of a top-level `metadata` flow/JSON mapping: `metadata: {` on a line
/// of its own at column 0 (YAML), or the `"metadata": {` member of a JSON document's top object.
fn flow_metadata(text: &str) -> Option<usize> {
    let body = text.trim_start();
    if body.starts_with('{') {
        return json_member_object(text, "metadata");
    }
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("metadata:") {
            let value = rest.trim_start();
            if value.starts_with('{') {
                return Some(offset + line.len() - rest.len() + (rest.len() - value.len()));
            }
            return None;
        }
        offset += line.len();
    }
    None
}

/// For a block `metadata:` line at column 0: where to insert, and the line to insert (indented
/// like the mapping's first entry, with the file's line ending).
fn block_metadata(text: &str, uid: &str) -> Option<(usize, String)> {
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        offset += line.len();
        let Some(rest) = line.strip_prefix("metadata:") else {
            continue;
        };
        let rest = rest.trim();
        if !(rest.is_empty() || rest.starts_with('#')) || !line.ends_with('\n') {
            return None;
        }
        let eol = if line.ends_with("\r\n") { "\r\n" } else { "\n" };
        let indent = lines
            .clone()
            .map(|l| l.trim_end_matches(['\r', '\n']))
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|l| l.len() - l.trim_start_matches(' ').len())
            .filter(|&n| n > 0)?;
        return Some((
            offset,
            format!("{}uid: \"{uid}\" # {PIN_COMMENT}{eol}", " ".repeat(indent)),
        ));
    }
    None
}

/// The offset of the `{` that opens the value of member `key` of the top-level JSON object.
fn json_member_object(text: &str, key: &str) -> Option<usize> {
    let b = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    let want = format!("\"{key}\"");
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && text.get(start..=i) == Some(want.as_str()) {
                    let after = text[i + 1..].trim_start().strip_prefix(':')?;
                    let value = after.trim_start();
                    return value.starts_with('{').then(|| text.len() - value.len());
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The single pod a manifest text holds.
fn one_pod(bytes: &[u8]) -> Result<Value, Problem> {
    let docs = documents(bytes)?;
    match <[Value; 1]>::try_from(docs) {
        Ok([pod]) if pod.get("kind").and_then(Value::as_str) == Some("Pod") => Ok(pod),
        Ok(_) => Err("not a Pod".into()),
        Err(docs) => Err(format!("{} documents, not one pod", docs.len()).into()),
    }
}

/// Proves that `new` is `old` with `metadata.uid` set to `uid` and nothing else changed: both
/// parse as one pod, `old` sets no UID, and removing the UID from `new` gives `old`.
pub fn check_pin(old: &[u8], new: &[u8], uid: &str) -> Result<(), Problem> {
    let before = one_pod(old).map_err(|e| Problem(format!("the original: {e}")))?;
    let mut after = one_pod(new).map_err(|e| Problem(format!("the pinned text: {e}")))?;
    if before.pointer("/metadata/uid").is_some() {
        return Err("the original already sets metadata.uid".into());
    }
    let meta = after
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or("the pinned text has no metadata")?;
    if meta.remove("uid").as_ref().and_then(Value::as_str) != Some(uid) {
        return Err(format!("the pinned text does not set metadata.uid to {uid}").into());
    }
    if after != before {
        return Err("the pinned text changes more than metadata.uid".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "5c1e2f0a9d8b7c6e5f4a3b2c1d0e9f8a";

    fn pinned(text: &str) -> String {
        String::from_utf8(pin_text(text.as_bytes(), UID).unwrap()).unwrap()
    }

    #[test]
    fn block_yaml_gains_one_line_and_keeps_comments() {
        let text = "# etcd, managed by hand\napiVersion: v1\nkind: Pod\nmetadata: # ours\n    # the name\n    name: etcd\n    namespace: kube-system\nspec:\n  containers:\n  - name: etcd # main\n    image: etcd:3.5\n";
        let new = pinned(text);
        assert_eq!(
            new,
            text.replace(
                "metadata: # ours\n",
                &format!("metadata: # ours\n    uid: \"{UID}\" # {PIN_COMMENT}\n")
            )
        );
        let crlf = text.replace('\n', "\r\n");
        assert!(pinned(&crlf).contains(&format!(
            "metadata: # ours\r\n    uid: \"{UID}\" # {PIN_COMMENT}\r\n"
        )));
    }

    #[test]
    fn flow_yaml_and_json_gain_one_member() {
        assert_eq!(
            pinned("kind: Pod\nmetadata: {name: a}\n"),
            format!("kind: Pod\nmetadata: {{\"uid\": \"{UID}\", name: a}}\n")
        );
        assert_eq!(
            pinned(r#"{"kind":"Pod","spec":{"metadata":{}},"metadata":{"name":"a"}}"#),
            format!(
                r#"{{"kind":"Pod","spec":{{"metadata":{{}}}},"metadata":{{"uid": "{UID}", "name":"a"}}}}"#
            )
        );
        assert_eq!(
            pinned("kind: Pod\nmetadata: {}\n"),
            format!("kind: Pod\nmetadata: {{\"uid\": \"{UID}\"}}\n")
        );
    }

    #[test]
    fn what_cannot_be_proven_is_refused() {
        let refused = |text: &str, uid: &str| pin_text(text.as_bytes(), uid).unwrap_err().0;
        assert!(refused("kind: Pod\nmetadata:\n  uid: x\n  name: a\n", UID).contains("already"));
        assert!(
            refused("kind: Pod\nmetadata: {name: a}\n---\nkind: Pod\n", UID)
                .contains("2 documents")
        );
        assert!(refused("kind: Pod\nmetadata:\nspec: {}\n", UID).contains("no metadata"));
        assert!(refused("kind: Pod\n", UID).contains("no metadata"));
        assert!(refused("kind: Pod\nmetadata: {name: a}\n", "a\"b").contains("not a pod UID"));
        assert!(refused("kind: Service\nmetadata: {name: a}\n", UID).contains("not a Pod"));
        // A JSON manifest that repeats a key: the kubelet's decoder would merge the two values,
        // so no proof can say which UID the pod gets.
        let twice = r#"{"kind":"Pod","metadata":{"name":"a"},"metadata":{"name":"a"}}"#;
        assert!(refused(twice, UID).contains("the key \"metadata\" is repeated"));
        // A text that only looks like the original once parsed differently is caught by the proof.
        assert!(check_pin(
            b"kind: Pod\nmetadata: {name: a}\n",
            b"kind: Pod\nmetadata: {name: b, uid: u}\n",
            "u"
        )
        .is_err());
        assert!(check_pin(
            b"kind: Pod\nmetadata: {name: a}\n",
            b"kind: Pod\nmetadata: {name: a, uid: v}\n",
            "u"
        )
        .is_err());
        assert!(check_pin(
            b"kind: Pod\nmetadata: {name: a}\n",
            b"kind: Pod\nmetadata: {name: a, uid: u}\n",
            "u"
        )
        .is_ok());
    }
}
