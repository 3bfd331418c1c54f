//! What `kubehash hash` prints, written as the rows come: JSON Lines, JSON and YAML stream one
//! record at a time, and the table keeps only its lines (spilled to a temporary file past
//! [`crate::analysis::spill::SPILL_AFTER`]) to size its columns, so any input is hashed in
//! bounded memory. The bytes are exactly those of printing the whole list at once. (`hash`
//! writes them to a spool and copies it to stdout only once the input was read to its end.)

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::analysis::spill::Spill;
use crate::cli::output::{for_people, Format};
use crate::error::Problem;
use crate::kubelet::hash::ContainerHashes;
use crate::kubelet::version::KubeletVersion;

/// The outcome for one container.
#[derive(Debug)]
pub struct HashRow {
    pub id: String,
    pub result: Result<ContainerHashes, Problem>,
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

/// One text of `hash --explain`: what kubelet `version` feeds to FNV-1a for one annotation.
pub struct Explained<'a> {
    pub id: &'a str,
    pub version: KubeletVersion,
    pub annotation: &'a str,
    pub hash: String,
    /// The `json.Marshal` output the text dumps (1.16 +).
    pub marshalled: Option<String>,
    pub text: Vec<u8>,
}

/// `# ID: kubelet V ANNOTATION = HASH`, the `json.Marshal` line where there is one, the text.
pub fn write_explained(e: &Explained, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "# {}: kubelet {} {} = {}",
        e.id, e.version, e.annotation, e.hash
    )?;
    if let Some(j) = &e.marshalled {
        writeln!(out, "# json.Marshal: {j}")?;
    }
    out.write_all(&e.text)?;
    out.write_all(b"\n")
}

/// Prints hash rows in one format as they come; [`HashWriter::finish`] ends the document.
pub struct HashWriter<W: Write> {
    format: Format,
    out: W,
    rows: usize,
    /// Table lines and the widest cell of the first three columns.
    lines: Spill<[String; 4]>,
    widths: [usize; 3],
    /// Whether some line has a hashWithoutResources (else the table leaves its column out).
    without: bool,
}

const HEADER: [&str; 4] = ["CONTAINER", "KUBELET", "HASH", "HASH-WITHOUT-RESOURCES"];

impl<W: Write> HashWriter<W> {
    pub fn new(format: Format, out: W) -> Self {
        HashWriter {
            format,
            out,
            rows: 0,
            lines: Spill::default(),
            widths: [0, 1, 2].map(|i| HEADER[i].chars().count()),
            without: false,
        }
    }

    pub fn row(&mut self, row: &HashRow) -> io::Result<()> {
        let first = self.rows == 0;
        self.rows += 1;
        match self.format {
            Format::Table | Format::Wide => {
                for line in table_lines(row) {
                    for (w, cell) in self.widths.iter_mut().zip(&line) {
                        *w = (*w).max(cell.chars().count());
                    }
                    self.without |= !line[3].is_empty();
                    self.lines.push(line)?;
                }
            }
            Format::Jsonl => {
                serde_json::to_writer(&mut self.out, &row.to_json())?;
                self.out.write_all(b"\n")?;
            }
            Format::Json => {
                // An element of a pretty-printed array: its own pretty text, indented one level
                // (JSON strings hold no raw newline, so every line break is structure).
                self.out.write_all(if first { b"[\n" } else { b",\n" })?;
                let text = serde_json::to_string_pretty(&row.to_json())?;
                for (i, line) in text.split('\n').enumerate() {
                    if i > 0 {
                        self.out.write_all(b"\n")?;
                    }
                    self.out.write_all(b"  ")?;
                    self.out.write_all(line.as_bytes())?;
                }
            }
            Format::Yaml => {
                // A block sequence is its items' `- ` entries one after another.
                serde_yaml_ng::to_writer(&mut self.out, &[row.to_json()])
                    .map_err(io::Error::other)?;
            }
        }
        Ok(())
    }

    /// Ends the document (the table is written here), flushes, and gives the writer back.
    pub fn finish(mut self) -> io::Result<W> {
        match self.format {
            Format::Table | Format::Wide => {
                self.lines.finish()?;
                let [w0, w1, w2] = self.widths;
                let header = HEADER.map(String::from);
                let rows = std::iter::once(Ok(header)).chain(self.lines.iter());
                for l in rows {
                    let l = l?;
                    let line = if self.without {
                        format!("{:w0$}  {:w1$}  {:w2$}  {}", l[0], l[1], l[2], l[3])
                    } else {
                        format!("{:w0$}  {:w1$}  {}", l[0], l[1], l[2])
                    };
                    writeln!(self.out, "{}", line.trim_end())?;
                }
            }
            Format::Jsonl => {}
            Format::Json => {
                self.out
                    .write_all(if self.rows == 0 { b"[]\n" } else { b"\n]\n" })?;
            }
            Format::Yaml => {
                if self.rows == 0 {
                    self.out.write_all(b"[]\n")?;
                }
            }
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The table's lines for one row, one per run of versions that agree on both hashes:
///
/// ```text
/// CONTAINER      KUBELET      HASH      HASH-WITHOUT-RESOURCES
/// default/web/a  1.8          879f805d
///                1.9–1.13     21f553af
///                1.27–1.30    80a2c86f  3162d3c1
/// ```
fn table_lines(r: &HashRow) -> Vec<[String; 4]> {
    // The id and an error quote the input: shown, not obeyed (`output::for_people`).
    let shown = |s: &str| for_people(s, false, false).into_owned();
    match &r.result {
        Err(e) => vec![[
            shown(&r.id),
            "error".into(),
            shown(&e.to_string()),
            String::new(),
        ]],
        Ok(h) => runs(h)
            .into_iter()
            .enumerate()
            .map(|(i, (range, hash, without))| {
                let id = if i == 0 { shown(&r.id) } else { String::new() };
                [id, range, hash, without]
            })
            .collect(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::hash::hash_container;
    use crate::kubelet::version::parse_version_set;

    fn rows(n: usize) -> Vec<HashRow> {
        let versions = parse_version_set("1.26..1.31").unwrap();
        (0..n)
            .map(|i| HashRow {
                id: format!("c{i}"),
                result: if i == 1 {
                    Err(Problem::from("c1.image: expected string, got number 7"))
                } else {
                    let c = json!({"name": format!("n{i}"), "image": "i"});
                    Ok(hash_container(&c, &versions, "").unwrap())
                },
            })
            .collect()
    }

    fn streamed(format: Format, rows: &[HashRow]) -> String {
        let mut out = Vec::new();
        let mut w = HashWriter::new(format, &mut out);
        for r in rows {
            w.row(r).unwrap();
        }
        w.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn streamed_json_and_yaml_are_the_whole_list_printed_at_once() {
        for n in [0, 1, 3] {
            let rows = rows(n);
            let whole = Value::Array(rows.iter().map(HashRow::to_json).collect());
            let json = serde_json::to_string_pretty(&whole).unwrap() + "\n";
            assert_eq!(streamed(Format::Json, &rows), json, "{n} rows");
            let yaml = serde_yaml_ng::to_string(&whole).unwrap();
            assert_eq!(streamed(Format::Yaml, &rows), yaml, "{n} rows");
        }
    }

    #[test]
    fn table_columns_fit_the_widest_cell_of_any_row() {
        let text = streamed(Format::Table, &rows(3));
        let lines: Vec<&str> = text.lines().collect();
        // CONTAINER (9) + 2, "1.26–1.30" (9 characters) + 2, the error message (39) + 2.
        assert_eq!(
            lines[0].find("HASH-WITHOUT-RESOURCES"),
            Some(9 + 2 + 9 + 2 + 39 + 2)
        );
        assert!(lines
            .iter()
            .any(|l| l.starts_with("c1         error      c1.image")));
    }
}
