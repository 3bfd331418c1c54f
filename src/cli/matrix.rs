//! `kubehash matrix`: the restart table for every upgrade step between the given versions.

use anyhow::{bail, Context, Result};

use crate::analysis::matrix::matrix_input;
use crate::cli::args::MatrixArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::support::{no_pods_found, print, PodsWanted};
use crate::kubelet::version::parse_version_set;
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
    let input = Input::Path(&args.pods);
    let (m, problems) = matrix_input(&input, &versions, cores(), wanted.filter().as_ref())?;
    if m.containers == 0 && m.errors == 0 {
        // As scan says it: a table of zeros would read as "nothing restarts".
        return Err(no_pods_found(&input.name(), &problems, "counted", &wanted));
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
