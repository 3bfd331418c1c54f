//! Latency the CRI shim adds, against calling containerd directly in the same run:
//! `ListContainers` with 300 containers, and `ContainerStatus`. The shim translates every one of
//! the 300 containers (the most work it can have). Needs root and Debian's containerd, like the
//! integration tests (it uses their harness). Prints p50/p99 and the added p99 after criterion's
//! means.
//!
//! Run: `cargo bench --bench shim`.

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use harness::{create_pod, Containerd, TestContainer};
use kubehash::cri::{keys, Cri};
use kubehash::shim::{ShimState, Translation};
use serde_json::json;

const CONTAINERS: usize = 300;

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn bench_shim(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let ctrd = Containerd::start();
    let runtime = ctrd.endpoint();
    let (ids, listen) = rt.block_on(async {
        let mut cri = Cri::connect(&runtime).await.expect("cri");
        let specs: Vec<TestContainer> = (0..CONTAINERS)
            .map(|i| TestContainer {
                spec: json!({"name": format!("c{i}"), "image": harness::IMAGE}),
                stored_hash: None,
            })
            .collect();
        // Creating and starting 300 containers takes a while; one pod holds them all.
        let pod = create_pod(
            &mut cri,
            &ctrd.dir.join("pods"),
            "bench",
            "p",
            "uid-bench",
            &specs,
            "1.30".parse().expect("v"),
        )
        .await;
        let listed = cri.list_containers().await.expect("list");
        let mut state = ShimState {
            to: "1.31".into(),
            created_at_unix: 0,
            translations: Default::default(),
        };
        for c in &listed {
            if let Some(h) = c.annotations.get(keys::HASH) {
                state.translations.insert(
                    c.id.clone(),
                    Translation {
                        pod: "bench/p".into(),
                        container: c.id.clone(),
                        stored_hash: h.clone(),
                        // As long as the stored hash, as translations usually are (the shim then
                        // edits answers as they stream).
                        new_hash: "f".repeat(h.len()),
                        stored_hash_without_resources: None,
                        new_hash_without_resources: None,
                    },
                );
            }
        }
        let listen = format!("unix://{}/shim.sock", ctrd.dir.display());
        let (l, r) = (listen.clone(), runtime.clone());
        tokio::spawn(async move {
            let _ = kubehash::shim::serve(&l, &r, state, 0o600, std::future::pending()).await;
        });
        while !ctrd.dir.join("shim.sock").exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (pod.container_ids, listen)
    });
    let (mut direct, mut via) = rt.block_on(async {
        (
            Cri::connect(&runtime).await.expect("direct"),
            Cri::connect(&listen).await.expect("via shim"),
        )
    });
    let one = ids[ids.len() / 2].clone();

    let mut g = c.benchmark_group("cri");
    g.sample_size(30).measurement_time(Duration::from_secs(5));
    g.bench_function("ListContainers-300/direct", |b| {
        b.iter(|| rt.block_on(direct.list_containers()).expect("list").len())
    });
    g.bench_function("ListContainers-300/shim", |b| {
        b.iter(|| rt.block_on(via.list_containers()).expect("list").len())
    });
    g.bench_function("ContainerStatus/direct", |b| {
        b.iter(|| rt.block_on(direct.container_status(&one)).expect("status"))
    });
    g.bench_function("ContainerStatus/shim", |b| {
        b.iter(|| rt.block_on(via.container_status(&one)).expect("status"))
    });
    g.finish();

    // Percentiles, interleaving direct and shim calls so both see the same machine load.
    for (name, n) in [("ListContainers-300", 400usize), ("ContainerStatus", 2000)] {
        let (mut d, mut s) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let t = Instant::now();
            if name == "ContainerStatus" {
                rt.block_on(direct.container_status(&one)).expect("s");
            } else {
                rt.block_on(direct.list_containers()).expect("l");
            }
            d.push(t.elapsed());
            let t = Instant::now();
            if name == "ContainerStatus" {
                rt.block_on(via.container_status(&one)).expect("s");
            } else {
                rt.block_on(via.list_containers()).expect("l");
            }
            s.push(t.elapsed());
        }
        let (d50, d99, s50, s99) = (
            percentile(d.clone(), 0.5),
            percentile(d, 0.99),
            percentile(s.clone(), 0.5),
            percentile(s, 0.99),
        );
        println!(
            "{name}: direct p50 {d50:?} p99 {d99:?}; via shim p50 {s50:?} p99 {s99:?}; added p50 {:?} p99 {:?}; ratio p50 {:.2}",
            s50.saturating_sub(d50), s99.saturating_sub(d99), s50.as_secs_f64() / d50.as_secs_f64()
        );
    }
    drop(ctrd);
}

criterion_group!(benches, bench_shim);
criterion_main!(benches);
