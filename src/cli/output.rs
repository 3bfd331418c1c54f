//! Output of `kubehash hash`: a table for people, JSON and JSON Lines for machines.
//!
//! The JSON Lines record is the golden-vector format:
//! `{"id":…,"hash":{"1.8":"…",…},"hash_without_resources":{"1.27":"…",…}}`, or
//! `{"id":…,"error":"…"}` for a container that could not be hashed. Versions appear oldest first.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::analysis::matrix::RestartMatrix;
use crate::analysis::plan::{ContainerPlan, Verdict};
use crate::analysis::scan::{ContainerImpact, Counts, Impact, ScanReport};
use crate::kubelet::hash::ContainerHashes;
use crate::kubelet::version::KubeletVersion;

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

/// Left-aligned columns, two spaces apart, trailing space trimmed.
pub fn write_columns(rows: &[Vec<String>], out: &mut impl Write) -> io::Result<()> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        write_row(r, &widths, out)?;
    }
    Ok(())
}

/// The header of a table of counts: `first` columns, then the columns of [`counts_cells`].
fn count_header(first: &[&str]) -> Vec<String> {
    first
        .iter()
        .chain(&[
            "CONTAINERS",
            "RESTART",
            "RECREATED",
            "KEPT",
            "NOT-RUNNING",
            "ERROR",
        ])
        .map(|h| h.to_string())
        .collect()
}

fn counts_cells(c: &Counts) -> [String; 6] {
    [
        c.containers,
        c.restart,
        c.recreated,
        c.kept,
        c.not_running,
        c.error,
    ]
    .map(|n| n.to_string())
}

/// The scan report for people: the totals, then by node, by workload, and every container.
pub fn write_scan_table(r: &ScanReport, out: &mut impl Write) -> io::Result<()> {
    let t = &r.total;
    writeln!(
        out,
        "Upgrade to kubelet {}: {} of {} containers would be restarted, {} recreated with their static pod, {} kept, {} not running{}.",
        r.to,
        t.restart,
        t.containers,
        t.recreated,
        t.kept,
        t.not_running,
        if t.error > 0 {
            format!(", {} undecided (see ERROR)", t.error)
        } else {
            String::new()
        }
    )?;
    writeln!(out)?;

    let mut rows = vec![count_header(&["NODE", "KUBELET"])];
    for (node, s) in &r.nodes {
        let mut row = vec![
            if node.is_empty() {
                "(unscheduled)".into()
            } else {
                node.clone()
            },
            s.from.clone().unwrap_or_else(|| "?".into()),
        ];
        row.extend(counts_cells(&s.counts));
        rows.push(row);
    }
    write_columns(&rows, out)?;
    writeln!(out)?;

    let mut rows = vec![count_header(&["WORKLOAD"])];
    let mut workloads: Vec<_> = r.workloads.iter().collect();
    workloads.sort_by(|a, b| b.1.restart.cmp(&a.1.restart).then(a.0.cmp(b.0)));
    for (w, c) in workloads {
        let mut row = vec![w.clone()];
        row.extend(counts_cells(c));
        rows.push(row);
    }
    write_columns(&rows, out)?;
    writeln!(out)?;

    // Two passes over the details (which may be on disk): column widths, then rows.
    let header: Vec<String> = ["CONTAINER", "NODE", "KIND", "FROM", "VERDICT", "WHY"]
        .map(String::from)
        .to_vec();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for c in r.containers.iter() {
        for (w, cell) in widths.iter_mut().zip(detail_row(&c?)) {
            *w = (*w).max(cell.chars().count());
        }
    }
    write_row(&header, &widths, out)?;
    for c in r.containers.iter() {
        write_row(&detail_row(&c?), &widths, out)?;
    }
    for p in &r.problems {
        writeln!(out, "not scanned: {p}")?;
    }
    Ok(())
}

fn detail_row(c: &ContainerImpact) -> Vec<String> {
    let o = &c.outcome;
    let verdict = match (o.impact, o.verdict) {
        (Impact::Kept, _) => "kept",
        (Impact::NotRunning, _) => "not-running",
        (Impact::Recreated, _) => "recreated",
        (Impact::Restart, Verdict::WillRestart) => "will-restart",
        (Impact::Restart, Verdict::Unprovable) => "unprovable",
        (Impact::Restart, _) => "restart",
        (Impact::Error, _) => "ERROR",
    };
    let why = match (&o.error, o.reasons.first()) {
        (Some(e), _) => e.clone(),
        (None, Some(first)) if o.reasons.len() > 1 => {
            format!("{first} (+{} more)", o.reasons.len() - 1)
        }
        (None, Some(first)) => first.clone(),
        (None, None) => format!("hash {} unchanged", o.hash_from.clone().unwrap_or_default()),
    };
    vec![
        format!("{}/{}/{}", c.namespace, c.pod, c.container),
        c.node.clone(),
        format!("{:?}", c.kind).to_lowercase(),
        c.from.clone().unwrap_or_else(|| "?".into()),
        verdict.into(),
        why,
    ]
}

fn write_row(cells: &[String], widths: &[usize], out: &mut impl Write) -> io::Result<()> {
    let mut line = String::new();
    for (i, c) in cells.iter().enumerate() {
        line.push_str(c);
        if i + 1 < cells.len() {
            line.push_str(&" ".repeat(widths[i].saturating_sub(c.chars().count()) + 2));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

/// The matrix as upgrade steps, like `restart-matrix.md`.
pub fn write_matrix_table(m: &RestartMatrix, out: &mut impl Write) -> io::Result<()> {
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

/// Counts of a node plan by verdict, in the order people read them.
pub fn plan_counts(plans: &[ContainerPlan]) -> Vec<(&'static str, usize)> {
    [
        Verdict::Rewrite,
        Verdict::Unchanged,
        Verdict::WillRestart,
        Verdict::Unprovable,
        Verdict::NotRunning,
        Verdict::Recreated,
        Verdict::NoPod,
        Verdict::Error,
    ]
    .iter()
    .map(|v| (v.as_str(), plans.iter().filter(|p| p.verdict == *v).count()))
    .collect()
}

/// A node's plan for people: one line of counts, then one row per container.
pub fn write_plan_table(
    plans: &[ContainerPlan],
    heading: &str,
    out: &mut impl Write,
) -> io::Result<()> {
    let counts: Vec<String> = plan_counts(plans)
        .iter()
        .map(|(v, n)| format!("{n} {v}"))
        .collect();
    writeln!(out, "{heading}: {}.", counts.join(", "))?;
    writeln!(out)?;
    let mut rows = vec![[
        "CONTAINER",
        "POD",
        "NAME",
        "STATE",
        "STORED",
        "NEW",
        "VERDICT",
        "PROVENANCE",
        "WHY",
    ]
    .map(String::from)
    .to_vec()];
    for p in plans {
        rows.push(vec![
            p.id.chars().take(13).collect(),
            format!("{}/{}", p.namespace, p.pod),
            p.container.clone(),
            p.state.clone(),
            p.stored_hash.clone().unwrap_or_else(|| "-".into()),
            p.new_hash.clone().unwrap_or_else(|| "-".into()),
            p.verdict.as_str().into(),
            if p.provenance.is_empty() {
                "-".into()
            } else {
                p.provenance.join(",")
            },
            p.reason.clone(),
        ]);
    }
    write_columns(&rows, out)
}
