//! `kubehash scan`: which containers a kubelet upgrade would restart, per node and workload; with
//! `--cri`, this node's containers with a verdict each (as `node plan`).

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};

use crate::analysis::preflight::removed_sources;
use crate::analysis::scan::{scan_input, scan_source, FromVersions, ScanSetup};
use crate::cli::args::ScanArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::node::print_plan;
use crate::cli::node_pods;
use crate::cli::output::{ScanRows, ScanView};
use crate::cli::support::{
    claims_file, no_pods_found, optional_version, print, runtime, version_flag, warn_upgrade,
    PodsWanted, SHOWN_ON_STDERR,
};
use crate::kubelet::version::KubeletVersion;
use crate::source::claims::Claims;
use crate::source::cluster::Cluster;
use crate::source::nodes::NodeVersions;
use crate::source::parallel::Input;

pub fn run(args: ScanArgs) -> Result<ExitStatus> {
    let to = version_flag("--to", &args.to)?;
    let fixed_from = optional_version("--from", args.from.as_deref())?;
    // Checked here, before any file or server is read; the API server checks it the same way.
    let wanted = PodsWanted::checked(&args.narrow)?;
    if let Some(endpoint) = &args.cri {
        return print_plan(
            endpoint,
            to,
            fixed_from,
            &args.source,
            &crate::source::host::HostPaths::default(),
            args.output,
            args.fail_on_restart,
        );
    }
    // A spinner with the count on stderr; indicatif draws nothing when stderr is not a terminal.
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "kubehash: {spinner} read {pos} objects ({per_sec})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let progress = |n| bar.set_position(n);
    // --from, else --nodes; without either, the cluster's Node objects (for --cluster).
    let given_from = match (fixed_from, &args.nodes) {
        (Some(f), _) => Some(FromVersions::Fixed(f)),
        (None, Some(path)) => Some(FromVersions::PerNode(NodeVersions::from_path(path)?)),
        (None, None) => None,
    };
    let manifests = node_pods::manifests(&args.source, None)?;
    let report = if args.source.from_cluster() {
        let rt = runtime()?;
        let cluster = rt.block_on(Cluster::connect(
            args.source.kubeconfig.as_deref(),
            args.source.context.as_deref(),
        ))?;
        let from = match given_from {
            Some(f) => f,
            None => FromVersions::PerNode(rt.block_on(cluster.node_versions())?),
        };
        let (ns, sel) = (
            args.narrow.namespace.as_deref(),
            args.narrow.selector.as_deref(),
        );
        let scanned = match &args.source.context {
            Some(ctx) => format!("API server {} (context {ctx})", cluster.url()),
            None => format!("API server {}", cluster.url()),
        };
        let mut setup = ScanSetup::new(to, from, manifests);
        // Only the per-node checks read them.
        if matches!(setup.from, FromVersions::PerNode(_)) {
            // Listed, a whole cluster's (or a namespace's); None, said, when they cannot be.
            setup.claims = node_pods::said(rt.block_on(cluster.claims(ns, &removed_sources())));
        }
        scan_source(setup, progress, scanned, |each| {
            rt.block_on(cluster.for_each_pod_in(ns, sel, None, each))
                .map(|_| ())
        })?
    } else {
        let Some(from) = given_from else {
            bail!(
                "say which kubelet version the nodes run now: --from VERSION, or --nodes FILE \
                 (kubectl get nodes -o json)"
            );
        };
        let pods = args
            .source
            .pods
            .as_deref()
            .context("--pods PATH or --cluster is needed")?;
        let mut setup = ScanSetup::new(to, from, manifests);
        setup.keep = wanted.filter();
        if let Some(path) = claims_file(&args.source)? {
            setup.claims = Some(Claims::from_path(path, &removed_sources())?);
        }
        scan_input(
            setup,
            progress,
            Input::Path(pods).name(),
            &Input::Path(pods),
        )?
    };
    bar.finish_and_clear();
    if report.total.containers == 0 {
        let source = match &args.source.pods {
            Some(p) if p.as_os_str() == "-" => "stdin".to_string(),
            Some(p) => p.display().to_string(),
            None => "the cluster".to_string(),
        };
        return Err(no_pods_found(&source, &report.problems, "scanned", &wanted));
    }
    let view = ScanView {
        report: &report,
        rows: ScanRows {
            only: args.only.clone(),
            sort_by: args.sort_by,
        },
    };
    print(args.output, &view)?;
    // Every one is in the output too (a line each in a table, `problems` otherwise).
    for p in report.problems.iter().take(SHOWN_ON_STDERR) {
        let p = p.context("cannot read back the objects not scanned")?;
        say!("kubehash: not scanned: {p}");
    }
    if report.problems.len() > SHOWN_ON_STDERR {
        say!(
            "kubehash: … and {} more not scanned (all are in the output)",
            report.problems.len() - SHOWN_ON_STDERR
        );
    }
    let froms: BTreeSet<KubeletVersion> = report
        .nodes
        .values()
        .filter_map(|n| n.from.as_deref()?.parse().ok())
        .collect();
    for from in froms {
        warn_upgrade(from, to);
    }
    // A recreated static pod restarts its containers as surely as a hash change does.
    if args.fail_on_restart && (report.total.restart > 0 || report.total.recreated > 0) {
        return Ok(ExitStatus::Restarts);
    }
    Ok(ExitStatus::unless_incomplete(
        report.total.error == 0 && report.problems.is_empty(),
    ))
}
