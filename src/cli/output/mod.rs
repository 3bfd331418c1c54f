//! Every output of every subcommand: a table for people, JSON, YAML and JSON Lines for machines.
//! Each report implements [`Render`], in the file of its command (`scan`, `matrix`, `node`,
//! `audit`, `shim`; `table` has the columns they share); [`emit`] picks the format, so a new
//! format is one arm in [`emit`] and a new report is one `impl Render`.
//!
//! The JSON Lines record of `hash` is the golden-vector format:
//! `{"id":…,"hash":{"1.8":"…",…},"hash_without_resources":{"1.27":"…",…}}`, or
//! `{"id":…,"error":"…"}` for a container that could not be hashed. Versions appear oldest first.
//! Other reports are one document: pretty JSON, or with `jsonl` compact on one line.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::{json, Map, Value};

mod audit;
mod for_people;
mod matrix;
mod node;
mod scan;
mod shim;
mod table;

pub use audit::AuditReport;
pub(crate) use for_people::{for_people, ForPeople};
pub use node::{Checks, NodePlan, Preflight};
pub use scan::{ScanRows, ScanView, SortBy};
pub use shim::{write_shim_status, ShimStatus};

/// `-o`: how a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Columns for people: what matters.
    Table,
    /// Columns for people: everything (every container, kept ones too).
    Wide,
    /// Pretty JSON.
    Json,
    /// YAML.
    Yaml,
    /// JSON Lines: one record per line where the report is a list, else one compact line.
    Jsonl,
}

pub use crate::analysis::report::API_VERSION;

/// A report that can be printed in every [`Format`].
pub trait Render {
    /// The machine-readable form.
    fn document(&self) -> Value;
    /// The report's `kind` in JSON and YAML, for reports that are one object.
    fn kind(&self) -> Option<&'static str> {
        None
    }
    /// The lines of `-o jsonl`; by default the document on one line.
    fn lines(&self) -> Vec<Value> {
        vec![self.typed()]
    }
    /// The table for people.
    fn table(&self, out: &mut dyn Write) -> io::Result<()>;
    /// The table with everything; by default the table.
    fn wide(&self, out: &mut dyn Write) -> io::Result<()> {
        self.table(out)
    }
    /// JSON, YAML and JSON Lines written straight from the report instead of through
    /// [`Render::typed`], for reports too large to hold as one `Value`; `None`: no such path.
    /// The bytes must be those of the `Value` path.
    fn stream(&self, _format: Format, _out: &mut dyn Write) -> Option<io::Result<()>> {
        None
    }
    /// The document, with `apiVersion` and `kind` first when it has a kind.
    fn typed(&self) -> Value {
        let doc = self.document();
        match (self.kind(), doc) {
            (Some(kind), Value::Object(fields)) => {
                let mut typed = Map::new();
                typed.insert("apiVersion".into(), API_VERSION.into());
                typed.insert("kind".into(), kind.into());
                typed.extend(fields);
                Value::Object(typed)
            }
            (_, doc) => doc,
        }
    }
}

/// Prints `report` in `format` to `out` and flushes.
pub fn emit(format: Format, report: &dyn Render, out: &mut dyn Write) -> io::Result<()> {
    let mut people;
    let out: &mut dyn Write = match format {
        Format::Table | Format::Wide => {
            people = ForPeople::new(out, table::colour());
            &mut people
        }
        _ => out,
    };
    if let Some(done) = report.stream(format, out) {
        done?;
        return out.flush();
    }
    match format {
        Format::Table => report.table(out)?,
        Format::Wide => report.wide(out)?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &report.typed())?;
            out.write_all(b"\n")?;
        }
        Format::Yaml => {
            serde_yaml_ng::to_writer(&mut *out, &report.typed()).map_err(io::Error::other)?;
        }
        Format::Jsonl => {
            for line in report.lines() {
                serde_json::to_writer(&mut *out, &line)?;
                out.write_all(b"\n")?;
            }
        }
    }
    out.flush()
}

/// A serializable value as a document (reports that are plain data).
fn to_value(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or_else(|e| json!({"error": e.to_string()}))
}

/// A report with `apiVersion` and `kind` first, as [`Render::typed`] makes it.
#[derive(Serialize)]
struct Typed<'a, T: Serialize> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    #[serde(flatten)]
    report: &'a T,
}
