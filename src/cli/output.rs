//! Every output of every subcommand, in one place: a table for people, JSON and JSON Lines for
//! machines. Each report implements [`Render`]; [`emit`] picks the format, so a new format is one
//! arm in [`emit`] and a new report is one `impl Render`.
//!
//! The JSON Lines record of `hash` is the golden-vector format:
//! `{"id":…,"hash":{"1.8":"…",…},"hash_without_resources":{"1.27":"…",…}}`, or
//! `{"id":…,"error":"…"}` for a container that could not be hashed. Versions appear oldest first.
//! Other reports are one document: pretty JSON, or with `jsonl` compact on one line.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::analysis::audit::{Audited, Fate};
use crate::analysis::matrix::RestartMatrix;
use crate::analysis::plan::{ContainerPlan, Verdict};
use crate::analysis::preflight::{worst, Check, Status};
use crate::analysis::runs::{a_temporary_file, Items, Sorter};
use crate::analysis::scan::{ContainerImpact, Counts, Impact, NodeUpgrade, ScanReport};
use crate::analysis::spill::SPILL_AFTER;
use crate::analysis::statics::{PinAction, StaticPod};
use crate::kubelet::version::KubeletVersion;
use crate::rewrite::outcome::{Applied, ApplyReport, CheckOutcome};

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

/// The `apiVersion` of kubehash's machine-readable reports.
pub const API_VERSION: &str = "kubehash.dev/v1alpha1";

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

/// Left-aligned columns, two spaces apart, trailing space trimmed.
fn write_columns(rows: &[Vec<String>], out: &mut dyn Write) -> io::Result<()> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| visible_len(c))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        write_row(r, &widths, out)?;
    }
    Ok(())
}

/// A failure to write the runs a table's rows are sorted in, with where they were written.
fn sorting(e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "cannot sort the table's rows in {}: {e}",
            a_temporary_file()
        ),
    )
}

/// A table's rows in the order they are printed, and its columns' widths.
struct Sorted<T> {
    widths: Vec<usize>,
    rows: Items<'static, T>,
}

/// The workloads by restarts, then name, and the widths of their table's columns (`header`'s
/// included). A cluster of bare pods has a workload per pod, so they are sorted on disk past a
/// size.
fn workloads_by_restarts(
    r: &ScanReport,
    header: &[String],
) -> io::Result<Sorted<(String, Counts)>> {
    let mut widths: Vec<usize> = header.iter().map(|h| visible_len(h)).collect();
    let mut by_restarts = Sorter::new(SPILL_AFTER, |a: &(String, Counts), b: &(String, Counts)| {
        b.1.restart.cmp(&a.1.restart).then_with(|| a.0.cmp(&b.0))
    });
    for w in r.workloads.iter() {
        let (name, counts) = w?;
        for (w, cell) in widths.iter_mut().zip(workload_row(&name, &counts)) {
            *w = (*w).max(visible_len(&cell));
        }
        by_restarts.push((name, counts)).map_err(sorting)?;
    }
    Ok(Sorted {
        widths,
        rows: Box::new(by_restarts.sorted()),
    })
}

/// A workload's row: its name, then [`counts_cells`].
fn workload_row(name: &str, counts: &Counts) -> Vec<String> {
    let mut row = vec![name.to_string()];
    row.extend(counts_cells(counts));
    row
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

/// How the scan table lists containers: which verdicts (`--only`) and in what order (`--sort-by`).
#[derive(Debug, Clone, Default)]
pub struct ScanRows {
    /// Verdicts as the table shows them (`restart`, `will-restart`, `recreated`, …); empty: the
    /// default (what restarts or fails; every container with `-o wide`).
    pub only: Vec<String>,
    pub sort_by: SortBy,
}

/// `--sort-by`: the column the container table is sorted by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    /// Grouped by verdict (the default).
    #[default]
    Verdict,
    Node,
    Container,
    From,
}

/// A scan report and how its table lists containers.
pub struct ScanView<'a> {
    pub report: &'a ScanReport,
    pub rows: ScanRows,
}

impl Render for ScanView<'_> {
    fn document(&self) -> Value {
        to_value(self.report)
    }
    fn kind(&self) -> Option<&'static str> {
        Some("ScanReport")
    }
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        write_scan_table(self.report, false, &self.rows, out)
    }
    fn wide(&self, out: &mut dyn Write) -> io::Result<()> {
        write_scan_table(self.report, true, &self.rows, out)
    }
    fn stream(&self, format: Format, out: &mut dyn Write) -> Option<io::Result<()>> {
        // The containers are read back from the spill one at a time as they are written.
        let typed = Typed {
            api_version: API_VERSION,
            kind: "ScanReport",
            report: self.report,
        };
        let written = match format {
            Format::Table | Format::Wide => return None,
            Format::Json => serde_json::to_writer_pretty(&mut *out, &typed)
                .map_err(io::Error::from)
                .and_then(|()| out.write_all(b"\n")),
            Format::Jsonl => serde_json::to_writer(&mut *out, &typed)
                .map_err(io::Error::from)
                .and_then(|()| out.write_all(b"\n")),
            Format::Yaml => serde_yaml_ng::to_writer(&mut *out, &typed).map_err(io::Error::other),
        };
        Some(written)
    }
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

/// `n` and the noun, plural unless `n` is 1 ("1 restart", "5 restarts").
fn counted(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

/// The scan report for people: the totals, then by node, by workload, and every container.
fn write_scan_table(
    r: &ScanReport,
    wide: bool,
    rows_wanted: &ScanRows,
    out: &mut dyn Write,
) -> io::Result<()> {
    // Everything a large scan sorts on disk is sorted before the first line is written, so that
    // a temporary file that cannot be written (a full $TMPDIR) leaves nothing half-way.
    let workload_header = count_header(&["WORKLOAD"]);
    let workloads = workloads_by_restarts(r, &workload_header)?;
    // The containers that matter (every one with -o wide, or those --only names), sorted as
    // --sort-by says (by verdict: grouped).
    let shown = |c: &ContainerImpact, verdict: &str| {
        if !rows_wanted.only.is_empty() {
            return rows_wanted
                .only
                .iter()
                .any(|o| o.eq_ignore_ascii_case(verdict));
        }
        wide || matches!(
            c.outcome.impact,
            Impact::Restart | Impact::Recreated | Impact::Error
        )
    };
    let header: Vec<String> = ["CONTAINER", "NODE", "KIND", "FROM", "VERDICT", "WHY"]
        .map(String::from)
        .to_vec();
    // The details may be on disk (a large scan): by verdict, they are streamed, one pass for the
    // widths and one per verdict; in another order, the listed rows are sorted on the way.
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    let mut verdicts = std::collections::BTreeSet::new();
    let column = match rows_wanted.sort_by {
        SortBy::Node => 1,
        SortBy::Container => 0,
        SortBy::From => 3,
        SortBy::Verdict => 4,
    };
    // Sorted past a size on disk, as the workloads are.
    let mut sorted = (rows_wanted.sort_by != SortBy::Verdict).then(|| {
        Sorter::new(SPILL_AFTER, move |a: &Vec<String>, b: &Vec<String>| {
            a.get(column).cmp(&b.get(column))
        })
    });
    for c in r.containers.iter() {
        let c = c?;
        let row = detail_row(&c);
        if !shown(&c, &row[4]) {
            continue;
        }
        verdicts.insert(row[4].clone());
        for (w, cell) in widths.iter_mut().zip(&row) {
            *w = (*w).max(cell.chars().count());
        }
        if let Some(sorted) = &mut sorted {
            sorted.push(row).map_err(sorting)?;
        }
    }

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
    writeln!(out, "Scanned: {}.", r.source)?;
    writeln!(out)?;

    let mut rows = vec![count_header(&["NODE", "KUBELET", "UPGRADE"])];
    for (node, s) in &r.nodes {
        let mut row = vec![
            if node.is_empty() {
                "(unscheduled)".into()
            } else {
                node.clone()
            },
            s.from.clone().unwrap_or_else(|| "?".into()),
            match s.upgrade.unwrap_or_else(|| s.decide_upgrade()) {
                NodeUpgrade::NothingRestarts => paint("nothing restarts".into(), 2),
                NodeUpgrade::InPlace if s.counts.recreated > 0 => paint(
                    format!(
                        "in place with kubehash ({} avoided, {} to pin)",
                        counted(s.avoidable, "restart"),
                        counted(s.counts.recreated, "static pod")
                    ),
                    2,
                ),
                NodeUpgrade::InPlace => paint(
                    format!(
                        "in place with kubehash ({} avoided)",
                        counted(s.avoidable, "restart")
                    ),
                    2,
                ),
                NodeUpgrade::DrainNeeded => paint("drain needed".into(), 1),
            },
        ];
        row.extend(counts_cells(&s.counts));
        rows.push(row);
    }
    write_columns(&rows, out)?;
    for (node, s) in &r.nodes {
        for c in s.checks.iter().filter(|c| c.status >= Status::Warn) {
            let status = format!("{:?}", c.status).to_lowercase();
            writeln!(
                out,
                "Preflight on {node}: {} {status}: {}",
                c.name, c.evidence
            )?;
        }
    }
    writeln!(out)?;

    write_row(&workload_header, &workloads.widths, out)?;
    for w in workloads.rows {
        let (name, counts) = w?;
        write_row(&workload_row(&name, &counts), &workloads.widths, out)?;
    }
    writeln!(out)?;

    if verdicts.is_empty() {
        writeln!(out, "No container restarts.")?;
    } else {
        if !wide && rows_wanted.only.is_empty() {
            writeln!(
                out,
                "Containers that restart or fail, by verdict (-o wide lists all):"
            )?;
        }
        write_row(&header, &widths, out)?;
        match sorted {
            None => {
                for verdict in &verdicts {
                    for c in r.containers.iter() {
                        let c = c?;
                        let row = detail_row(&c);
                        if &row[4] == verdict && shown(&c, &row[4]) {
                            write_row(&row, &widths, out)?;
                        }
                    }
                }
            }
            Some(sorted) => {
                for row in sorted.sorted() {
                    write_row(&row?, &widths, out)?;
                }
            }
        }
    }
    for p in r.problems.iter() {
        writeln!(out, "not scanned: {}", p?)?;
    }
    write_next_steps(r, out)
}

/// What to run next, as `kubeadm upgrade plan` ends.
fn write_next_steps(r: &ScanReport, out: &mut dyn Write) -> io::Result<()> {
    let nodes = |u: NodeUpgrade| -> Vec<&str> {
        r.nodes
            .iter()
            .filter(|(n, s)| !n.is_empty() && s.upgrade.unwrap_or_else(|| s.decide_upgrade()) == u)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    let (in_place, drain) = (nodes(NodeUpgrade::InPlace), nodes(NodeUpgrade::DrainNeeded));
    let avoidable: u64 = r.nodes.values().map(|s| s.avoidable).sum();
    writeln!(out)?;
    writeln!(out, "Next:")?;
    if avoidable > 0 {
        writeln!(
            out,
            "  {avoidable} of the {} restarts are only the hash format changing: kubehash keeps those containers.",
            r.total.restart
        )?;
    }
    if !in_place.is_empty() {
        writeln!(
            out,
            "  in place ({}): kubectl annotate node NODE kubehash.dev/target-kubelet-version={} with the agent (deploy/), or on the node: kubehash node plan|apply --to {} --cluster",
            in_place.join(", "),
            r.to,
            r.to
        )?;
    }
    if !drain.is_empty() {
        writeln!(
            out,
            "  drain first ({}): kubectl drain NODE --ignore-daemonsets; see the containers above and kubehash node preflight --to {} on the node",
            drain.join(", "),
            r.to
        )?;
    }
    if in_place.is_empty() && drain.is_empty() {
        writeln!(out, "  nothing restarts: upgrade the kubelets as they are.")?;
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

/// Colours for people: only when standard output is a terminal and `NO_COLOR` is not set
/// (<https://no-color.org>).
fn colour() -> bool {
    use std::io::IsTerminal;
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    })
}

/// `text` in red (1), green (2) or yellow (3) when [`colour`] says so.
fn paint(text: String, ansi: u8) -> String {
    if colour() {
        format!("\x1b[3{ansi}m{text}\x1b[0m")
    } else {
        text
    }
}

/// The width a cell takes on screen: its characters, without colour escapes.
fn visible_len(s: &str) -> usize {
    let mut n = 0;
    let mut escape = false;
    for ch in s.chars() {
        match (escape, ch) {
            (false, '\x1b') => escape = true,
            (true, 'm') => escape = false,
            (true, _) => {}
            (false, _) => n += 1,
        }
    }
    n
}

fn write_row(cells: &[String], widths: &[usize], out: &mut dyn Write) -> io::Result<()> {
    let mut line = String::new();
    for (i, c) in cells.iter().enumerate() {
        line.push_str(c);
        if i + 1 < cells.len() {
            line.push_str(&" ".repeat(widths[i].saturating_sub(visible_len(c)) + 2));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

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

/// `node plan` and `scan --cri`: one node's containers, a verdict each.
pub struct NodePlan {
    pub to: KubeletVersion,
    pub from: Option<KubeletVersion>,
    /// What CRI's Version call reports: name, version, API version.
    pub runtime: (String, String, String),
    /// The preflight checks.
    pub checks: Vec<Check>,
    /// Static pod manifests and what apply does with them.
    pub statics: Vec<StaticPod>,
    pub containers: Vec<ContainerPlan>,
}

impl NodePlan {
    fn heading(&self) -> String {
        let (name, version, api) = &self.runtime;
        format!(
            "Plan for kubelet {} on this node ({name} {version}, CRI {api})",
            self.to
        )
    }
}

impl Render for NodePlan {
    fn kind(&self) -> Option<&'static str> {
        Some("NodePlan")
    }

    fn document(&self) -> Value {
        let counts: Map<String, Value> = crate::analysis::plan::plan_counts(&self.containers)
            .into_iter()
            .map(|(k, n)| (k.to_string(), n.into()))
            .collect();
        let (name, version, api) = &self.runtime;
        json!({
            "to": self.to.to_string(),
            "from": self.from.map(|f| f.to_string()),
            "runtime": {"name": name, "version": version, "api_version": api},
            "counts": counts,
            "in_place": worst(&self.checks) < Status::Fail,
            "checks": to_value(&self.checks),
            "static_pods": to_value(&self.statics),
            "containers": to_value(&self.containers),
        })
    }

    /// One line of counts, then one row per container.
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let counts: Vec<String> = crate::analysis::plan::plan_counts(&self.containers)
            .iter()
            .map(|(v, n)| format!("{n} {v}"))
            .collect();
        writeln!(out, "{}: {}.", self.heading(), counts.join(", "))?;
        writeln!(out)?;
        write_checks(&self.checks, out)?;
        writeln!(out)?;
        if !self.statics.is_empty() {
            let mut rows = vec![["STATIC POD", "MANIFEST", "UID", "ACTION"]
                .map(String::from)
                .to_vec()];
            for p in &self.statics {
                rows.push(vec![
                    format!("{}/{}", p.namespace, p.name),
                    p.path.clone(),
                    if p.uid.is_empty() { "-".into() } else { p.uid.clone() },
                    match &p.action {
                        PinAction::AlreadyPinned => "already pinned".into(),
                        PinAction::Pin => {
                            "pin metadata.uid (harmless to the running kubelet: it derives this very UID)"
                                .into()
                        }
                        PinAction::Refused(why) => format!("left alone: {why}"),
                    },
                ]);
            }
            write_columns(&rows, out)?;
            writeln!(out)?;
        }
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
        for p in &self.containers {
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
}

impl Render for ApplyReport {
    fn document(&self) -> Value {
        to_value(self)
    }
    fn kind(&self) -> Option<&'static str> {
        Some("ApplyReport")
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        if !self.pins.is_empty() {
            let mut rows = vec![["MANIFEST", "UID", "RESULT", "DETAIL"]
                .map(String::from)
                .to_vec()];
            for p in &self.pins {
                rows.push(vec![
                    p.path.clone(),
                    p.uid.clone(),
                    p.result.as_str().into(),
                    p.detail.clone(),
                ]);
            }
            write_columns(&rows, out)?;
            writeln!(out)?;
        }
        let mut rows = vec![["CONTAINER", "POD", "NAME", "VERDICT", "RESULT", "DETAIL"]
            .map(String::from)
            .to_vec()];
        for o in &self.outcomes {
            rows.push(vec![
                o.container_id.chars().take(13).collect(),
                o.pod.clone(),
                o.container.clone(),
                o.verdict.as_str().into(),
                o.result.as_str().into(),
                o.detail.clone(),
            ]);
        }
        write_columns(&rows, out)?;
        writeln!(out)?;
        writeln!(
            out,
            "Summary: {} written, {} already rewritten, {} left alone, {} errors. Journal: {}",
            self.count(Applied::Written),
            self.count(Applied::AlreadyRewritten),
            self.count(Applied::LeftAlone),
            self.count(Applied::Error),
            self.journal
        )?;
        if let Some(why) = &self.stopped {
            writeln!(
                out,
                "Stopped before {} planned writes: {why}",
                self.count(Applied::Stopped)
            )?;
        }
        Ok(())
    }
}

/// `node verify` / `node rollback`: one line per journaled container.
pub struct Checks {
    /// `verified`, or `restored or already original`.
    pub done: &'static str,
    pub outcomes: Vec<CheckOutcome>,
}

impl Render for Checks {
    fn document(&self) -> Value {
        to_value(&self.outcomes)
    }

    fn lines(&self) -> Vec<Value> {
        self.outcomes.iter().map(to_value).collect()
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut rows = vec![["CONTAINER", "NAME", "OK", "DETAIL"]
            .map(String::from)
            .to_vec()];
        for r in &self.outcomes {
            rows.push(vec![
                r.container_id.chars().take(13).collect(),
                r.name.clone(),
                if r.ok { "yes".into() } else { "NO".into() },
                r.detail.clone(),
            ]);
        }
        write_columns(&rows, out)?;
        writeln!(out)?;
        let bad = self.outcomes.iter().filter(|r| !r.ok).count();
        writeln!(
            out,
            "Summary: {} of {} containers {}.",
            self.outcomes.len() - bad,
            self.outcomes.len(),
            self.done
        )
    }
}

/// `node preflight`: the checks for an upgrade to `to`.
pub struct Preflight {
    pub to: KubeletVersion,
    pub checks: Vec<Check>,
}

impl Render for Preflight {
    fn kind(&self) -> Option<&'static str> {
        Some("Preflight")
    }

    fn document(&self) -> Value {
        json!({
            "to": self.to.to_string(),
            "in_place": worst(&self.checks) < Status::Fail,
            "checks": to_value(&self.checks),
        })
    }

    fn lines(&self) -> Vec<Value> {
        self.checks.iter().map(to_value).collect()
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "Preflight for kubelet {}:", self.to)?;
        write_checks(&self.checks, out)
    }
}

/// One row per check, what to do under it, and the conclusion.
fn write_checks(checks: &[Check], out: &mut dyn Write) -> io::Result<()> {
    let mut rows = vec![["CHECK", "RESULT", "EVIDENCE"].map(String::from).to_vec()];
    for c in checks {
        rows.push(vec![
            c.name.to_string(),
            paint(
                format!("{:?}", c.status).to_lowercase(),
                match c.status {
                    Status::Pass => 2,
                    Status::Fail => 1,
                    _ => 3,
                },
            ),
            c.evidence.clone(),
        ]);
    }
    write_columns(&rows, out)?;
    for c in checks.iter().filter(|c| !c.action.is_empty()) {
        writeln!(out, "  {}: {}", c.name, c.action)?;
    }
    let verdict = if worst(checks) >= Status::Fail {
        "drain needed: a check fails (a hash rewrite alone would not keep these pods)"
    } else {
        "in place: no check fails"
    };
    writeln!(out, "Preflight: {verdict}.")
}

/// `audit compare`: what became of each container, against the prediction when there was one.
pub struct AuditReport {
    pub audited: Vec<Audited>,
}

impl AuditReport {
    fn count(&self, f: Fate) -> usize {
        self.audited.iter().filter(|a| a.fate == f).count()
    }
}

impl Render for AuditReport {
    fn kind(&self) -> Option<&'static str> {
        Some("AuditReport")
    }

    fn document(&self) -> Value {
        json!({
            "counts": {
                "kept": self.count(Fate::Kept),
                "restarted": self.count(Fate::Restarted),
                "recreated": self.count(Fate::Recreated),
                "gone": self.count(Fate::Gone),
            },
            "mispredicted": self.audited.iter().filter(|a| a.as_predicted == Some(false)).count(),
            "containers": to_value(&self.audited),
        })
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "{} containers ran before: {} kept, {} restarted, {} recreated with their pod, {} gone.",
            self.audited.len(),
            self.count(Fate::Kept),
            self.count(Fate::Restarted),
            self.count(Fate::Recreated),
            self.count(Fate::Gone)
        )?;
        let mut rows = vec![[
            "CONTAINER",
            "POD",
            "NAME",
            "FATE",
            "PREDICTED",
            "AS PREDICTED",
        ]
        .map(String::from)
        .to_vec()];
        for a in &self.audited {
            rows.push(vec![
                a.before.id.chars().take(13).collect(),
                format!("{}/{}", a.before.namespace, a.before.pod),
                a.before.container.clone(),
                to_value(&a.fate).as_str().unwrap_or("").to_string(),
                a.predicted.map_or("-".into(), |v| v.as_str().to_string()),
                match a.as_predicted {
                    None => "-".into(),
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                },
            ]);
        }
        writeln!(out)?;
        write_columns(&rows, out)
    }
}

/// `shim --status`: how many containers the shim still translates.
pub struct ShimStatus {
    pub live: usize,
    pub translated: usize,
    pub to: String,
}

/// One line for people.
pub fn write_shim_status(s: &ShimStatus, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{} of {} translated containers are still there (target kubelet {}); the shim can be removed when this is 0 or after `kubehash node apply`.",
        s.live, s.translated, s.to
    )?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::scan::{scan_input, FromVersions, ScanSetup};
    use crate::analysis::spill::Spill;
    use crate::analysis::totals::Totals;
    use crate::source::manifests::Manifests;
    use crate::source::parallel::Input;

    /// A table too large to sort in memory, where the temporary files it sorts in cannot be
    /// made, is an error naming their directory, and nothing of it is written: not the
    /// workloads (one per namespace here), nor the rows in `--sort-by` order (one workload).
    /// Run in a child process of its own, whose `$TMPDIR` is missing.
    #[test]
    fn a_table_that_cannot_be_sorted_writes_nothing() {
        const CHILD: &str = "KUBEHASH_TEST_UNSORTABLE";
        if std::env::var_os(CHILD).is_none() {
            let name = "cli::output::tests::a_table_that_cannot_be_sorted_writes_nothing";
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--nocapture", "--test-threads", "1"])
                .env(CHILD, "1")
                .env("TMPDIR", "/nonexistent/kubehash-tmp")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&child.stdout);
            assert!(child.status.success(), "{said}");
            assert!(said.contains("1 passed"), "{said}");
            return;
        }
        let to: KubeletVersion = "1.31".parse().unwrap();
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/pods.json");
        let setup = ScanSetup::new(
            to,
            FromVersions::Fixed("1.29".parse().unwrap()),
            Manifests::none(),
        );
        let input = Input::Path(std::path::Path::new(example));
        let scanned = scan_input(setup, |_| {}, "pods".into(), &input).unwrap();
        let one = scanned.containers.iter().next().unwrap().unwrap();
        for (sort_by, namespaces) in [(SortBy::Verdict, SPILL_AFTER + 1), (SortBy::Container, 1)] {
            // Held in memory, so that only the table's sorting needs a temporary file.
            let mut report = ScanReport {
                workloads: Totals::with_keep(usize::MAX),
                containers: Spill::with_spill_after(usize::MAX),
                ..ScanReport::new(to)
            };
            for i in 0..=SPILL_AFTER {
                let mut c = one.clone();
                c.namespace = format!("ns{}", i % namespaces);
                c.outcome.impact = Impact::Restart;
                report.add(c).unwrap();
            }
            let rows = ScanRows {
                only: Vec::new(),
                sort_by,
            };
            let mut out = Vec::new();
            let failed = emit(
                Format::Table,
                &ScanView {
                    report: &report,
                    rows,
                },
                &mut out,
            )
            .unwrap_err()
            .to_string();
            assert!(
                failed.starts_with(
                    "cannot sort the table's rows in a temporary file in /nonexistent/kubehash-tmp:"
                ),
                "{failed}"
            );
            assert!(
                out.is_empty(),
                "{sort_by:?}: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }

    /// A scan whose totals per workload, containers and objects not scanned went to disk
    /// (memory kept to a few of each) prints, in every format, order and selection, what the
    /// same scan held in memory prints.
    #[test]
    fn a_scan_kept_on_disk_prints_as_one_held_in_memory() {
        let list: Value = serde_json::from_slice(
            &std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/testdata/cluster/pods.json"
            ))
            .unwrap(),
        )
        .unwrap();
        let mut lines = Vec::new();
        for (i, pod) in list["items"].as_array().unwrap().iter().enumerate() {
            serde_json::to_writer(&mut lines, pod).unwrap();
            writeln!(
                lines,
                "\n{{\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c{i}\"}}}}"
            )
            .unwrap();
        }
        let to: KubeletVersion = "1.31".parse().unwrap();
        let from = FromVersions::Fixed("1.29".parse().unwrap());
        let setup = ScanSetup::new(to, from, Manifests::none());
        let input = Input::Bytes {
            name: "pods",
            bytes: &lines,
        };
        let held = scan_input(setup, |_| {}, "pods".into(), &input).unwrap();
        let mut kept = ScanReport {
            workloads: Totals::with_keep(2),
            containers: Spill::with_spill_after(3),
            problems: Spill::with_spill_after(1),
            ..ScanReport::new(to)
        };
        for c in held.containers.iter() {
            kept.add(c.unwrap()).unwrap();
        }
        for p in held.problems.iter() {
            kept.problems.push(p.unwrap()).unwrap();
        }
        kept.containers.finish().unwrap();
        kept.problems.finish().unwrap();
        kept.source = held.source.clone();
        kept.nodes = held.nodes.clone();
        assert!(kept.containers.spilled() && kept.problems.spilled());
        assert!(held.workloads.iter().count() > 4);
        for format in [
            Format::Table,
            Format::Wide,
            Format::Json,
            Format::Jsonl,
            Format::Yaml,
        ] {
            for sort_by in [
                SortBy::Verdict,
                SortBy::Node,
                SortBy::Container,
                SortBy::From,
            ] {
                for only in [vec![], vec!["restart".to_string(), "kept".to_string()]] {
                    let print = |report: &ScanReport| {
                        let rows = ScanRows {
                            only: only.clone(),
                            sort_by,
                        };
                        let mut out = Vec::new();
                        emit(format, &ScanView { report, rows }, &mut out).unwrap();
                        String::from_utf8(out).unwrap()
                    };
                    let want = print(&held);
                    assert!(want.contains("c3"), "{want}");
                    assert_eq!(print(&kept), want, "{format:?} {sort_by:?} {only:?}");
                }
            }
        }
    }

    #[test]
    fn a_count_of_one_is_singular() {
        assert_eq!(counted(1, "static pod"), "1 static pod");
        assert_eq!(counted(0, "restart"), "0 restarts");
        assert_eq!(counted(5, "restart"), "5 restarts");
    }
}
