//! The one input reader: every command reads pods, nodes and hash input through it, so every
//! command accepts the same things and reads them the same way.
//!
//! Accepted: a file, a directory of `.json`/`.yaml`/`.yml` files (sorted by name), or `-` for
//! stdin; JSON (one or several values one after another, so JSON Lines too) or YAML (several
//! `---`-separated documents), told apart by the file's extension, or on stdin by the first
//! byte (`{`, `[` or `"` is JSON). Each value is an object, a JSON array of objects, or a
//! List/PodList whose items are streamed one at a time, so a multi-gigabyte list is read in the
//! memory of one item.
//!
//! JSON bytes are read the way Go's `encoding/json` reads them ([`crate::source::goread`]): an
//! invalid UTF-8 byte or a lone UTF-16 surrogate escape becomes U+FFFD instead of an error. YAML
//! must be valid UTF-8, as for the Go YAML reader.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::source::goread::GoRead;

/// Calls `each` for every object in the JSON `reader` (Go's byte rules): the items of a
/// List/PodList (streamed), the elements of a JSON array, or a single object. Several top-level
/// values may follow each other. Top-level values that are not objects or arrays are passed on
/// as they are, for the caller to report.
pub fn for_each_object<R: Read>(
    reader: R,
    source: &str,
    mut each: impl FnMut(Value),
) -> Result<()> {
    // serde_json reads byte by byte; std's BufReader makes that cheap.
    let read = serde_json::de::IoRead::new(BufReader::with_capacity(1 << 16, GoRead::new(reader)));
    match for_each_value_raw(read, &mut each) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::Input {
            source_name: source.to_string(),
            reason: "no JSON input".into(),
        }),
        Err(e) => Err(Error::Input {
            source_name: source.to_string(),
            reason: format!("not valid JSON: {e}"),
        }),
    }
}

/// The values of any serde_json input, with serde_json's own error; `Ok(false)` when there was
/// no value at all.
pub fn for_each_value_raw<'de, R: serde_json::de::Read<'de>>(
    read: R,
    mut each: impl FnMut(Value),
) -> std::result::Result<bool, serde_json::Error> {
    let mut de = serde_json::Deserializer::new(read);
    let mut any = false;
    loop {
        // Stop cleanly at end of input (after optional whitespace).
        if de.end().is_ok() {
            return Ok(any);
        }
        Top { each: &mut each }.deserialize(&mut de)?;
        any = true;
    }
}

/// Every object in `path`: a file, every `.json`/`.yaml`/`.yml` file of a directory (sorted by
/// name), or stdin for `-`.
pub fn for_each_object_in_path(path: &Path, mut each: impl FnMut(Value)) -> Result<()> {
    read_path(path, &mut each)
}

fn read_path(path: &Path, each: &mut dyn FnMut(Value)) -> Result<()> {
    let name = path.display().to_string();
    if name == "-" {
        return for_each_object_in_stream(std::io::stdin().lock(), "stdin", None, each);
    }
    let io = |e| Error::Io {
        source_name: name.clone(),
        source: e,
    };
    if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && extension_says(p).is_some())
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::Input {
                source_name: name,
                reason: "directory has no .json, .yaml or .yml files".into(),
            });
        }
        for f in files {
            read_path(&f, each)?;
        }
        return Ok(());
    }
    let file = File::open(path).map_err(io)?;
    for_each_object_in_stream(file, &name, extension_says(path), each)
}

/// Whether a stream of unknown kind that starts with `head` is YAML: its first byte other than
/// white space is not `{`, `[` or `"`.
pub fn looks_like_yaml(head: &[u8]) -> bool {
    head.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| !b"{[\"".contains(b))
}

/// `Some(true)` for `.yaml`/`.yml`, `Some(false)` for `.json`, `None` otherwise.
pub fn extension_says(p: &Path) -> Option<bool> {
    match p.extension()?.to_str()? {
        "yaml" | "yml" => Some(true),
        "json" => Some(false),
        _ => None,
    }
}

/// Every object in one stream: YAML if `yaml` says so, else (when unknown) when its first byte
/// other than white space is not `{`, `[` or `"`.
pub fn for_each_object_in_stream(
    reader: impl Read,
    source: &str,
    yaml: Option<bool>,
    each: &mut dyn FnMut(Value),
) -> Result<()> {
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let yaml = match yaml {
        Some(y) => y,
        None => {
            let head = reader.fill_buf().map_err(|e| Error::Io {
                source_name: source.to_string(),
                source: e,
            })?;
            looks_like_yaml(head)
        }
    };
    if yaml {
        for_each_yaml_object(reader, source, each)
    } else {
        for_each_object(reader, source, each)
    }
}

/// YAML documents (`---`-separated), each a Pod, a List of them, or a Node. Each document is
/// turned into the JSON value it denotes; a List's items are handed over one by one.
pub fn for_each_yaml_object<R: Read>(
    mut reader: R,
    source: &str,
    each: &mut dyn FnMut(Value),
) -> Result<()> {
    use serde::Deserialize;
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes).map_err(|e| Error::Io {
        source_name: source.to_string(),
        source: e,
    })?;
    if let Some(line) = flow_nesting_beyond(&bytes, MAX_YAML_FLOW_DEPTH) {
        return Err(Error::Input {
            source_name: source.to_string(),
            reason: format!(
                "YAML nested deeper than {MAX_YAML_FLOW_DEPTH} levels of [ and {{ at line {line}; not a Pod"
            ),
        });
    }
    let mut any = false;
    for (i, doc) in serde_yaml_ng::Deserializer::from_slice(&bytes).enumerate() {
        let v = Value::deserialize(doc).map_err(|e| Error::Input {
            source_name: source.to_string(),
            reason: format!("YAML document {}: {e}", i + 1),
        })?;
        match v {
            Value::Null => continue, // an empty document
            Value::Object(mut m) if m.get("items").is_some_and(Value::is_array) => {
                if let Some(Value::Array(items)) = m.remove("items") {
                    items.into_iter().for_each(&mut *each);
                }
            }
            v => each(v),
        }
        any = true;
    }
    if !any {
        return Err(Error::Input {
            source_name: source.to_string(),
            reason: "no YAML documents".into(),
        });
    }
    Ok(())
}

/// Deeper flow nesting than any Pod has. The YAML scanner's cost per token grows with the flow
/// depth, so `{a: {a: …` 100,000 levels deep took a minute to reject; this bound is checked
/// first, in one linear pass.
const MAX_YAML_FLOW_DEPTH: usize = 256;

/// The line at which `[`/`{` nesting outside quoted scalars and comments first exceeds `limit`.
/// A quote opens a quoted scalar only where a token starts (after white space, `[`, `{`, `,` or
/// at the start), as in YAML; brackets inside plain or block scalars are counted, which can only
/// make the check stricter.
fn flow_nesting_beyond(bytes: &[u8], limit: usize) -> Option<usize> {
    let (mut depth, mut line, mut prev) = (0usize, 1usize, b'\n');
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let token_start = matches!(prev, b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',');
        match c {
            b'\n' => line += 1,
            b'#' if matches!(prev, b' ' | b'\t' | b'\n' | b'\r') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' if token_start => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' if c == b'"' => i += 1,
                        b'\'' if c == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 1,
                        q if q == c => break,
                        b'\n' => line += 1,
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(line);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev = bytes.get(i).copied().unwrap_or(b' ');
        i += 1;
    }
    None
}

struct Top<'f, F> {
    each: &'f mut F,
}

impl<'de, F: FnMut(Value)> DeserializeSeed<'de> for Top<'_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value)> Visitor<'de> for Top<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Pod, a PodList/List, or an array of them")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(v) = seq.next_element::<Value>()? {
            (self.each)(v);
        }
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<(), E> {
        (self.each)(Value::Bool(v));
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        (self.each)(Value::Null);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let mut rest = Map::new();
        let mut streamed = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(Items { each: self.each })?;
                streamed = true;
            } else {
                let v: Value = map.next_value()?;
                rest.insert(key, v);
            }
        }
        if !streamed {
            (self.each)(Value::Object(rest));
        }
        Ok(())
    }
}

struct Items<'f, F> {
    each: &'f mut F,
}

impl<'de, F: FnMut(Value)> DeserializeSeed<'de> for Items<'_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value)> Visitor<'de> for Items<'_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of items")
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(v) = seq.next_element::<Value>()? {
            (self.each)(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_list_items_arrays_and_single_objects() {
        let mut names = Vec::new();
        let input = r#"{"kind":"List","metadata":{},"items":[{"a":1},{"a":2}]} [{"a":3}] {"a":4}"#;
        for_each_object(input.as_bytes(), "t", |v| {
            names.push(v["a"].as_i64().unwrap())
        })
        .unwrap();
        assert_eq!(names, [1, 2, 3, 4]);
        let err = for_each_object(&b"{\"items\":[{\"a\":1},"[..], "t", |_| {}).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("t: not valid JSON: EOF while parsing"),
            "{err}"
        );
        assert!(for_each_object(&b"  "[..], "t", |_| {}).is_err());
    }

    #[test]
    fn yaml_documents_and_lists() {
        let y = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\nkind: List\nitems:\n- {kind: Pod, metadata: {name: b}}\n- {kind: Pod, metadata: {name: c}}\n";
        let mut names = Vec::new();
        for_each_yaml_object(y.as_bytes(), "t.yaml", &mut |v| {
            names.push(v["metadata"]["name"].as_str().unwrap().to_string())
        })
        .unwrap();
        assert_eq!(names, ["a", "b", "c"]);
        let err = for_each_yaml_object("a: [1".as_bytes(), "bad.yaml", &mut |_| {}).unwrap_err();
        let deep = "{a: ".repeat(100_000);
        let e = for_each_yaml_object(deep.as_bytes(), "deep.yaml", &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("deeper than 256"), "{e}");
        // Brackets in quoted scalars and comments do not count; a Pod-like depth passes the check.
        let quoted = format!(
            "a: \"{}\" # {}\nb: '{}'\n",
            "[".repeat(300),
            "{".repeat(300),
            "{".repeat(300)
        );
        assert_eq!(flow_nesting_beyond(quoted.as_bytes(), 256), None);
        assert_eq!(flow_nesting_beyond(b"x: don't [[[", 2), Some(1));
        assert!(
            err.to_string().starts_with("bad.yaml: YAML document 1: "),
            "{err}"
        );
    }
}
