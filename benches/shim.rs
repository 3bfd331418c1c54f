//! Latency the CRI shim adds, against calling containerd directly in the same run:
//! `ListContainers` with 300 containers, and `ContainerStatus`. The shim translates every one of
//! the 300 containers (the most work it can have) and runs as deployed: the real `kubehash shim`
//! binary in its own process.
//!
//! Paths, called in rotation so that each sees the same machine state:
//! - `direct`: containerd's own socket;
//! - `relay`: `socat` copying bytes between two Unix sockets — a control that does no HTTP/2 work,
//!   so it shows what any extra hop costs on this machine (skipped if socat is not installed);
//! - `shim`: through `kubehash shim`.
//!
//! Criterion reports the means; then [`ROUNDS`] rounds of percentiles are printed, each with the
//! latency added over `direct` at p50 and p99, and their medians over the rounds. Needs root and
//! Debian's containerd, like the integration tests (it uses their harness).
//!
//! Run: `cargo bench --bench shim`.

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use harness::{create_pod, Containerd, TestContainer};
use kubehash::cri::{keys, Cri};
use kubehash::shim::{ShimState, Translation};
use serde_json::json;

const CONTAINERS: usize = 300;
const ROUNDS: usize = 3;
/// Calls per path and round.
const LIST_CALLS: usize = 1500;
const STATUS_CALLS: usize = 4500;

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Kills a helper process when the bench ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_relay(dir: &Path, runtime_socket: &Path) -> Option<(Reaped, String)> {
    let sock = dir.join("relay.sock");
    let child = Command::new("socat")
        .arg(format!("UNIX-LISTEN:{},fork", sock.display()))
        .arg(format!("UNIX-CONNECT:{}", runtime_socket.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let child = Reaped(child);
    harness::wait_for_socket(&sock, || format!("socat did not open {}", sock.display()));
    Some((child, format!("unix://{}", sock.display())))
}

fn bench_shim(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ctrd = Containerd::start();
    let runtime = ctrd.endpoint();
    let ids = rt.block_on(async {
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
        state
            .save(&ctrd.dir.join("shim-state.json"))
            .expect("state");
        pod.container_ids
    });
    let (shim, shim_endpoint) = harness::start_shim(&ctrd.dir, &runtime, &[]);
    let _shim = Reaped(shim);
    let relay = start_relay(&ctrd.dir, &ctrd.socket());
    let mut paths = vec![("direct", runtime.clone())];
    match &relay {
        Some((_, endpoint)) => paths.push(("relay", endpoint.clone())),
        None => println!("relay control skipped: socat is not installed"),
    }
    paths.push(("shim", shim_endpoint));
    let mut clients: Vec<(&str, Cri)> = paths
        .iter()
        .map(|(name, endpoint)| {
            let cri = rt.block_on(Cri::connect(endpoint)).expect("connect");
            (*name, cri)
        })
        .collect();
    let one = ids[ids.len() / 2].clone();

    let mut g = c.benchmark_group("cri");
    g.sample_size(30).measurement_time(Duration::from_secs(5));
    for (name, cri) in clients.iter_mut().filter(|(n, _)| *n != "relay") {
        g.bench_function(format!("ListContainers-300/{name}"), |b| {
            b.iter(|| rt.block_on(cri.list_containers()).expect("list").len())
        });
        g.bench_function(format!("ContainerStatus/{name}"), |b| {
            b.iter(|| rt.block_on(cri.container_status(&one)).expect("status"))
        });
    }
    g.finish();

    // Percentiles. Each turn calls every path once, starting from a different one each time.
    let n = clients.len();
    for (call, calls) in [
        ("ListContainers-300", LIST_CALLS),
        ("ContainerStatus", STATUS_CALLS),
    ] {
        // added[path][round] = (p50, p99) over direct
        let mut added = vec![Vec::new(); n];
        for round in 0..ROUNDS {
            let mut times = vec![Vec::with_capacity(calls); n];
            for turn in 0..calls {
                for k in 0..n {
                    let i = (turn + k) % n;
                    let cri = &mut clients[i].1;
                    let t = Instant::now();
                    if call == "ContainerStatus" {
                        rt.block_on(cri.container_status(&one)).expect("status");
                    } else {
                        rt.block_on(cri.list_containers()).expect("list");
                    }
                    times[i].push(t.elapsed());
                }
            }
            let pct: Vec<(Duration, Duration)> = times
                .iter_mut()
                .map(|t| (percentile(t, 0.5), percentile(t, 0.99)))
                .collect();
            let mut line = format!("{call} round {}:", round + 1);
            for (i, (p50, p99)) in pct.iter().enumerate() {
                let over = |a: Duration, b: Duration| a.as_secs_f64() * 1e6 - b.as_secs_f64() * 1e6;
                let (a50, a99) = (over(*p50, pct[0].0), over(*p99, pct[0].1));
                added[i].push((a50, a99));
                line += &format!(" {} p50 {:?} p99 {:?}", clients[i].0, p50, p99);
                if i > 0 {
                    line += &format!(" (added {a50:.0} µs / {a99:.0} µs)");
                }
                line += ";";
            }
            println!("{line}");
        }
        for (i, rounds) in added.iter_mut().enumerate().skip(1) {
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let p50s = median(rounds.iter().map(|r| r.0).collect());
            let p99s = median(rounds.iter().map(|r| r.1).collect());
            println!(
                "{call}: {} adds p50 {p50s:.0} µs, p99 {p99s:.0} µs (median of {ROUNDS} rounds of {calls} calls)",
                clients[i].0
            );
        }
    }
    drop(clients);
    drop(relay);
    drop(ctrd);
}

criterion_group!(benches, bench_shim);
criterion_main!(benches);
