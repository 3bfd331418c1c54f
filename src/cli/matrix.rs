//! `kubehash matrix`: the restart table for every upgrade step between the given versions.

use anyhow::Result;

use crate::analysis::matrix::RestartMatrix;
use crate::cli::args::MatrixArgs;
use crate::cli::exit::ExitStatus;
use crate::cli::support::print;
use crate::kubelet::version::parse_version_set;
use crate::source::pods::pod_containers;
use crate::source::reader::for_each_object_in_path;

pub fn run(args: MatrixArgs) -> Result<ExitStatus> {
    let versions = parse_version_set(&args.versions)?;
    let mut m = RestartMatrix::new(&versions);
    let mut problems = Vec::new();
    for_each_object_in_path(&args.pods, |pod| match pod_containers(pod) {
        Ok(cs) => cs.iter().for_each(|c| m.add(&c.json)),
        Err(e) => problems.push(e),
    })?;
    print(args.output, &m)?;
    for p in &problems {
        eprintln!("kubehash: not counted: {p}");
    }
    Ok(ExitStatus::unless_incomplete(
        problems.is_empty() && m.errors == 0,
    ))
}
