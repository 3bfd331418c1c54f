//! End-to-end scan throughput: containers assessed per second for an upgrade, from pod objects
//! already parsed (what `scan_source` does after reading), with the spec cache warm as in a real
//! cluster (a Deployment's replicas share one spec) and cold (every spec distinct).
//!
//! Run: `cargo bench --bench scan`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kubehash::analysis::scan::{scan_source, FromVersions};
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
                let r = scan_source(
                    to,
                    from,
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

criterion_group!(benches, bench_scan);
criterion_main!(benches);
