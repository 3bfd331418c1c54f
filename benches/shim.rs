//! Latency the CRI shim adds, against calling containerd directly in the same run:
//! `ListContainers` with 300 containers, and `ContainerStatus`. The shim runs as deployed: the
//! real `kubehash shim` binary in its own process, with a real plan (it proves its state again
//! when it loads it).
//!
//! Two shims, for the two ways it edits answers: `shim` translates all 300 containers with the
//! hashes kubelet 1.30 and 1.31 really compute; their lengths differ for some (unpadded hex), so
//! it holds each whole gRPC message to re-encode lengths — the usual case on a real node.
//! `shim-streaming` translates the 150 containers whose two hashes have the same length, and edits
//! answers in place as they stream.
//!
//! Paths, called in rotation so that each sees the same machine state:
//! - `direct`: containerd's own socket;
//! - `relay`: `socat` copying bytes between two Unix sockets — a control that does no HTTP/2 work,
//!   so it shows what any extra hop costs on this machine (skipped if socat is not installed);
//! - `shim`: through `kubehash shim`.
//!
//! Criterion reports the means, with the CRI client kubehash uses. Then [`ROUNDS`] rounds of
//! percentiles are printed, each with the latency added over `direct` at p50 and p99, also as a
//! ratio to `direct`, and the medians over the rounds: first with a client that does not decode
//! the answers ([`RawCodec`]), which shows the shim's cost alone, then with the decoding client,
//! as a kubelet calls (decoding 300 containers is the same work on every path, but on two cores it
//! competes with the proxy for a CPU). Calls are made back to back: with a pause after each (as a
//! kubelet's calls come), every path got slower and no steadier here, since each call then also
//! pays for waking idle CPUs. Each proxy's CPU time per call (user + system, from `/proc`) is
//! printed too: unlike latency, it does not depend on which process waits for a CPU, so it stays
//! comparable between runs on a busy machine. Needs root and Debian's containerd, like the
//! integration tests (it uses their harness).
//!
//! Run: `cargo bench --bench shim`.

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes};
use criterion::{criterion_group, criterion_main, Criterion};
use harness::{create_pod, Containerd, TestContainer};
use http::uri::PathAndQuery;
use kubehash::runtime::cri::{proto, Cri};
use kubehash::shim::proxy::{ShimState, Translation};
use prost::Message;
use serde_json::json;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

const CONTAINERS: usize = 300;
const ROUNDS: usize = 5;
/// Calls per path and round.
const LIST_CALLS: usize = 1500;
const STATUS_CALLS: usize = 4500;

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// A gRPC codec that sends and receives message bytes as they are, so that a client measures how
/// long an answer takes to arrive and nothing else.
struct RawCodec;
struct Raw;

impl Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

/// One call with the raw codec; returns the answer's length.
async fn raw_call(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    req: &Bytes,
) -> usize {
    grpc.ready().await.expect("ready");
    grpc.unary(
        tonic::Request::new(req.clone()),
        PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
    .expect("call")
    .into_inner()
    .len()
}

/// Kills a helper process when the bench ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU time (user + system) used so far by process `pid` and its children (socat serves each
/// connection in a child).
fn cpu_time(pid: u32) -> Duration {
    // /proc/PID/stat: fields 14 and 15 (utime, stime) in USER_HZ, which Linux fixes at 100.
    let ticks = |pid: &str| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // fields[0] is field 3 (state)
        fields
            .get(11)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
            + fields
                .get(12)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
    };
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let total: u64 = ticks(&pid.to_string()) + children.split_whitespace().map(ticks).sum::<u64>();
    Duration::from_millis(total * 10)
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
    // Half the containers are chosen so that kubelet 1.30's and 1.31's hashes have the same
    // length (8 hex digits each); the other half are as they come. The kubelet's hashes are
    // unpadded hex, so a translation keeps its length only with p ≈ 0.88: translating all 300
    // (the realistic case) makes the shim hold whole messages to re-encode lengths, translating
    // only the chosen 150 lets it edit answers as they stream. Both shims run, on the same node.
    let (ids, specs) = rt.block_on(async {
        let mut cri = Cri::connect(&runtime).await.expect("cri");
        let specs: Vec<serde_json::Value> = (0..CONTAINERS)
            .map(|i| {
                let mut spec = json!({"name": format!("c{i}"), "image": harness::IMAGE});
                if i < CONTAINERS / 2 {
                    // 1.31 hashes only name and image, so the name is what varies.
                    for j in 0.. {
                        spec = json!({"name": format!("c{i}-{j}"), "image": harness::IMAGE});
                        if harness::hash(&spec, "1.30").len() == 8
                            && harness::hash(&spec, "1.31").len() == 8
                        {
                            break;
                        }
                    }
                }
                spec
            })
            .collect();
        let tcs: Vec<TestContainer> = specs
            .iter()
            .map(|spec| TestContainer {
                spec: spec.clone(),
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
            &tcs,
            "1.30".parse().expect("v"),
        )
        .await;
        (pod.container_ids, specs)
    });
    // The shims prove their states again when they load them, so the states are real plans.
    let state_for = |n: usize| {
        let mut state = ShimState {
            to: "1.31".into(),
            from: Some("1.30".into()),
            created_at_unix: 0,
            translations: Default::default(),
        };
        for (id, spec) in ids.iter().zip(&specs).take(n) {
            state.translations.insert(
                id.clone(),
                Translation {
                    pod: "bench/p".into(),
                    container: spec["name"].as_str().expect("name").into(),
                    stored_hash: harness::hash(spec, "1.30"),
                    new_hash: harness::hash(spec, "1.31"),
                    stored_hash_without_resources: None,
                    new_hash_without_resources: None,
                    spec: Some(spec.clone()),
                },
            );
        }
        state
    };
    let whole = state_for(CONTAINERS);
    let streaming = state_for(CONTAINERS / 2);
    assert!(!whole.keeps_lengths() && streaming.keeps_lengths());
    let mut shims = Vec::new();
    for (name, state) in [("shim", whole), ("shim-streaming", streaming)] {
        let dir = ctrd.dir.join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        state.save(&dir.join("shim-state.json")).expect("state");
        let (child, endpoint) = harness::start_shim(&dir, &runtime, &[]);
        shims.push((name, Reaped(child), endpoint));
    }
    let relay = start_relay(&ctrd.dir, &ctrd.socket());
    // (name, endpoint, the proxy's pid)
    let mut paths = vec![("direct", runtime.clone(), None)];
    match &relay {
        Some((relay, endpoint)) => paths.push(("relay", endpoint.clone(), Some(relay.0.id()))),
        None => println!("relay control skipped: socat is not installed"),
    }
    for (name, child, endpoint) in &shims {
        paths.push((name, endpoint.clone(), Some(child.0.id())));
    }
    let mut clients: Vec<(&str, Cri, Option<u32>)> = paths
        .iter()
        .map(|(name, endpoint, pid)| {
            let cri = rt.block_on(Cri::connect(endpoint)).expect("connect");
            (*name, cri, *pid)
        })
        .collect();
    let one = ids[ids.len() / 2].clone();

    let mut g = c.benchmark_group("cri");
    g.sample_size(30).measurement_time(Duration::from_secs(5));
    for (name, cri, _) in clients.iter_mut().filter(|(n, _, _)| *n != "relay") {
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
    let mut raw: Vec<tonic::client::Grpc<Channel>> = paths
        .iter()
        .map(|(_, endpoint, _)| {
            let channel = rt
                .block_on(kubehash::runtime::cri::unix_channel(endpoint))
                .expect("connect");
            tonic::client::Grpc::new(channel)
        })
        .collect();
    let list_req = Bytes::from(proto::ListContainersRequest { filter: None }.encode_to_vec());
    let status_req = Bytes::from(
        proto::ContainerStatusRequest {
            container_id: one.clone(),
            verbose: true,
        }
        .encode_to_vec(),
    );
    for (call, calls, decode) in [
        ("ListContainers-300", LIST_CALLS, false),
        ("ContainerStatus", STATUS_CALLS, false),
        ("ListContainers-300, decoded", LIST_CALLS, true),
        ("ContainerStatus, decoded", STATUS_CALLS, true),
    ] {
        // added[path][round] = (p50, p99) over direct, the proxy's CPU µs per call, and the
        // ratios p50 / direct p50 and p99 / direct p99
        let mut added = vec![Vec::new(); n];
        for round in 0..ROUNDS {
            let mut times = vec![Vec::with_capacity(calls); n];
            let cpu_before: Vec<Option<Duration>> =
                clients.iter().map(|c| c.2.map(cpu_time)).collect();
            for turn in 0..calls {
                for k in 0..n {
                    let i = (turn + k) % n;
                    let status = call.starts_with("ContainerStatus");
                    let t = Instant::now();
                    match (decode, status) {
                        (false, true) => rt.block_on(raw_call(
                            &mut raw[i],
                            "/runtime.v1.RuntimeService/ContainerStatus",
                            &status_req,
                        )),
                        (false, false) => rt.block_on(raw_call(
                            &mut raw[i],
                            "/runtime.v1.RuntimeService/ListContainers",
                            &list_req,
                        )),
                        (true, true) => {
                            rt.block_on(clients[i].1.container_status(&one))
                                .expect("status");
                            0
                        }
                        (true, false) => rt
                            .block_on(clients[i].1.list_containers())
                            .expect("list")
                            .len(),
                    };
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
                let cpu = match (clients[i].2, cpu_before[i]) {
                    (Some(pid), Some(before)) => {
                        (cpu_time(pid) - before).as_secs_f64() * 1e6 / calls as f64
                    }
                    _ => 0.0,
                };
                let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
                let (r50, r99) = (ratio(*p50, pct[0].0), ratio(*p99, pct[0].1));
                added[i].push((a50, a99, cpu, r50, r99));
                line += &format!(" {} p50 {:?} p99 {:?}", clients[i].0, p50, p99);
                if i > 0 {
                    line += &format!(
                        " (added {a50:.0} µs / {a99:.0} µs, ×{r50:.2} / ×{r99:.2}; CPU {cpu:.0} µs/call)"
                    );
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
            let cpus = median(rounds.iter().map(|r| r.2).collect());
            let r50s = median(rounds.iter().map(|r| r.3).collect());
            let r99s = median(rounds.iter().map(|r| r.4).collect());
            println!(
                "{call}: {} adds p50 {p50s:.0} µs, p99 {p99s:.0} µs (×{r50s:.2} / ×{r99s:.2} of direct); uses {cpus:.0} µs CPU per call (median of {ROUNDS} rounds of {calls} calls)",
                clients[i].0
            );
        }
    }
    drop(clients);
    drop(relay);
    drop(shims);
    drop(ctrd);
}

criterion_group!(benches, bench_shim);
criterion_main!(benches);
