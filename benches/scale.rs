//! Scaling: `hash` and `scan` over 3k, 30k and 300k containers, from the input bytes, as the CLI
//! runs them (the one reader, the same allocator, output written to a sink). Criterion reports
//! containers per second for each size: linear work shows the same rate at every size.
//!
//! * `hash-1.30`: golden records as JSON Lines, `hash --versions 1.30 -o jsonl`;
//! * `hash-all-29`: the same with every version (3k and 30k only: it is ~29 hashes each);
//! * `scan-1.27-to-1.31`: a PodList of running pods, one golden container each, on 4 nodes;
//! * `hash-threads`: 3k containers (all 29 versions, and 1.30) on one thread, and framed with the
//!   parsing and hashing spread over the cores beside the reading thread (as `kubehash hash`
//!   reads a file);
//! * `scan-threads`: the 30k scan on one thread, and framed with the parsing and assessing spread
//!   over the cores beside the reading thread (as `kubehash scan` reads a file), same report;
//! * `scan-files`: 3k pods read from disk, as one PodList file and as a directory of 3k one-pod
//!   files (each read on its own, so that a problem names its file): the ratio is the cost of
//!   the files.
//!
//! After each group the bench prints the process's peak resident memory (`VmHWM`), which
//! includes the input held in memory for the bench; the CLI streams its input instead.
//!
//! Run: `cargo bench --bench scale` (about 6 minutes; `-- hash` or `-- scan` for one half).

#[path = "../tests/corpus/mod.rs"]
mod corpus;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use kubehash::analysis::hashing::for_each_hashed;
use kubehash::analysis::scan::{scan_input, FromVersions, ScanSetup, Threads};
use kubehash::cli::hash_output::{HashRow, HashWriter};
use kubehash::cli::output::Format;
use kubehash::kubelet::version::{parse_version_set, KubeletVersion};
use kubehash::source::manifests::Manifests;
use kubehash::source::parallel::Input;
use kubehash::source::pool::cores;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZES: [usize; 3] = [3_000, 30_000, 300_000];

/// `kubehash hash` on `bytes`: read, decode, hash, print JSON Lines (to a sink), with the
/// parsing and hashing on `workers` threads beside the framing reader, or all on this thread
/// with none (the one reader).
fn hash(bytes: &[u8], versions: &[KubeletVersion], workers: usize) -> usize {
    let mut out = HashWriter::new(Format::Jsonl, std::io::sink());
    let mut n = 0;
    let input = Input::Bytes {
        name: "bench",
        bytes,
    };
    for_each_hashed(&input, versions, workers, |(id, result)| {
        n += 1;
        out.row(&HashRow { id, result }).expect("sink");
    })
    .expect("read");
    out.finish().expect("sink");
    n
}

/// `kubehash scan --from 1.27 --to 1.31` on `bytes`.
fn scan(bytes: &[u8], threads: Threads) -> u64 {
    scan_from(
        &Input::Bytes {
            name: "bench",
            bytes,
        },
        threads,
    )
}

/// `kubehash scan --from 1.27 --to 1.31` on `input`.
fn scan_from(input: &Input, threads: Threads) -> u64 {
    let mut setup = ScanSetup::new(
        "1.31".parse().expect("version"),
        FromVersions::Fixed("1.27".parse().expect("version")),
        Manifests::none(),
    );
    setup.threads = threads;
    let report = scan_input(setup, |_| {}, "bench".into(), input).expect("scan");
    report.total.containers
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l["VmHWM:".len()..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn bench_hash(c: &mut Criterion) {
    let containers = corpus::golden_containers();
    for (label, spec, sizes) in [
        ("hash-1.30", "1.30", &SIZES[..]),
        ("hash-all-29", "all", &SIZES[..2]),
    ] {
        let versions = parse_version_set(spec).expect("versions");
        let mut g = c.benchmark_group(label);
        g.sample_size(10);
        for &n in sizes {
            let bytes = corpus::records_jsonl(&containers, n);
            g.throughput(Throughput::Elements(n as u64));
            g.bench_function(n.to_string(), |b| {
                b.iter(|| hash(black_box(&bytes), &versions, cores()))
            });
        }
        g.finish();
        eprintln!("{label}: peak RSS {}", peak_rss());
    }

    // 3,000 containers on one thread (the one reader), and framed with the parsing and hashing
    // spread over the cores beside the reading thread (what `kubehash hash` does with a file):
    // all 29 versions, where hashing is most of the work, and 1.30, where parsing is.
    let bytes = corpus::records_jsonl(&containers, 3_000);
    let mut g = c.benchmark_group("hash-threads");
    g.sample_size(10);
    g.throughput(Throughput::Elements(3_000));
    for (label, spec) in [("all-29", "all"), ("1.30", "1.30")] {
        let versions = parse_version_set(spec).expect("versions");
        g.bench_function(format!("{label}/one"), |b| {
            b.iter(|| hash(black_box(&bytes), &versions, 0))
        });
        g.bench_function(format!("{label}/all-cores"), |b| {
            b.iter(|| hash(black_box(&bytes), &versions, cores()))
        });
    }
    g.finish();
}

fn bench_scan(c: &mut Criterion) {
    let containers = corpus::golden_containers();
    let mut g = c.benchmark_group("scan-1.27-to-1.31");
    g.sample_size(10);
    for n in SIZES {
        let bytes = corpus::podlist(&containers, n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(n.to_string(), |b| {
            b.iter(|| scan(black_box(&bytes), Threads::default()))
        });
    }
    g.finish();
    eprintln!("scan: peak RSS {}", peak_rss());

    let bytes = corpus::podlist(&containers, 30_000);
    let mut g = c.benchmark_group("scan-threads");
    g.sample_size(10);
    g.throughput(Throughput::Elements(30_000));
    for (label, threads) in [("one", Threads::One), ("all-cores", Threads::default())] {
        g.bench_function(label, |b| b.iter(|| scan(black_box(&bytes), threads)));
    }
    g.finish();

    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("pods.json");
    std::fs::write(&file, corpus::podlist(&containers, 3_000)).expect("pods file");
    let files = dir.path().join("pods");
    std::fs::create_dir(&files).expect("pods directory");
    corpus::pod_files(&containers, 3_000, &files);
    let mut g = c.benchmark_group("scan-files");
    g.sample_size(10);
    g.throughput(Throughput::Elements(3_000));
    for (label, path) in [("one-file", &file), ("directory", &files)] {
        let input = Input::Path(path);
        assert_eq!(scan_from(&input, Threads::default()), 3_000);
        g.bench_function(label, |b| {
            b.iter(|| scan_from(black_box(&input), Threads::default()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_hash, bench_scan);
criterion_main!(benches);
