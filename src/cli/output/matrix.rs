//! `matrix`'s report: how many containers each kubelet version would restart.

use std::io::{self, Write};

use serde_json::{json, Value};

use crate::analysis::matrix::RestartMatrix;

use super::table::write_columns;
use super::{to_value, Render};

impl Render for RestartMatrix {
    /// The matrix, and every ordered pair labelled: `{"from","to","restarted"}`.
    fn document(&self) -> Value {
        let mut doc = to_value(self);
        let mut pairs = Vec::new();
        for (i, from) in self.versions.iter().enumerate() {
            for (j, to) in self.versions.iter().enumerate() {
                if i != j {
                    pairs.push(json!({"from": from, "to": to, "restarted": self.changed[i][j]}));
                }
            }
        }
        if let Value::Object(m) = &mut doc {
            m.insert("pairs".into(), Value::Array(pairs));
        }
        doc
    }
    fn kind(&self) -> Option<&'static str> {
        Some("RestartMatrix")
    }
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        write_matrix_table(self, out)
    }
}

/// The matrix as upgrade steps: one row per step between consecutive versions.
fn write_matrix_table(m: &RestartMatrix, out: &mut dyn Write) -> io::Result<()> {
    let mut rows = vec![["UPGRADE", "RESTARTED", "OF", "PERCENT"]
        .map(String::from)
        .to_vec()];
    for (a, b, n) in m.steps() {
        let pct = if m.containers == 0 {
            0.0
        } else {
            100.0 * n as f64 / m.containers as f64
        };
        rows.push(vec![
            format!("{a} → {b}"),
            n.to_string(),
            m.containers.to_string(),
            format!("{pct:.1}%"),
        ]);
    }
    write_columns(&rows, out)?;
    if m.errors > 0 {
        writeln!(
            out,
            "{} containers could not be hashed and are not counted",
            m.errors
        )?;
    }
    Ok(())
}
