//! End-to-end scan throughput: containers assessed per second for an upgrade, from pod objects
//! already parsed (what `scan_source` does after reading), with the spec cache warm as in a real
//! cluster (a Deployment's replicas share one spec) and cold (every spec distinct).
//!
//! Run: `cargo bench --bench scan`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kubehash::analysis::scan::{scan_source, FromVersions, ScanSetup};
use serde_json::Value;

fn example_pods() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/pods.json");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("example")).expect("json");
    v["items"].as_array().cloned().unwrap_or_default()
}

fn bench_scan(c: &mut Criterion) {
    let templates = example_pods();
    let n = 2_000usize;
    let replicas: Vec<Value> = (0..n)
        .map(|i| templates[i % templates.len()].clone())
        .collect();
    let distinct: Vec<Value> = (0..n)
        .map(|i| {
            let mut p = templates[i % templates.len()].clone();
            // A different image tag per pod: no two specs alike.
            if let Some(c) = p.pointer_mut("/spec/containers/0/image") {
                *c = Value::String(format!("registry.example/app:{i}"));
            }
            p
        })
        .collect();
    let containers: usize = replicas
        .iter()
        .map(|p| {
            p["spec"]["containers"].as_array().map_or(0, Vec::len)
                + p["spec"]["initContainers"].as_array().map_or(0, Vec::len)
        })
        .sum();
    let mut g = c.benchmark_group("scan-1.30-to-1.31");
    g.throughput(Throughput::Elements(containers as u64));
    g.sample_size(10);
    for (label, pods) in [("replicas", &replicas), ("distinct", &distinct)] {
        g.bench_function(label, |b| {
            b.iter(|| {
                let to = "1.31".parse().expect("version");
                let from = FromVersions::Fixed("1.30".parse().expect("version"));
                let setup =
                    ScanSetup::new(to, from, kubehash::source::manifests::Manifests::none());
                let r = scan_source(
                    setup,
                    |_| {},
                    "bench".into(),
                    |each| {
                        pods.iter().cloned().for_each(each);
                        Ok(())
                    },
                )
                .expect("scan");
                r.total.containers
            })
        });
    }
    g.finish();
}

/// Reading a PodList as every command reads it (`source::reader`: Go's byte rules, then serde),
/// next to serde reading the same bytes directly (the reader before the byte rules; also the floor
/// for any reader built on serde's `io::Read` path), in one run.
fn bench_read(c: &mut Criterion) {
    let templates = example_pods();
    let items: Vec<Value> = (0..2_000)
        .map(|i| templates[i % templates.len()].clone())
        .collect();
    let bytes =
        serde_json::to_vec(&serde_json::json!({"kind": "List", "items": items})).expect("json");
    let mut g = c.benchmark_group("read-podlist");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.sample_size(10);
    g.bench_function("serde-ioread", |b| {
        b.iter(|| {
            let mut n = 0usize;
            let (recorder, seen) = kubehash::source::reader::Recorder::new(&bytes[..]);
            let read = serde_json::de::IoRead::new(recorder);
            kubehash::source::reader::for_each_value_raw(read, &seen, |_| n += 1).expect("read");
            n
        })
    });
    g.bench_function("reader", |b| {
        b.iter(|| {
            let mut n = 0usize;
            kubehash::source::reader::for_each_object(&bytes[..], "bench", |_| n += 1)
                .expect("read");
            n
        })
    });
    g.finish();
}

criterion_group!(benches, bench_scan, bench_read);
criterion_main!(benches);
