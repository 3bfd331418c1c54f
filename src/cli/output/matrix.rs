//! `matrix`'s report: how many containers each upgrade between kubelet versions would restart.

use std::io::{self, Write};

use serde_json::{json, Value};

use crate::analysis::matrix::RestartMatrix;

use super::table::write_columns;
use super::{to_value, Render};

impl Render for RestartMatrix {
    /// The matrices, and every ordered pair labelled as `scan` counts it: `{"from","to",
    /// "restarted","recreated","kept","not_running","hash_changed"}`.
    fn document(&self) -> Value {
        let mut doc = to_value(self);
        let mut pairs = Vec::new();
        let n = self.versions.len();
        for (i, j) in (0..n).flat_map(|i| (0..n).map(move |j| (i, j))) {
            if i != j {
                let s = self.step(i, j);
                pairs.push(json!({"from": s.from, "to": s.to, "restarted": s.restart,
                    "recreated": s.recreated, "kept": s.kept, "not_running": s.not_running,
                    "hash_changed": s.hash_changed}));
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

/// The matrix as upgrade steps, one row per step between consecutive versions, with `scan`'s
/// columns, then how many hashes change, running or not (a pod written by hand, with no node and
/// no status, does not run).
fn write_matrix_table(m: &RestartMatrix, out: &mut dyn Write) -> io::Result<()> {
    let head = [
        "UPGRADE",
        "CONTAINERS",
        "RESTART",
        "RECREATED",
        "KEPT",
        "NOT-RUNNING",
        "HASH-CHANGED",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    for s in m.steps() {
        rows.push(vec![
            format!("{} → {}", s.from, s.to),
            m.containers.to_string(),
            s.restart.to_string(),
            s.recreated.to_string(),
            s.kept.to_string(),
            s.not_running.to_string(),
            s.hash_changed.to_string(),
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
