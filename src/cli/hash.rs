//! `kubehash hash`: the hashes kubelet versions store for each container.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::cli::args::HashArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::output::{write_explained, Explained, HashRow, HashRows};
use crate::cli::support::{optional_version, print, stdout};
use crate::error::Problem;
use crate::kubelet::hash::{hash_container, hashed_text, marshalled_json, Annotation};
use crate::kubelet::sink::{format_hash, Fnv32a};
use crate::kubelet::version::{parse_version_set, KubeletVersion};
use crate::source::input::{for_each_item, Item};

pub fn run(args: HashArgs) -> Result<ExitStatus> {
    let versions = parse_version_set(&args.versions)?;
    let explain = optional_version("--explain", args.explain.as_deref())?;
    let input = args.input.unwrap_or_else(|| PathBuf::from("-"));
    if let Some(v) = explain {
        let mut items = Vec::new();
        for_each_item(&input, |i| items.push(i))?;
        return explain_items(&items, v, &mut stdout());
    }

    // Items are parsed one at a time and dropped once hashed; only the small rows are kept.
    let mut rows: Vec<HashRow> = Vec::new();
    for_each_item(&input, |item| {
        rows.push(match item {
            Item::Container { id, path, json } => HashRow {
                result: hash_container(&json, &versions, &path).map_err(Problem::from),
                id,
            },
            Item::Invalid { id, error } => HashRow {
                id,
                result: Err(error),
            },
        })
    })?;
    let rows = HashRows(rows);
    print(args.output, &rows)?;
    let failed: Vec<&Problem> = rows
        .0
        .iter()
        .filter_map(|r| r.result.as_ref().err())
        .collect();
    if failed.is_empty() {
        return Ok(ExitStatus::Success);
    }
    const SHOWN: usize = 10;
    for e in failed.iter().take(SHOWN) {
        eprintln!("kubehash: {e}");
    }
    if failed.len() > SHOWN {
        eprintln!(
            "kubehash: … and {} more (all are in the output)",
            failed.len() - SHOWN
        );
    }
    eprintln!(
        "kubehash: {} of {} containers could not be hashed",
        failed.len(),
        rows.0.len()
    );
    Ok(ExitStatus::Failure)
}

/// `--explain`: the exact text kubelet `v` feeds to FNV-1a, with the hash and (1.16 – 1.30) the
/// `json.Marshal` output it was made from.
fn explain_items(items: &[Item], v: KubeletVersion, out: &mut impl Write) -> Result<ExitStatus> {
    let mut annotations = vec![(Annotation::Hash, "io.kubernetes.container.hash")];
    if v.has_hash_without_resources() {
        annotations.push((
            Annotation::HashWithoutResources,
            "io.kubernetes.container.hashWithoutResources",
        ));
    }
    let mut failed = 0;
    for item in items {
        let (id, path, json) = match item {
            Item::Container { id, path, json } => (id, path, json),
            Item::Invalid { error, .. } => {
                eprintln!("kubehash: {error}");
                failed += 1;
                continue;
            }
        };
        for (a, key) in &annotations {
            let text = match hashed_text(json, v, *a, path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("kubehash: {e}");
                    failed += 1;
                    break;
                }
            };
            let explained = Explained {
                id,
                version: v,
                annotation: key,
                hash: format_hash(Fnv32a::hash(&text)),
                marshalled: marshalled_json(json, v, *a, path)?,
                text,
            };
            write_explained(&explained, out)?;
        }
    }
    out.flush()?;
    if failed > 0 {
        bail!("{failed} containers could not be explained");
    }
    Ok(ExitStatus::Success)
}
