//! `scan`'s report: the totals, then by node, by workload, and every container that matters,
//! with what to run next; its large parts sorted on disk before the first line is written.

use std::io::{self, Write};

use serde_json::Value;

use crate::analysis::plan::Verdict;
use crate::analysis::preflight::Status;
use crate::analysis::runs::{a_temporary_file, Items, Sorter};
use crate::analysis::scan::{ContainerImpact, Counts, Impact, NodeUpgrade, ScanReport};
use crate::analysis::spill::SPILL_AFTER;

use super::table::{counted, paint, visible_len, write_columns, write_row};
use super::{to_value, Format, Render, Typed, API_VERSION};

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
    let mut widths: Vec<usize> = header.iter().map(|h| visible_len(h)).collect();
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
            *w = (*w).max(visible_len(cell));
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

    if verdicts.is_empty() && !rows_wanted.only.is_empty() {
        let only: Vec<String> = rows_wanted.only.iter().map(|o| o.to_lowercase()).collect();
        writeln!(out, "No container is {}.", only.join(" or "))?;
    } else if verdicts.is_empty() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::scan::{scan_input, FromVersions, ScanSetup};
    use crate::analysis::spill::Spill;
    use crate::analysis::totals::Totals;
    use crate::cli::output::{emit, Format};
    use crate::kubelet::version::KubeletVersion;
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
            let name = "cli::output::scan::tests::a_table_that_cannot_be_sorted_writes_nothing";
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
}
