//! `kubehash matrix`: the restart table for every upgrade step between the given versions.

use anyhow::{bail, Context, Result};

use crate::analysis::matrix::{matrix_input, matrix_source};
use crate::cli::args::MatrixArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::support::{no_pods_found, print, runtime, PodsWanted};
use crate::kubelet::version::parse_version_set;
use crate::source::cluster::Cluster;
use crate::source::parallel::Input;
use crate::source::pool::cores;

pub fn run(args: MatrixArgs) -> Result<ExitStatus> {
    let versions = parse_version_set(&args.versions).context("--versions")?;
    let wanted = PodsWanted::checked(&args.narrow)?;
    if versions.len() < 2 {
        bail!(
            "--versions {:?} names one kubelet version; the matrix compares upgrades between \
             versions: give two or more (e.g. 1.30,1.31 or 1.27..1.31)",
            args.versions
        );
    }
    let (m, problems, source) = match &args.pods {
        Some(pods) => {
            let input = Input::Path(pods);
            let (m, problems) = matrix_input(&input, &versions, cores(), wanted.filter().as_ref())?;
            (m, problems, input.name())
        }
        None => {
            let rt = runtime()?;
            let cluster = rt.block_on(Cluster::connect(
                args.kubeconfig.as_deref(),
                args.context.as_deref(),
            ))?;
            let (ns, sel) = (wanted.namespace.as_deref(), wanted.selector.as_deref());
            let produce = |each: &mut dyn FnMut(serde_json::Value)| {
                rt.block_on(cluster.for_each_pod_in(ns, sel, None, each))
                    .map(|_| ())
            };
            let name = format!("API server {}", cluster.url());
            let (m, problems) = matrix_source(&name, &versions, cores(), produce)?;
            (m, problems, "the cluster".to_string())
        }
    };
    if m.containers == 0 && m.errors == 0 {
        // As scan says it: a table of zeros would read as "nothing restarts".
        return Err(no_pods_found(&source, &problems, "counted", &wanted));
    }
    print(args.output, &m)?;
    for p in problems.iter() {
        let p = p.context("cannot read back the objects not counted")?;
        say!("kubehash: not counted: {p}");
    }
    Ok(ExitStatus::unless_incomplete(
        problems.is_empty() && m.errors == 0,
    ))
}
