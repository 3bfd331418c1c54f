//! Output of `kubehash hash`: a table for people, JSON and JSON Lines for machines.
//!
//! The JSON Lines record is the golden-vector format:
//! `{"id":…,"hash":{"1.8":"…",…},"hash_without_resources":{"1.27":"…",…}}`, or
//! `{"id":…,"error":"…"}` for a container that could not be hashed. Versions appear oldest first.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::hash::ContainerHashes;
use crate::version::KubeletVersion;

/// The outcome for one container.
#[derive(Debug)]
pub struct HashRow {
    pub id: String,
    pub result: Result<ContainerHashes, String>,
}

impl HashRow {
    /// The machine-readable record.
    pub fn to_json(&self) -> Value {
        match &self.result {
            Ok(h) => {
                let map = |v: Vec<(String, String)>| {
                    Value::Object(
                        v.into_iter()
                            .map(|(k, h)| (k, Value::String(h)))
                            .collect::<Map<_, _>>(),
                    )
                };
                json!({
                    "id": self.id,
                    "hash": map(h.hash_hex()),
                    "hash_without_resources": map(h.without_resources_hex()),
                })
            }
            Err(e) => json!({"id": self.id, "error": e}),
        }
    }
}

/// One JSON object per line.
pub fn write_jsonl(rows: &[HashRow], out: &mut impl Write) -> io::Result<()> {
    for r in rows {
        serde_json::to_writer(&mut *out, &r.to_json())?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// A pretty-printed JSON array.
pub fn write_json(rows: &[HashRow], out: &mut impl Write) -> io::Result<()> {
    let all: Vec<Value> = rows.iter().map(HashRow::to_json).collect();
    serde_json::to_writer_pretty(&mut *out, &all)?;
    out.write_all(b"\n")
}

/// A table with one line per run of versions that agree on both hashes:
///
/// ```text
/// CONTAINER      KUBELET      HASH      HASH_WITHOUT_RESOURCES
/// default/web/a  1.8          879f805d
///                1.9–1.13     21f553af
///                1.27–1.30    80a2c86f  3162d3c1
/// ```
pub fn write_table(rows: &[HashRow], out: &mut impl Write) -> io::Result<()> {
    let mut lines: Vec<[String; 4]> = Vec::new();
    for r in rows {
        match &r.result {
            Err(e) => lines.push([r.id.clone(), "error".into(), e.clone(), String::new()]),
            Ok(h) => {
                let mut first = true;
                for (range, hash, without) in runs(h) {
                    let id = if first { r.id.clone() } else { String::new() };
                    first = false;
                    lines.push([id, range, hash, without]);
                }
            }
        }
    }
    let header = ["CONTAINER", "KUBELET", "HASH", "HASH_WITHOUT_RESOURCES"].map(String::from);
    let width = |i: usize| {
        lines
            .iter()
            .chain(std::iter::once(&header))
            .map(|l| l[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0), width(1), width(2));
    for l in std::iter::once(&header).chain(&lines) {
        let line = format!("{:w0$}  {:w1$}  {:w2$}  {}", l[0], l[1], l[2], l[3]);
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Consecutive versions with the same (hash, hashWithoutResources), as `1.9–1.13`.
fn runs(h: &ContainerHashes) -> Vec<(String, String, String)> {
    let mut out: Vec<(KubeletVersion, KubeletVersion, u32, Option<u32>)> = Vec::new();
    for &(v, hash) in &h.hash {
        let without = h.get_without_resources(v);
        match out.last_mut() {
            Some(last)
                if last.2 == hash && last.3 == without && last.1.minor() + 1 == v.minor() =>
            {
                last.1 = v
            }
            _ => out.push((v, v, hash, without)),
        }
    }
    out.into_iter()
        .map(|(a, b, hash, without)| {
            let range = if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            };
            (
                range,
                format!("{hash:x}"),
                without.map(|w| format!("{w:x}")).unwrap_or_default(),
            )
        })
        .collect()
}
