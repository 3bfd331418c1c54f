//! `kubehash hash`: the hashes kubelet versions store for each container.

use std::io::{IsTerminal, Seek, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::analysis::hashing::for_each_hashed;
use crate::analysis::runs::a_temporary_file;
use crate::cli::args::HashArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::hash_output::{write_explained, Explained, HashRow, HashWriter};
use crate::cli::output::ForPeople;
use crate::cli::support::{optional_version, stdout, SHOWN_ON_STDERR};
use crate::error::Problem;
use crate::kubelet::hash::{hashed_text, marshalled_json, Annotation};
use crate::kubelet::sink::{format_hash, Fnv32a};
use crate::kubelet::version::{parse_version_set, KubeletVersion};
use crate::source::input::{for_each_placed_object, object_items, Item};
use crate::source::parallel::Input;
use crate::source::pool::cores;

pub fn run(args: HashArgs) -> Result<ExitStatus> {
    let versions = parse_version_set(&args.versions).context("--versions")?;
    let explain = optional_version("--explain", args.explain.as_deref())?;
    let input = args.input.unwrap_or_else(|| PathBuf::from("-"));
    if let Some(v) = explain {
        // The whole input is read before anything is printed.
        let mut objects = Vec::new();
        for_each_placed_object(&input, |source, n, o| {
            objects.push((source.to_string(), n, o))
        })?;
        let mut items = Vec::new();
        for (source, n, object) in &objects {
            object_items(object, source, *n, &mut |i| items.push(i));
        }
        // The exact bytes, for a file or a program; on a terminal, its control characters are
        // shown, not obeyed (a kubelet ≤ 1.15 dump holds a string's bytes raw).
        let mut out = stdout();
        if std::io::stdout().is_terminal() {
            return explain_items(&items, v, &mut ForPeople::new(&mut out, false));
        }
        return explain_items(&items, v, &mut out);
    }

    // Items are parsed one at a time and dropped once hashed; rows are printed as they come.
    // Rows go to a spool (memory, then a temporary file past 8 MB) and reach stdout only when
    // the whole input was read: a bad input prints its error and nothing half-way.
    let spool = std::io::BufWriter::with_capacity(1 << 16, tempfile::SpooledTempFile::new(8 << 20));
    let mut out = HashWriter::new(args.output, spool);
    let (mut rows, mut failed) = (0usize, 0usize);
    let mut shown: Vec<Problem> = Vec::new();
    let mut written = Ok(());
    for_each_hashed(&Input::Path(&input), &versions, cores(), |(id, result)| {
        let row = HashRow { id, result };
        rows += 1;
        if let Err(e) = &row.result {
            failed += 1;
            if shown.len() < SHOWN_ON_STDERR {
                shown.push(e.clone());
            }
        }
        if written.is_ok() {
            written = out.row(&row);
        }
    })?;
    // The rows' spool names where it is when it fails (`$TMPDIR` missing or full).
    let spooled = |e: std::io::Error| {
        anyhow::anyhow!(
            "the rows kept before printing ({}): {e}",
            a_temporary_file()
        )
    };
    written.map_err(spooled)?;
    let mut spool = out
        .finish()
        .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
        .map_err(spooled)?;
    spool.rewind().map_err(spooled)?;
    let mut stdout = stdout();
    std::io::copy(&mut spool, &mut stdout)?;
    stdout.flush()?;
    if failed == 0 {
        return Ok(ExitStatus::Success);
    }
    for e in &shown {
        say!("kubehash: {e}");
    }
    if failed > SHOWN_ON_STDERR {
        say!(
            "kubehash: … and {} more (all are in the output)",
            failed - SHOWN_ON_STDERR
        );
    }
    say!("kubehash: {failed} of {rows} containers could not be hashed");
    Ok(ExitStatus::Failure)
}

/// `--explain`: the exact text kubelet `v` feeds to FNV-1a, with the hash and (1.16 – 1.30) the
/// `json.Marshal` output it was made from.
fn explain_items(
    items: &[Item<&Value>],
    v: KubeletVersion,
    out: &mut impl Write,
) -> Result<ExitStatus> {
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
                say!("kubehash: {error}");
                failed += 1;
                continue;
            }
        };
        for (a, key) in &annotations {
            let text = match hashed_text(*json, v, *a, path) {
                Ok(t) => t,
                Err(e) => {
                    say!("kubehash: {e}");
                    failed += 1;
                    break;
                }
            };
            let explained = Explained {
                id,
                version: v,
                annotation: key,
                hash: format_hash(Fnv32a::hash(&text)),
                marshalled: marshalled_json(*json, v, *a, path)?,
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
